"""Garbage collection and compaction of entry logs on the in-memory filesystem.

The ledgers map in each log, removal of logs whose ledgers are all gone, compaction of logs
below the thresholds, reads racing compaction, and a crash at every mutating step of a pass:
after each, every entry of the ledgers kept reads back byte-identical, deleted ledgers stay
gone, no partial copy is left, and a later pass reclaims the space.
"""

from __future__ import annotations

import os
import random
import threading
import time

import pytest
from storage_helpers import KEY, Acks, entry_body, small_config

from bkeeper.common.errors import ConfigError, NoSuchLedgerError
from bkeeper.storage import MemoryFileSystem, Storage, StorageConfig
from bkeeper.storage.compaction import COMPACTING_SUFFIX, Moves, swap
from bkeeper.storage.compaction_pacing import CompactionThrottle
from bkeeper.storage.entry_log import entry_log_id
from bkeeper.storage.garbage import EntryLogUsage, plan_collection
from bkeeper.storage.ledgers_map import read_entry_log_meta, read_ledgers_map, scan_entry_log
from bkeeper.testing.clock import FakeClock

LEDGERS_DIR = "/data/current/ledgers"
LEDGERS = range(1, 7)
KEPT = (5, 6)
ENTRIES = 60


def config(**overrides: object) -> StorageConfig:
    settings: dict[str, object] = {
        "compaction_rate_bytes_per_s": 0,
        "write_cache_bytes_max": 512 * 1024,
        "write_cache_flush_bytes": 8 * 1024,
    }
    settings.update(overrides)
    return small_config(**settings)


def body(ledger_id: int, entry_id: int) -> bytes:
    return entry_body(ledger_id, entry_id, payload=bytes([ledger_id]) * (200 + entry_id))


def fill(fs: MemoryFileSystem) -> None:
    """Six ledgers written interleaved (every entry log holds several), then deleted but two;
    everything durable and checkpointed, the storage closed."""
    acks = Acks()
    storage = Storage.open(config(), fs, acks)
    tokens = []
    for entry_id in range(ENTRIES):
        for ledger_id in LEDGERS:
            token = (ledger_id, entry_id)
            storage.add_entry(ledger_id, entry_id, KEY, body(ledger_id, entry_id), token=token)
            tokens.append(token)
        if entry_id % 5 == 4:  # every flush (and so every log) holds all six ledgers
            acks.wait_count(len(tokens))
            storage.checkpoint()
    for ledger_id in LEDGERS:
        if ledger_id not in KEPT:
            storage.delete_ledger(ledger_id, token=("delete", ledger_id))
            tokens.append(("delete", ledger_id))
    acks.wait_count(len(tokens))
    assert not acks.errors
    storage.close()


def log_files(fs: MemoryFileSystem) -> dict[int, int]:
    return {
        log_id: fs.size(os.path.join(LEDGERS_DIR, name))
        for name in fs.list_dir(LEDGERS_DIR)
        if (log_id := entry_log_id(name)) is not None
    }


def check_kept(storage: Storage) -> None:
    for ledger_id in KEPT:
        for entry_id in range(ENTRIES):
            assert storage.read_entry(ledger_id, entry_id) == body(ledger_id, entry_id)
        got = storage.read_entries(ledger_id, 0, ENTRIES, 1 << 30)
        assert got == [body(ledger_id, e) for e in range(ENTRIES)]
    for ledger_id in LEDGERS:
        if ledger_id not in KEPT:
            with pytest.raises(NoSuchLedgerError):
                storage.read_entry(ledger_id, 0)


def test_every_closed_log_ends_with_its_ledgers_map_equal_to_a_scan():
    fs = MemoryFileSystem()
    fill(fs)
    logs = log_files(fs)
    assert len(logs) >= 4
    for log_id in logs:
        path = os.path.join(LEDGERS_DIR, f"{log_id:016x}.log")
        meta = read_ledgers_map(fs, path, log_id)
        assert meta is not None
        scanned: dict[int, int] = {}
        for record in scan_entry_log(fs, path):
            scanned[record.ledger_id] = scanned.get(record.ledger_id, 0) + 8 + record.length
        assert meta.ledgers == scanned
        assert meta.sources == ()


def test_a_log_without_map_is_scanned_and_a_torn_tail_ends_the_scan():
    fs = MemoryFileSystem()
    fill(fs)
    log_id = min(log_files(fs))
    path = os.path.join(LEDGERS_DIR, f"{log_id:016x}.log")
    meta = read_ledgers_map(fs, path, log_id)
    assert meta is not None
    records = list(scan_entry_log(fs, path))
    cut = records[-1].offset + 20  # inside the last record: map and footer gone, tail torn
    fs.truncate(path, cut)
    found, from_map = read_entry_log_meta(fs, path, log_id)
    assert not from_map
    last = records[-1]
    expected = dict(meta.ledgers)
    expected[last.ledger_id] -= 8 + last.length
    assert {k: v for k, v in found.ledgers.items() if v} == {k: v for k, v in expected.items() if v}


def test_gc_removes_dead_logs_compacts_the_rest_and_survives_restart():
    fs = MemoryFileSystem()
    fill(fs)
    before = sum(log_files(fs).values())
    storage = Storage.open(config(), fs)
    usage = storage.entry_log_usage()
    assert all(u.live_ratio < 0.5 for u in usage)  # 2 of 6 ledgers live in every log
    result = storage.collect_garbage(minor=True, major=True)
    assert result.logs_compacted + result.logs_removed == len(usage)
    assert result.entries_copied == len(KEPT) * ENTRIES
    assert not result.stopped and result.error == ""
    check_kept(storage)
    after = storage.entry_log_usage()
    assert all(u.live_ratio == 1.0 for u in after)
    assert sum(u.total_bytes for u in after) == sum(u.live_bytes for u in usage)
    storage.close()
    assert sum(log_files(fs).values()) < before * 0.5
    assert result.bytes_freed > 0
    reopened = Storage.open(config(), fs)
    check_kept(reopened)
    assert reopened.collect_garbage(minor=True, major=True).logs_compacted == 0
    reopened.close()


def test_minor_leaves_logs_between_the_thresholds_and_major_takes_them():
    fs = MemoryFileSystem()
    fill(fs)
    storage = Storage.open(config(minor_compaction_threshold=0.1), fs)
    assert storage.collect_garbage(minor=True, major=False).logs_compacted == 0
    assert storage.collect_garbage(minor=False, major=True).logs_compacted > 0
    check_kept(storage)
    storage.close()


def test_reads_racing_compaction_all_succeed():
    fs = MemoryFileSystem()
    fill(fs)
    storage = Storage.open(config(read_cache_bytes_max=1), fs)
    stop = threading.Event()
    failures: list[BaseException] = []
    reads = [0]

    def reader() -> None:
        while not stop.is_set():
            try:
                for ledger_id in KEPT:
                    for entry_id in range(0, ENTRIES, 7):
                        assert storage.read_entry(ledger_id, entry_id) == body(ledger_id, entry_id)
                        reads[0] += 1
            except BaseException as exc:  # reported below
                failures.append(exc)
                return

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        storage.collect_garbage(minor=True, major=True)
    finally:
        stop.set()
        thread.join()
    assert failures == []
    assert reads[0] > 0
    check_kept(storage)
    storage.close()


def test_an_entry_written_again_during_compaction_keeps_its_newer_location():
    fs = MemoryFileSystem()
    fill(fs)
    storage = Storage.open(config(), fs)
    engine = storage._engine
    state = engine.ledgers[5]
    old = state.locations.get(3)
    state.locations.set(3, old + 1)  # as a newer flush of entry 3 would
    moves = Moves()
    moves.add(5, 3, old, (99 << 32) | 16)
    moves.add(5, 4, state.locations.get(4), (99 << 32) | 32)
    moved = swap(engine, moves)
    assert moved == 1
    assert state.locations.get(3) == old + 1
    assert state.locations.get(4) == (99 << 32) | 32
    storage.abort()


def test_a_thread_waiting_for_the_engine_lock_gets_turns_while_the_index_is_swapped():
    # A Python lock is not fair: a swap that took the lock again at once after each chunk
    # kept a waiting thread (the event loop's adds) out for most of the swap.
    fs = MemoryFileSystem()
    fill(fs)
    storage = Storage.open(config(), fs)
    engine = storage._engine
    moves = Moves()
    chunks = 400
    for entry_id in range(ENTRIES, ENTRIES + 256 * chunks):  # not in the index: no change
        moves.add(5, entry_id, 1, 2)
    turns = 0
    swapping = threading.Thread(target=swap, args=(engine, moves))
    with engine.lock:  # the swap starts with this thread already waiting
        swapping.start()
        time.sleep(0.01)
    while swapping.is_alive():
        with engine.lock:
            turns += 1
    swapping.join()
    # With turns between chunks the waiter gets millions of them (it loops); without, it
    # got 25 to 69 in the whole swap.
    assert turns >= chunks
    storage.abort()


class _Waits(threading.Event):
    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        assert timeout is not None
        self.waits.append(timeout)
        return False


@pytest.mark.parametrize(("share", "pause"), [(0.5, 0.004), (0.25, 0.012), (1.0, None)])
def test_a_pass_pauses_in_proportion_to_the_work_of_each_chunk(share, pause):
    stop = _Waits()
    throttle = CompactionThrottle(0, share, stop, FakeClock())
    throttle.spent(1 << 20, 0.004)
    assert stop.waits == ([] if pause is None else [pytest.approx(pause)])


def test_the_rate_is_kept_on_the_engines_clock():
    clock, stop = FakeClock(), _Waits()
    throttle = CompactionThrottle(1000, 1.0, stop, clock)
    throttle.spent(500, 0.0)  # half a second's worth, at once: half a second ahead
    clock.advance(0.2)
    throttle.spent(500, 0.0)  # a second's worth, 0.2 s in
    assert stop.waits == [pytest.approx(0.5), pytest.approx(0.8)]


@pytest.mark.parametrize("share", [0, -0.5, 1.5, "half", True])
def test_a_time_share_outside_0_to_1_is_refused(share):
    with pytest.raises(ConfigError, match="compaction_time_share: a fraction in"):
        config(compaction_time_share=share)


def test_crash_at_every_step_of_a_pass_loses_nothing():
    steps = 0
    for crash_at in range(1, 10_000):
        fs = MemoryFileSystem()
        fill(fs)
        storage = Storage.open(config(), fs)
        fs.schedule_crash(crash_at)
        try:
            storage.collect_garbage(minor=True, major=True)
        except OSError:
            pass
        except Exception as exc:  # a crash seen through a wrapper (StorageError, ...)
            assert fs.crashed, exc
        if not fs.crashed:
            fs.cancel_crash()
            storage.close()
            steps = crash_at
            break
        storage.abort()
        restarted = fs.restart()
        reopened = Storage.open(config(), restarted)
        check_kept(reopened)
        assert not [n for n in restarted.list_dir(LEDGERS_DIR) if n.endswith(COMPACTING_SUFFIX)]
        reopened.collect_garbage(minor=True, major=True)
        check_kept(reopened)
        assert all(u.live_ratio == 1.0 for u in reopened.entry_log_usage())
        reopened.close()
        check_kept(Storage.open(config(), restarted.restart()))
    assert steps > 20  # the pass has that many mutating steps, each crashed once above


def test_plan_orders_by_ratio_or_by_live_bytes_on_a_full_disk():
    usages = [
        EntryLogUsage(1, 1000, 0),
        EntryLogUsage(2, 1000, 500),
        EntryLogUsage(3, 100, 10),
        EntryLogUsage(4, 1000, 50),
        EntryLogUsage(5, 1000, 900),
        EntryLogUsage(6, 1000, 0),
    ]
    plan = plan_collection(
        usages, exclude=frozenset({6}), minor_threshold=0.2, major_threshold=None, disk_full=False
    )
    assert plan.remove == (1,)
    assert plan.compact == (4, 3)
    plan = plan_collection(
        usages, exclude=frozenset(), minor_threshold=0.2, major_threshold=0.8, disk_full=True
    )
    assert plan.remove == (1, 6)
    assert plan.compact == (3, 4, 2)
    plan = plan_collection(
        usages, exclude=frozenset(), minor_threshold=0.2, major_threshold=0.0, disk_full=False
    )
    assert plan.compact == (4, 3)


def test_the_log_being_written_is_ended_and_collected_once_it_is_garbage():
    fs = MemoryFileSystem()
    acks = Acks()
    storage = Storage.open(config(entry_log_bytes_max=1 << 20), fs, acks)
    for entry_id in range(50):
        storage.add_entry(9, entry_id, KEY, body(9, entry_id), token=entry_id)
    acks.wait_count(50)
    storage.checkpoint()
    assert [u.log_id for u in storage.entry_log_usage()] == [1]
    storage.delete_ledger(9)
    result = storage.collect_garbage(minor=True, major=False)
    assert result.logs_removed == 1
    assert storage.entry_log_usage() == []
    assert log_files(fs) == {}
    storage.add_entry(10, 0, KEY, body(10, 0), token="after")
    acks.wait_for("after")
    storage.checkpoint()
    assert storage.read_entry(10, 0) == body(10, 0)
    assert [u.log_id for u in storage.entry_log_usage()] == [2]
    storage.close()


@pytest.mark.parametrize("seed", range(3))
def test_torn_crashes_during_a_pass_lose_nothing(seed: int):
    rng = random.Random(seed)
    for crash_at in rng.sample(range(1, 40), 12):
        fs = MemoryFileSystem()
        fill(fs)
        storage = Storage.open(config(), fs)
        fs.schedule_crash(crash_at, torn=random.Random(crash_at))
        try:
            storage.collect_garbage(minor=True, major=True)
        except Exception:  # the crash, seen directly or through a wrapper
            assert fs.crashed
        if not fs.crashed:
            fs.cancel_crash()
            storage.close()
            continue
        storage.abort()
        reopened = Storage.open(config(), fs.restart())
        check_kept(reopened)
        reopened.collect_garbage(minor=True, major=True)
        check_kept(reopened)
        reopened.close()


def test_an_idle_journal_rolls_at_a_checkpoint_so_the_next_one_frees_its_file():
    fs = MemoryFileSystem()
    acks = Acks()
    cfg = config(journal_checkpoint_roll_bytes=4096, journal_file_bytes_max=1 << 20)
    storage = Storage.open(cfg, fs, acks)
    journal_dir = "/data/current/journal"
    for entry_id in range(40):
        storage.add_entry(3, entry_id, KEY, body(3, entry_id), token=entry_id)
    acks.wait_count(40)
    (first,) = fs.list_dir(journal_dir)
    assert fs.size(f"{journal_dir}/{first}") > 4096
    storage.checkpoint()  # the file is large: the idle journal starts a new one at once
    deadline = time.monotonic() + 10
    while len(fs.list_dir(journal_dir)) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    storage.checkpoint()  # the mark is in the new file: the old one goes
    (second,) = fs.list_dir(journal_dir)
    assert second > first
    storage.close()
    reopened = Storage.open(cfg, fs.restart())
    assert [reopened.read_entry(3, e) for e in range(40)] == [body(3, e) for e in range(40)]
    reopened.close()
