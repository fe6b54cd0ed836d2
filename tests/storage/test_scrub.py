"""Damaged entry-log records (bit rot while a bookie is stopped): a read or a scrub marks
the entry damaged and its ledger in limbo, the entry answers "unknown" (never a bad body,
never "absent") and is left out of the entries listed until a whole copy is added again."""

from __future__ import annotations

from pathlib import Path

import pytest
from storage_helpers import KEY, Acks, entry_body, small_config

from bkeeper.common.errors import DataUnknownError
from bkeeper.storage import Storage
from bkeeper.storage.scrub import scrub
from bkeeper.testing.entry_log_faults import flip_entry_log_records

ENTRIES = 50


def stored_then_damaged(tmp_path: Path) -> tuple[Storage, tuple[int, ...]]:
    """Ledger 1 (entries 0..49) and ledger 2 in entry logs, checkpointed; the bookie
    stopped; the last 5 records of ledger 1 flipped; opened again."""
    config = small_config(str(tmp_path / "bookie"), write_cache_bytes_max=1 << 20)
    acks = Acks()
    storage = Storage.open(config, on_durable=acks)
    for entry_id in range(ENTRIES):
        storage.add_entry(1, entry_id, KEY, entry_body(1, entry_id, entry_id - 1), token=entry_id)
    storage.add_entry(2, 0, KEY, entry_body(2, 0), token="two")
    acks.wait_for("two")
    storage.checkpoint()
    storage.close()
    flipped = flip_entry_log_records(tmp_path / "bookie", [1], count=5)
    assert flipped is not None and flipped.ledger_id == 1
    assert flipped.entry_ids == tuple(range(ENTRIES - 5, ENTRIES))
    return Storage.open(config, on_durable=Acks()), flipped.entry_ids


def test_a_read_of_a_damaged_record_answers_unknown_and_puts_the_ledger_in_limbo(
    tmp_path: Path,
) -> None:
    storage, damaged = stored_then_damaged(tmp_path)
    try:
        assert not storage.in_limbo(1)
        with pytest.raises(DataUnknownError, match=f"ledger 1 entry {damaged[0]}: damaged"):
            storage.read_entry(1, damaged[0])
        assert storage.in_limbo(1) and storage.is_fenced(1)
        assert storage.list_entries(1) == [e for e in range(ENTRIES) if e != damaged[0]]
        # a batch read stops before the damaged entry, and one starting there is unknown
        assert len(storage.read_entries(1, 40, 100, 1 << 20)) == damaged[0] - 40
        with pytest.raises(DataUnknownError):
            storage.read_entries(1, damaged[1], 10, 1 << 20)
        assert storage.read_entry(2, 0) == entry_body(2, 0)
    finally:
        storage.close()


def test_a_scrub_finds_every_damaged_record_and_a_copy_added_again_repairs_it(
    tmp_path: Path,
) -> None:
    storage, damaged = stored_then_damaged(tmp_path)
    try:
        report = scrub(storage, bytes_per_s=1 << 30)
        assert report.damaged == {1: list(damaged)}
        assert report.ledgers == 2 and report.bytes_read > 0 and not report.stopped
        assert storage.limbo_ledgers() == [1]
        assert storage.list_entries(1) == list(range(ENTRIES - 5))
        for entry_id in damaged:  # what the integrity check does with a replica's copy
            body = entry_body(1, entry_id, entry_id - 1)
            storage.add_entry(1, entry_id, KEY, body, recovery=True)
        assert storage.list_entries(1) == list(range(ENTRIES))
        assert storage.read_entry(1, damaged[0]) == entry_body(1, damaged[0], damaged[0] - 1)
        storage.checkpoint()  # flushed: the new records replace the damaged ones
        assert scrub(storage, bytes_per_s=1 << 30).damaged == {}
        assert storage.read_entry(1, damaged[-1]) == entry_body(1, damaged[-1], damaged[-1] - 1)
    finally:
        storage.close()
