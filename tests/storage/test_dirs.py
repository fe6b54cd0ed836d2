"""Several ledger and journal directories, each watched on its own filesystem.

The in-memory filesystem's mounts play the disks: each has its own capacity, and they crash
together. Entry logs spread over the ledger directories and are found wherever they are; a
full ledger directory leaves the rotation and comes back below the low-water mark; the engine
is full only when every ledger directory is (or any, with ``readonly_on_any_dir_full``), or
a journal directory is; each ledger's records go to one journal, every journal replays from
its own mark, and changed directories are refused only where data would be lost.
"""

from __future__ import annotations

import logging
import os
import struct

import pytest
from crc32c import crc32c
from storage_helpers import Acks, entry_body, fill, open_storage, small_config, wait_until

from bkeeper.common.errors import ConfigError, DiskFullError, StorageError, TooManyRequestsError
from bkeeper.storage import DiskState, JournalPosition, MemoryFileSystem, Storage, StorageConfig
from bkeeper.storage.checkpoint_file import read_checkpoint
from bkeeper.storage.dirs import LedgerDirs
from bkeeper.storage.disk_set import engine_disk_state
from bkeeper.storage.filesystem import write_file_atomic
from bkeeper.storage.journal_format import FILE_HEADER_BYTES, JournalRecord
from bkeeper.storage.journal_replay import journal_file_ids, replay_journals
from bkeeper.storage.ledgers_map import scan_entry_log

MIB = 1024 * 1024
PAYLOAD = b"p" * 1000
CHECKPOINT = "/l1/checkpoint"
W, F, N = DiskState.WRITABLE, DiskState.FULL, DiskState.NO_ROOM


def key_of(ledger_id: int) -> bytes:
    return bytes([ledger_id + 1]) * 20


def body(ledger_id: int, entry_id: int) -> bytes:
    return entry_body(ledger_id, entry_id, entry_id - 1, PAYLOAD)


def config_of(**dirs: object) -> StorageConfig:
    """Small logs and journal files; a write cache with room for a batch while one flushes."""
    return small_config(write_cache_bytes_max=256 * 1024, write_cache_flush_bytes=16 * 1024, **dirs)


def add(storage: Storage, acks: Acks, ledger_id: int, entry_ids: range) -> None:
    for entry_id in entry_ids:
        token = (ledger_id, entry_id)
        try:
            storage.add_entry(ledger_id, entry_id, key_of(ledger_id), body(*token), token=token)
        except TooManyRequestsError:  # the write cache is full: wait for the flusher
            wait_until(lambda: storage.stats().write_cache_bytes < 128 * 1024, "flushed")
            storage.add_entry(ledger_id, entry_id, key_of(ledger_id), body(*token), token=token)
    acks.wait_for((ledger_id, entry_ids[-1]))


def read_all(storage: Storage, ledger_id: int, entry_ids: range) -> None:
    assert storage.list_entries(ledger_id) == list(entry_ids)
    for entry_id in entry_ids:
        assert storage.read_entry(ledger_id, entry_id) == body(ledger_id, entry_id)


def logs_in(fs: MemoryFileSystem, directory: str) -> dict[str, int]:
    return {n: fs.size(f"{directory}/{n}") for n in fs.list_dir(directory) if n.endswith(".log")}


def records_in(fs: MemoryFileSystem, directory: str) -> dict[str, list[int]]:
    """The offsets of the entry records of each log in ``directory``."""
    return {
        name: [record.offset for record in scan_entry_log(fs, f"{directory}/{name}")]
        for name in logs_in(fs, directory)
    }


def disks(*mounts: tuple[str, int]) -> MemoryFileSystem:
    fs = MemoryFileSystem()
    for path, capacity in mounts:
        fs.mount(path, capacity)
    return fs


def open_watched(fs: MemoryFileSystem, config: StorageConfig) -> tuple[Storage, Acks, list[object]]:
    acks, states = Acks(), []
    return Storage.open(config, fs, acks, states.append), acks, states


# -- configuration ---------------------------------------------------------------------------
def test_directories_and_thresholds_are_validated_naming_the_field() -> None:
    with pytest.raises(ConfigError, match="ledger_dirs: '/a/' is given twice"):
        StorageConfig(data_dir="/d", ledger_dirs=("/a", "/a/"))
    with pytest.raises(
        ConfigError, match=r"journal_dirs: '/a' is given twice \(also in ledger_dirs"
    ):
        StorageConfig(data_dir="/d", ledger_dirs=("/a",), journal_dirs=("/a",))
    with pytest.raises(ConfigError, match="journal_dirs: '/d/current/ledgers' is given twice"):
        StorageConfig(data_dir="/d", journal_dirs=("/d/current/ledgers",))
    with pytest.raises(ConfigError, match="ledger_dirs: must be a tuple of directory paths"):
        StorageConfig(data_dir="/d", ledger_dirs=["/a"])  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="journal_dirs: must be a tuple of directory paths"):
        StorageConfig(data_dir="/d", journal_dirs=("",))
    with pytest.raises(ConfigError, match=r"0 < warn <= disk_usage_threshold, got 0\.96 and 0\.95"):
        StorageConfig(data_dir="/d", disk_usage_warn_threshold=0.96)
    with pytest.raises(ConfigError, match="readonly_on_any_dir_full: must be a bool"):
        StorageConfig(data_dir="/d", readonly_on_any_dir_full=1)  # type: ignore[arg-type]
    config = StorageConfig(data_dir="/d")
    assert config.ledger_dir_paths == ("/d/current/ledgers",)
    assert config.journal_dir_paths == ("/d/current/journal",)


@pytest.mark.parametrize(
    ("journals", "ledgers", "any_full", "expected"),
    [
        ((W,), (W, W), False, W),
        ((W,), (F, W), False, W),  # one full ledger dir: out of rotation, still writable
        ((W,), (F, W), True, F),
        ((W,), (F, N), False, F),
        ((W,), (N, W), False, W),
        ((W,), (N, N), False, N),  # no flush can be written
        ((F, W), (W, W), False, F),  # a journal that cannot write
        ((W, N), (W, W), False, N),
    ],
)
def test_the_engine_state_table(
    journals: tuple[DiskState, ...],
    ledgers: tuple[DiskState, ...],
    any_full: bool,
    expected: DiskState,
) -> None:
    assert engine_disk_state(journals, ledgers, any_ledger_dir_full=any_full) is expected


# -- ledger directories ----------------------------------------------------------------------
def test_new_entry_logs_spread_over_the_ledger_dirs_and_reads_find_them() -> None:
    fs = disks(("/l1", 8 * MIB), ("/l2", 8 * MIB))
    config = config_of(ledger_dirs=("/l1", "/l2"))
    storage, acks = open_storage(fs, config)
    add(storage, acks, 1, range(300))
    storage.checkpoint()
    one, two = logs_in(fs, "/l1"), logs_in(fs, "/l2")
    assert len(one) >= 3 and len(two) >= 3 and not set(one) & set(two)
    # each log's bytes count against its own directory as they are written: the most free
    # space alternates (before, a flush's bytes went to one directory after it, and one
    # directory took 9 of 14 logs, or 12 of 14)
    assert abs(len(one) - len(two)) <= 1, (one, two)
    assert "checkpoint" in fs.list_dir("/l1") and "checkpoint" not in fs.list_dir("/l2")
    storage.close()
    storage, _ = open_storage(fs, config)
    read_all(storage, 1, range(300))
    storage.close()


def test_a_full_ledger_dir_takes_no_new_log_until_below_the_low_water_mark() -> None:
    fs = disks(("/l1", 4 * MIB), ("/l2", 4 * MIB))
    config = config_of(ledger_dirs=("/l1", "/l2"))
    storage, acks, states = open_watched(fs, config)
    add(storage, acks, 1, range(30))
    storage.checkpoint()
    newest = max((name, d) for d in ("/l1", "/l2") for name in logs_in(fs, d))
    full, other = newest[1], "/l2" if newest[1] == "/l1" else "/l1"
    fill(fs, f"{full}/filler", 0.96)
    assert storage.check_disk() is DiskState.WRITABLE
    before = logs_in(fs, full)
    records_before = records_in(fs, full)
    add(storage, acks, 1, range(30, 330))
    storage.checkpoint()
    # not one entry more: the log being written was left (and given its ledgers map)
    assert records_in(fs, full) == records_before
    assert logs_in(fs, full).keys() == before.keys()
    assert max(logs_in(fs, other)) > newest[0]

    fs.remove(f"{full}/filler")
    assert storage.check_disk() is DiskState.WRITABLE
    add(storage, acks, 1, range(330, 400))
    storage.checkpoint()
    assert set(logs_in(fs, full)) > set(before)  # back in rotation
    assert states == []  # writable throughout
    storage.close()
    storage, _ = open_storage(fs, config)
    read_all(storage, 1, range(400))
    storage.close()


@pytest.mark.parametrize("any_full", [False, True])
def test_full_only_when_every_ledger_dir_is_or_any_with_the_option(any_full: bool) -> None:
    fs = disks(("/l1", 4 * MIB), ("/l2", 4 * MIB))
    config = config_of(
        ledger_dirs=("/l1", "/l2"),
        readonly_on_any_dir_full=any_full,
        disk_high_priority_free_bytes_min=64 * 1024,
    )
    storage, acks, states = open_watched(fs, config)
    fill(fs, "/l1/filler", 0.96)
    assert storage.check_disk() is (DiskState.FULL if any_full else DiskState.WRITABLE)
    fill(fs, "/l2/filler", 0.96)
    assert storage.check_disk() is DiskState.FULL
    assert storage.room_for_high_priority  # 4% of 4 MiB is more than the 64 KiB reserve
    add(storage, acks, 1, range(10))  # what reaches the engine is still written
    fs.remove("/l1/filler")
    assert storage.check_disk() is (DiskState.FULL if any_full else DiskState.WRITABLE)
    fs.remove("/l2/filler")
    assert storage.check_disk() is DiskState.WRITABLE
    assert states == [DiskState.FULL, DiskState.WRITABLE]
    storage.close()


def test_a_full_journal_dir_makes_the_engine_full() -> None:
    fs = disks(("/j", 4 * MIB))
    storage, _, states = open_watched(fs, config_of(journal_dirs=("/j",)))
    fill(fs, "/j/filler", 0.96)
    assert storage.check_disk() is DiskState.FULL
    assert states == [DiskState.FULL]
    storage.close()


def test_a_journal_without_room_refuses_only_its_own_ledgers() -> None:
    fs = disks(("/j1", 1 * MIB), ("/j2", 64 * MIB))
    config = config_of(journal_dirs=("/j1", "/j2"))
    storage, acks, states = open_watched(fs, config)
    fill(fs, "/j1/filler")  # full to the last byte: the first group written there fails
    storage.add_entry(2, 0, key_of(2), body(2, 0), token=(2, 0))  # 2 % 2: journal /j1
    acks.wait_count(1)
    assert [(tokens, type(error)) for tokens, error in acks.errors] == [([(2, 0)], DiskFullError)]
    add(storage, acks, 1, range(5))  # journal /j2 writes on
    assert storage.disk_state is DiskState.NO_ROOM and states == [DiskState.FULL, DiskState.NO_ROOM]
    with pytest.raises(DiskFullError):
        storage.add_entry(4, 0, key_of(4), body(4, 0))
    storage.close()


def test_dirs_on_one_filesystem_share_one_check() -> None:
    fs = disks(("/a", 64 * MIB), ("/b", 64 * MIB))
    config = config_of(ledger_dirs=("/a/l1", "/a/l2"), journal_dirs=("/b/j1", "/b/j2"))
    storage, _ = open_storage(fs, config)
    before = storage.stats().disk_checks
    storage.check_disk()
    assert storage.stats().disk_checks == before + 2
    assert storage.disk_usage() == (64 * MIB, 64 * MIB - fs.disk.used_bytes("/a"))
    storage.close()


def test_the_disk_usage_reported_counts_each_ledger_filesystem_once() -> None:
    fs = disks(("/l1", 4 * MIB), ("/l2", 8 * MIB), ("/j", 16 * MIB))
    config = config_of(ledger_dirs=("/l1", "/l2"), journal_dirs=("/j",))
    storage, _ = open_storage(fs, config)
    total, free = storage.disk_usage()
    assert total == 12 * MIB
    assert free == 12 * MIB - fs.disk.used_bytes("/l1") - fs.disk.used_bytes("/l2")
    storage.close()


def test_crossing_the_warn_threshold_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    fs = disks(("/l1", 4 * MIB))
    storage, _ = open_storage(fs, config_of(ledger_dirs=("/l1",)))
    caplog.set_level(logging.WARNING, logger="bkeeper.storage.disk_space")
    fill(fs, "/l1/filler", 0.92)
    storage.check_disk()
    storage.check_disk()
    warned = [r.getMessage() for r in caplog.records if "disk_usage_warn_threshold" in r.message]
    assert len(warned) == 1 and warned[0].startswith("disk of /l1: 92.")
    fs.remove("/l1/filler")
    storage.check_disk()
    fill(fs, "/l1/filler", 0.92)
    storage.check_disk()
    assert sum("disk_usage_warn_threshold" in r.message for r in caplog.records) == 2
    storage.close()


def test_an_entry_log_in_two_ledger_dirs_is_refused() -> None:
    fs = MemoryFileSystem()
    for directory in ("/l1", "/l2"):
        fs.makedirs(directory)
        fs.open_append(f"{directory}/0000000000000001.log").close()
    with pytest.raises(StorageError, match=r"0000000000000001\.log is in two ledger directories"):
        LedgerDirs(fs, ("/l1", "/l2"))


# -- journal directories ---------------------------------------------------------------------
def ledgers_in_journal(fs: MemoryFileSystem, directory: str) -> set[int]:
    found: set[int] = set()

    def apply(record: JournalRecord) -> None:
        found.add(record.ledger_id)

    replay_journals(fs, directory, JournalPosition(0, FILE_HEADER_BYTES), False, apply, bool)
    return found


def test_each_ledger_goes_to_one_journal_and_each_journal_keeps_its_own_mark() -> None:
    fs = MemoryFileSystem()
    config = config_of(journal_dirs=("/j1", "/j2", "/j3"))
    storage, acks = open_storage(fs, config)
    for ledger_id in range(6):
        add(storage, acks, ledger_id, range(30))
    for number, directory in enumerate(("/j1", "/j2", "/j3")):
        assert ledgers_in_journal(fs, directory) == {number, number + 3}
        assert len(journal_file_ids(fs, directory)) > 1  # rolled
    storage.checkpoint()
    root = read_checkpoint(fs, "/data/current/ledgers/checkpoint")
    assert root is not None and [key for key, _ in root.marks] == ["/j1", "/j2", "/j3"]
    for directory, (_, mark) in zip(("/j1", "/j2", "/j3"), root.marks, strict=True):
        assert journal_file_ids(fs, directory) == [mark.file_id]  # older files removed
    add(storage, acks, 4, range(30, 40))
    fs = fs.crash()
    storage.abort()
    storage, _ = open_storage(fs, config)
    for ledger_id in range(6):
        read_all(storage, ledger_id, range(40 if ledger_id == 4 else 30))
    storage.close()


def test_a_ledger_that_changes_journal_keeps_its_order_across_a_deferred_checkpoint() -> None:
    """Two journals, then three: ledger 3's records move from the second journal to the
    first. The open that changed them could not checkpoint (its ledger dir full), so the next
    replay reads both: the adds of the first run, then the delete of the second."""
    fs = disks(("/l", 1 * MIB))
    two = config_of(ledger_dirs=("/l",), journal_dirs=("/j1", "/j2"))
    three = config_of(ledger_dirs=("/l",), journal_dirs=("/j1", "/j2", "/j3"))
    storage, acks = open_storage(fs, two)
    add(storage, acks, 3, range(10))
    fs = fs.crash()
    storage.abort()

    fill(fs, "/l/filler")
    storage, acks = open_storage(fs, three)  # its checkpoint is deferred: no room
    assert storage.stats().checkpoints == 0
    storage.delete_ledger(3, token="deleted")
    acks.wait_for("deleted")
    fs = fs.crash()
    storage.abort()

    fs.remove("/l/filler")
    storage, _ = open_storage(fs, three)
    assert not storage.ledger_exists(3)
    storage.close()


# -- changed directories ---------------------------------------------------------------------
def test_dirs_may_be_added_to_an_existing_data_dir() -> None:
    fs = MemoryFileSystem()
    storage, acks = open_storage(fs, config_of())  # the default layout under /data
    add(storage, acks, 1, range(50))
    storage.close()
    more = config_of(
        ledger_dirs=("/data/current/ledgers", "/l2"),
        journal_dirs=("/data/current/journal", "/j2"),
    )
    storage, acks = open_storage(fs, more)
    read_all(storage, 1, range(50))
    add(storage, acks, 1, range(50, 250))
    add(storage, acks, 2, range(100))
    storage.close()
    assert logs_in(fs, "/l2") and journal_file_ids(fs, "/j2")
    storage, _ = open_storage(fs, more)
    read_all(storage, 1, range(250))
    read_all(storage, 2, range(100))
    storage.close()


def test_a_ledger_dir_holding_entry_logs_may_not_be_dropped_nor_the_first_moved() -> None:
    fs = MemoryFileSystem()
    config = config_of(ledger_dirs=("/l1", "/l2"))
    storage, acks = open_storage(fs, config)
    add(storage, acks, 1, range(100))
    storage.close()
    assert logs_in(fs, "/l2")
    with pytest.raises(StorageError, match=r"ledger directory /l2 holds \d+ entry logs but is not"):
        open_storage(fs, config_of(ledger_dirs=("/l1",)))
    with pytest.raises(StorageError, match="first ledger directory /l2, but /l1/checkpoint"):
        open_storage(fs, config_of(ledger_dirs=("/l2", "/l1")))
    storage, _ = open_storage(fs, config)  # nothing was changed by the refusals
    read_all(storage, 1, range(100))
    storage.close()


def test_a_journal_dir_may_be_dropped_only_once_it_holds_nothing_past_its_mark() -> None:
    fs = MemoryFileSystem()
    two = config_of(journal_dirs=("/j1", "/j2"))
    one = config_of(journal_dirs=("/j1",))
    storage, acks = open_storage(fs, two)
    add(storage, acks, 1, range(20))  # ledger 1: journal /j2
    fs = fs.crash()
    storage.abort()
    with pytest.raises(StorageError, match="journal directory /j2 holds records past the last"):
        open_storage(fs, one)
    storage, _ = open_storage(fs, two)  # replayed and checkpointed
    storage.close()
    storage, _ = open_storage(fs, one)
    read_all(storage, 1, range(20))
    storage.close()


def test_a_version_1_checkpoint_opens_and_is_rewritten_as_version_2() -> None:
    fs = MemoryFileSystem()
    storage, acks = open_storage(fs, config_of())
    add(storage, acks, 1, range(50))
    storage.close()
    path = "/data/current/ledgers/checkpoint"
    root = read_checkpoint(fs, path)
    assert root is not None
    mark, flags = root.mark, int(root.limbo)
    v1 = struct.pack(
        ">4sIQQQQI", b"BKCP", 1, mark.file_id, mark.offset, root.index_generation,
        root.index_bytes, flags,
    )  # fmt: skip
    write_file_atomic(fs, path, v1 + crc32c(v1).to_bytes(4, "big"))
    storage, acks = open_storage(fs, config_of())
    read_all(storage, 1, range(50))
    storage.close()
    assert struct.unpack_from(">I", fs.read_file(path), 4) == (2,)


def test_journal_and_ledger_files_are_where_the_layout_says() -> None:
    fs = MemoryFileSystem()
    config = config_of(ledger_dirs=("/l1", "/l2"), journal_dirs=("/j1", "/j2"))
    storage, acks = open_storage(fs, config)
    add(storage, acks, 1, range(100))
    add(storage, acks, 2, range(100))
    storage.close()
    names = {d: sorted(fs.list_dir(d)) for d in ("/l1", "/l2", "/j1", "/j2")}
    assert {os.path.splitext(n)[1] for d in ("/j1", "/j2") for n in names[d]} == {".txn"}
    assert {os.path.splitext(n)[1] for n in names["/l2"]} == {".log"}
    assert "checkpoint" in names["/l1"] and any(n.startswith("index-") for n in names["/l1"])
    # Every directory is given: nothing goes under data_dir (no default ledger or journal dir).
    assert not fs.exists("/data"), "something was made under data_dir (/data)"


def test_a_journal_dir_added_again_does_not_replay_what_it_held_before() -> None:
    """A journal dir dropped (nothing past its mark), then added again: its old file holds
    ledger 1's adds, which the engine deleted meanwhile; they are not applied again."""
    fs = MemoryFileSystem()
    two = config_of(journal_dirs=("/j1", "/j2"))
    storage, acks = open_storage(fs, two)
    add(storage, acks, 1, range(20))  # ledger 1: journal /j2
    storage.close()
    assert journal_file_ids(fs, "/j2")  # the file its mark is in stays
    storage, acks = open_storage(fs, config_of(journal_dirs=("/j1",)))
    storage.delete_ledger(1, token="deleted")
    acks.wait_for("deleted")
    storage.close()
    storage, _ = open_storage(fs, two)
    assert not storage.ledger_exists(1)
    storage.close()
