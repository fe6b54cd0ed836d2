"""A stop asked for during a scrub ends it after the run of records being read, not after
the whole ledger: a bookie's SIGTERM waited for a scrub thread reading a ledger of gigabytes
(seconds), so a clean stop took as long as a crash to come back from."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from storage_helpers import KEY, Acks, entry_body, small_config

from bkeeper.storage import Storage
from bkeeper.storage.scrub import scrub
from bkeeper.testing.clock import FakeClock

ENTRIES = 2000  # eight runs of 256 records


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[Storage]:
    """A bookie's storage with ledger 7 of ``ENTRIES`` entries, every one in an entry log."""
    config = small_config(
        str(tmp_path / "bookie"), entry_log_bytes_max=1 << 20, write_cache_bytes_max=1 << 20
    )
    acks = Acks()
    storage = Storage.open(config, on_durable=acks)
    try:
        for entry_id in range(ENTRIES):
            storage.add_entry(7, entry_id, KEY, entry_body(7, entry_id), token=entry_id)
        acks.wait_for(ENTRIES - 1)
        storage.checkpoint()  # every entry in an entry log
        yield storage
    finally:
        storage.close()


def test_a_stop_during_a_large_ledger_ends_the_scrub_after_one_run_of_records(
    storage: Storage,
) -> None:
    whole = scrub(storage, bytes_per_s=1 << 40)
    assert whole.ledgers == 1 and not whole.stopped and whole.damaged == {}

    stop = threading.Event()
    calls = itertools.count()

    class StopAtSecondRead(FakeClock):  # the stop arrives as the first run is paced
        def monotonic(self) -> float:
            if next(calls) >= 1:
                stop.set()
            return 0.0

    stopped = scrub(storage, bytes_per_s=1 << 40, stop=stop, clock=StopAtSecondRead())
    assert stopped.stopped
    assert 0 < stopped.bytes_read <= whole.bytes_read // 4  # one run of 256, not 2000


def test_the_pace_holds_within_a_ledger(storage: Storage) -> None:
    """The scrub waits between runs of records when ahead of ``bytes_per_s``, not only
    between ledgers (one big ledger was read at full speed, then slept)."""
    waits: list[float] = []

    class Recording(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            waits.append(0.0 if timeout is None else timeout)
            return False

    report = scrub(storage, bytes_per_s=1000, stop=Recording(), clock=FakeClock(0.0))
    assert not report.stopped and report.ledgers == 1
    assert len(waits) >= ENTRIES // 256  # a wait after every run, not one per ledger
