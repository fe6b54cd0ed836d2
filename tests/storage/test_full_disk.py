"""A full disk is a normal state: thresholds checked before writing, ENOSPC recovered from,
writes again once space is freed, opening on a full disk, and nothing acknowledged lost.

The engine runs on the in-memory filesystem given a capacity: it fills up like a real disk
(a write that does not fit appends what fits and fails with ENOSPC).
"""

from __future__ import annotations

import errno
import time

import pytest
from storage_helpers import (
    KEY,
    Acks,
    entry_body,
    fill,
    listing,
    small_config,
    wait_until,
)

from bkeeper.common.errors import (
    ConfigError,
    DiskFullError,
    NoSuchLedgerError,
    TooManyRequestsError,
)
from bkeeper.storage import DiskState, MemoryFileSystem, Storage, StorageConfig
from bkeeper.storage.disk_space import next_state

MIB = 1024 * 1024
PAYLOAD = b"p" * 1000
JOURNAL_DIR = "/data/current/journal"
#: Room for a batch of adds while a flush runs.
ROOMY = small_config(write_cache_bytes_max=256 * 1024, write_cache_flush_bytes=16 * 1024)


def body(entry_id: int) -> bytes:
    return entry_body(1, entry_id, entry_id - 1, PAYLOAD)


def open_watched(
    fs: MemoryFileSystem, config: StorageConfig | None = None
) -> tuple[Storage, Acks, list[DiskState]]:
    acks, states = Acks(), []
    storage = Storage.open(config or small_config(), fs, acks, states.append)
    return storage, acks, states


def add_acked(storage: Storage, acks: Acks, entry_ids: range) -> None:
    for entry_id in entry_ids:
        for _attempt in range(3_000):  # a full write cache pushes back while it flushes
            try:
                storage.add_entry(1, entry_id, KEY, body(entry_id), token=entry_id)
                break
            except TooManyRequestsError:
                time.sleep(0.01)
        else:
            raise AssertionError(f"entry {entry_id}: the write cache stayed full for 30 s")
    acks.wait_for(entry_ids[-1])


def test_disk_settings_are_validated_naming_the_field() -> None:
    with pytest.raises(ConfigError, match="disk_usage_lwm_threshold and disk_usage_threshold"):
        StorageConfig(data_dir="/d", disk_usage_threshold=0.8, disk_usage_lwm_threshold=0.9)
    with pytest.raises(ConfigError, match="disk_usage_threshold: must be a fraction"):
        StorageConfig(data_dir="/d", disk_usage_threshold="0.9")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="disk_high_priority_free_bytes_min"):
        StorageConfig(data_dir="/d", disk_high_priority_free_bytes_min=-1)


def test_the_state_table() -> None:
    config = StorageConfig(data_dir="/d", disk_usage_threshold=0.9, disk_usage_lwm_threshold=0.8)
    writable, full, no_room = DiskState.WRITABLE, DiskState.FULL, DiskState.NO_ROOM
    cases = [
        (writable, 0.89, True, writable),
        (writable, 0.90, True, full),
        (full, 0.85, True, full),  # between the marks: stays
        (full, 0.79, True, writable),
        (no_room, 0.85, True, no_room),
        (no_room, 0.79, False, no_room),  # below the mark, but no space freed since
        (no_room, 0.79, True, writable),
    ]
    for state, used, may_end, expected in cases:
        assert next_state(state, used, config, no_room_may_end=may_end) is expected, (state, used)


def test_own_writes_turn_the_disk_full_before_any_write_fails_with_few_checks() -> None:
    fs = MemoryFileSystem(capacity_bytes=4 * MIB)
    storage, acks, states = open_watched(fs, ROOMY)
    entry_id = 0
    while not states and entry_id < 4000:
        add_acked(storage, acks, range(entry_id, entry_id + 20))
        entry_id += 20
        # (Keep the flusher close behind, so that what is written is what was added; once
        # the disk is full it flushes no more: the loop ends then.)
        wait_until(
            lambda: states or storage.stats().write_cache_bytes < 64 * 1024,
            "the flusher keeps up",
        )
    assert states == [DiskState.FULL] and storage.disk_state is DiskState.FULL
    assert acks.errors == []
    total, free = fs.disk_usage("/")
    assert 1.0 - free / total >= 0.95 and free > 0  # read-only with room left: nothing failed
    # A quarter of the headroom at a time: a few dozen statvfs calls, not one per group.
    assert storage.stats().disk_checks < 40 < len(acks.groups)
    storage.close()


def test_enospc_in_the_journal_fails_only_that_group_and_writes_resume_once_space_is_freed() -> (
    None
):
    fs = MemoryFileSystem(capacity_bytes=1 * MIB)
    storage, acks, states = open_watched(fs)
    add_acked(storage, acks, range(5))
    fill(fs, "/filler")
    storage.add_entry(1, 5, KEY, body(5), token=5)
    acks.wait_count(6)
    ((tokens, error),) = acks.errors
    assert tokens == [5] and isinstance(error, DiskFullError)
    assert isinstance(error.__cause__, OSError) and error.__cause__.errno == errno.ENOSPC
    assert storage.disk_state is DiskState.NO_ROOM and states[-1] is DiskState.NO_ROOM
    with pytest.raises(DiskFullError):
        storage.add_entry(1, 6, KEY, body(6), token=6)
    with pytest.raises(DiskFullError):
        storage.fence(1, KEY, token="fence")
    assert storage.read_entry(1, 4) == body(4)
    fs.remove("/filler")
    assert storage.check_disk() is DiskState.WRITABLE
    add_acked(storage, acks, range(6, 8))
    after = fs.crash()
    storage.abort()
    restarted, _, _ = open_watched(after)
    assert restarted.replay_outcome.cut == [] and restarted.replay_outcome.skipped == []
    assert restarted.list_entries(1) == [0, 1, 2, 3, 4, 6, 7]  # 5 was never acknowledged
    restarted.close()


def test_enospc_at_fdatasync_cuts_the_journal_back_to_its_last_durable_group() -> None:
    fs = MemoryFileSystem(capacity_bytes=16 * MIB)
    ballast = fs.open_append("/ballast")
    ballast.write(b"b" * 2 * MIB)
    ballast.close()
    storage, acks, _ = open_watched(fs)
    add_acked(storage, acks, range(1))
    (name,) = fs.list_dir(JOURNAL_DIR)
    path = f"{JOURNAL_DIR}/{name}"
    durable_size = fs.size(path)
    fs.fail_syncs(OSError(errno.ENOSPC, "No space left on device"), path_contains="/journal/")
    storage.add_entry(1, 1, KEY, body(1), token=1)
    acks.wait_count(2)
    assert acks.errors[0][0] == [1] and isinstance(acks.errors[0][1], DiskFullError)
    assert fs.size(path) == durable_size and fs.unsynced_bytes(path) == 0
    fs.fail_syncs(None)
    assert storage.check_disk() is DiskState.NO_ROOM  # nothing freed yet
    fs.remove("/ballast")
    assert storage.check_disk() is DiskState.WRITABLE
    add_acked(storage, acks, range(2, 3))
    after = fs.crash()
    storage.abort()
    restarted, _, _ = open_watched(after)
    assert restarted.replay_outcome.cut == [] and restarted.list_entries(1) == [0, 2]
    restarted.close()


def test_enospc_in_the_flusher_keeps_entries_readable_and_flushes_once_space_is_freed() -> None:
    fs = MemoryFileSystem(capacity_bytes=16 * MIB)
    ballast = fs.open_append("/ballast")
    ballast.write(b"b" * 2 * MIB)
    ballast.close()
    storage, acks, _ = open_watched(fs)
    add_acked(storage, acks, range(10))  # 10 KiB: below the 16 KiB that starts a flush
    fs.fail_syncs(OSError(errno.ENOSPC, "No space left on device"), path_contains="/ledgers/")
    accepted = list(range(10))
    for entry_id in range(10, 30):
        try:
            storage.add_entry(1, entry_id, KEY, body(entry_id), token=entry_id)
        except DiskFullError:
            break
        accepted.append(entry_id)
    wait_until(lambda: storage.disk_state is DiskState.NO_ROOM, "the flush fails for lack of space")
    acks.wait_count(len(accepted))
    # Groups the journal had not written when the disk ran out fail; nothing else does.
    assert all(isinstance(error, DiskFullError) for _, error in acks.errors)
    acked = sorted(t for t in acks.tokens if isinstance(t, int))
    assert acked == list(range(len(acked))) and len(acked) >= 10
    assert [storage.read_entry(1, e) for e in acked] == [body(e) for e in acked]
    fs.fail_syncs(None)
    fs.remove("/ballast")
    assert storage.check_disk() is DiskState.WRITABLE
    wait_until(lambda: storage.stats().write_cache_bytes == 0, "the flusher retried")
    storage.checkpoint()
    after = fs.crash()
    storage.abort()
    restarted, _, _ = open_watched(after)
    assert restarted.replay_outcome.records == 0  # all of it came from entry logs and index
    assert [restarted.read_entry(1, e) for e in acked] == [body(e) for e in acked]
    restarted.close()


def test_opening_on_a_full_disk_creates_no_file_serves_reads_and_refuses_writes() -> None:
    fs = MemoryFileSystem(capacity_bytes=1 * MIB)
    storage, acks, _ = open_watched(fs)
    add_acked(storage, acks, range(20))
    storage.close()
    fill(fs, "/filler")
    before = listing(fs)
    storage, acks, _ = open_watched(fs)
    assert storage.disk_state is DiskState.NO_ROOM  # the checkpoint at open found no room
    assert listing(fs) == before
    assert [storage.read_entry(1, e) for e in range(20)] == [body(e) for e in range(20)]
    with pytest.raises(DiskFullError):
        storage.add_entry(1, 20, KEY, body(20), token=20)
    storage.close()
    assert listing(fs) == before
    fs.remove("/filler")
    storage, acks, _ = open_watched(fs)
    assert storage.disk_state is DiskState.WRITABLE
    add_acked(storage, acks, range(20, 21))
    assert storage.list_entries(1) == list(range(21))
    storage.close()


def test_replay_on_a_full_disk_goes_on_in_the_write_cache() -> None:
    fs = MemoryFileSystem(capacity_bytes=1 * MIB)
    config = ROOMY
    storage, acks, _ = open_watched(fs, config)
    add_acked(storage, acks, range(60))  # 60 KiB past the checkpoint, flushed 16 KiB at a time
    after = fs.crash()
    storage.abort()
    fill(after, "/filler")
    storage, acks, _ = open_watched(after, config)
    assert storage.disk_state is DiskState.NO_ROOM
    assert [storage.read_entry(1, e) for e in range(60)] == [body(e) for e in range(60)]
    after.remove("/filler")
    assert storage.check_disk() is DiskState.WRITABLE
    wait_until(lambda: storage.stats().write_cache_bytes == 0, "the replayed entries are flushed")
    storage.checkpoint()
    add_acked(storage, acks, range(60, 61))
    storage.close()
    storage, _, _ = open_watched(after, config)
    assert storage.list_entries(1) == list(range(61))
    storage.close()


def test_a_failed_open_removes_the_files_it_created() -> None:
    fs = MemoryFileSystem(capacity_bytes=1 * MIB)
    config = small_config(write_cache_bytes_max=64 * 1024, write_cache_flush_bytes=16 * 1024)
    storage, acks, _ = open_watched(fs, config)
    for start in range(0, 100, 20):  # 100 KiB past the checkpoint: more than the write cache
        add_acked(storage, acks, range(start, start + 20))
    after = fs.crash()
    storage.abort()
    fill(after, "/filler")
    before = listing(after)
    with pytest.raises(DiskFullError, match="write_cache_bytes_max"):
        Storage.open(config, after)
    assert listing(after) == before
    after.remove("/filler")
    storage, _, _ = open_watched(after, config)
    assert [storage.read_entry(1, e) for e in range(100)] == [body(e) for e in range(100)]
    storage.close()


def test_a_ledger_is_deleted_on_a_disk_with_no_room_and_the_next_checkpoint_persists_it() -> None:
    fs = MemoryFileSystem(capacity_bytes=1 * MIB)
    storage, acks, _ = open_watched(fs)
    add_acked(storage, acks, range(5))
    fill(fs, "/filler")
    storage.add_entry(1, 5, KEY, body(5), token=5)  # fails for lack of space: NO_ROOM
    acks.wait_count(6)
    assert storage.disk_state is DiskState.NO_ROOM
    with pytest.raises(DiskFullError):
        storage.delete_ledger(1, token="wants-durability")
    storage.delete_ledger(1)  # garbage collection's call: forgotten at once
    with pytest.raises(NoSuchLedgerError):
        storage.read_entry(1, 0)
    fs.remove("/filler")
    assert storage.check_disk() is DiskState.WRITABLE
    storage.checkpoint()
    after = fs.crash()
    storage.abort()
    restarted, _, _ = open_watched(after)
    assert 1 not in restarted.ledger_ids()
    restarted.close()
