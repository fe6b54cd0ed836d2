"""Journal replay: torn tails are cut, corruption in the middle refuses start (or is skipped
into limbo when configured), empty and header-only journals are fine."""

from __future__ import annotations

import pytest
from storage_helpers import KEY, entry_body, open_storage, small_config

from bkeeper.common.errors import (
    CorruptRecordError,
    DataUnknownError,
    NoSuchEntryError,
    NoSuchLedgerError,
)
from bkeeper.storage import MemoryFileSystem, Storage
from bkeeper.storage.framing import RECORD_HEADER_BYTES
from bkeeper.storage.journal_format import (
    FILE_HEADER_BYTES,
    GROUP_HEADER_BYTES,
    decode_group_header,
)

JOURNAL_DIR = "/data/current/journal"


def _write_groups(count: int, **config: object) -> tuple[MemoryFileSystem, str, list[int]]:
    """``count`` entries of ledger 1, one fsync group each, then a crash: the crashed disk,
    the journal file holding them and the offset of each group."""
    fs = MemoryFileSystem()
    storage, acks = open_storage(fs, small_config(**config))
    for entry_id in range(count):
        storage.add_entry(1, entry_id, KEY, entry_body(1, entry_id, entry_id - 1), token=entry_id)
        acks.wait_for(entry_id)
    after = fs.crash()
    storage.abort()
    (name,) = after.list_dir(JOURNAL_DIR)
    path = f"{JOURNAL_DIR}/{name}"
    return after, path, _group_offsets(after.read_file(path))


def _group_offsets(data: bytes) -> list[int]:
    offsets, position = [], FILE_HEADER_BYTES
    while position < len(data):
        header = decode_group_header(data, position)
        assert not isinstance(header, str)
        offsets.append(position)
        position += GROUP_HEADER_BYTES + header.records_bytes
    return offsets


def _append(fs: MemoryFileSystem, path: str, data: bytes) -> None:
    f = fs.open_append(path)
    f.write(data)
    f.sync()


def _disk_with_journal(fs: MemoryFileSystem, path: str, journal: bytes) -> MemoryFileSystem:
    """A fresh disk holding ``fs``'s ledger files and ``journal`` at ``path``, all durable."""
    disk = MemoryFileSystem()
    disk.makedirs(JOURNAL_DIR)
    disk.makedirs("/data/current/ledgers")
    for name in fs.list_dir("/data/current/ledgers"):
        _append(
            disk, f"/data/current/ledgers/{name}", fs.read_file(f"/data/current/ledgers/{name}")
        )
    _append(disk, path, journal)
    disk.fsync_dir(JOURNAL_DIR)
    disk.fsync_dir("/data/current/ledgers")
    return disk


def test_torn_tail_is_cut_wherever_the_crash_tore_it() -> None:
    """A last group whose header is cut short, or whose records the file does not hold in
    full, was never acknowledged: cut, no limbo."""
    fs, path, groups = _write_groups(4)
    full = fs.read_file(path)
    last = groups[-1]
    for cut in range(last + 1, len(full), 37):
        for padding in (0, len(full) - cut - 1):  # zeros a filesystem may show, short of the end
            disk = _disk_with_journal(fs, path, full[:cut] + bytes(padding))
            storage, _ = open_storage(disk)
            assert storage.replay_outcome.cut == [(path, last)]
            assert storage.list_entries(1) == [0, 1, 2]
            with pytest.raises(NoSuchEntryError):
                storage.read_entry(1, 3)
            assert not storage.limbo and not storage.limbo_ledgers()
            storage.close()


def test_a_whole_last_group_with_zeroed_records_may_have_been_acknowledged() -> None:
    """A filesystem may grow a file before the data reaches the disk: a last group whose
    header is intact and whose bytes are all there, but partly zeros, is treated as possibly
    acknowledged, never cut: its ledger goes into limbo when the record still names it, the
    whole storage when the zeros hide which ledger it was."""
    fs, path, groups = _write_groups(4)
    full = fs.read_file(path)
    record = groups[-1] + GROUP_HEADER_BYTES  # the last group holds one record: entry 3
    ledger_id_end = record + RECORD_HEADER_BYTES + 8
    for keep in range(record, len(full), 7):
        disk = _disk_with_journal(fs, path, full[:keep] + bytes(len(full) - keep))
        storage, _ = open_storage(disk)
        assert storage.replay_outcome.cut == []
        assert [s[:2] for s in storage.replay_outcome.suspect] == [(path, record)]
        if keep >= ledger_id_end:
            assert not storage.limbo and storage.limbo_ledgers() == [1]
        else:
            assert storage.limbo and storage.limbo_ledgers() == []
        assert storage.list_entries(1) == [0, 1, 2]
        with pytest.raises(DataUnknownError):
            storage.read_entry(1, 3)
        with pytest.raises(DataUnknownError):
            storage.read_entry(1, -1)
        storage.close()


def test_cut_tail_is_truncated_and_the_rest_replays_again() -> None:
    fs, path, groups = _write_groups(3)
    fs.truncate(path, groups[-1] + 10)
    storage, _ = open_storage(fs)
    assert storage.replay_outcome.cut == [(path, groups[-1])]
    assert storage.last_entry_id(1) == 1
    storage.close()


def test_corrupt_record_in_the_middle_refuses_start_naming_file_and_offset() -> None:
    fs, path, groups = _write_groups(4)
    record = groups[1] + GROUP_HEADER_BYTES
    fs.corrupt(path, record + 40, b"\xff")
    with pytest.raises(CorruptRecordError) as raised:
        Storage.open(small_config(), fs)
    assert raised.value.path == path and raised.value.offset == record
    assert f"{path} at offset {record}" in str(raised.value)


def test_corrupt_group_header_in_the_middle_refuses_start() -> None:
    fs, path, groups = _write_groups(3)
    fs.corrupt(path, groups[1] + 2, b"\x7f")
    with pytest.raises(CorruptRecordError) as raised:
        Storage.open(small_config(), fs)
    assert raised.value.offset == groups[1]


def test_skip_option_skips_the_record_and_puts_its_ledger_in_limbo_until_cleared() -> None:
    fs, path, groups = _write_groups(4)
    fs.corrupt(path, groups[1] + GROUP_HEADER_BYTES + 40, b"\xff")
    config = small_config(journal_skip_corrupt_records=True)
    storage, _ = open_storage(fs, config)
    assert [s[:2] for s in storage.replay_outcome.skipped] == [
        (path, groups[1] + GROUP_HEADER_BYTES)
    ]
    assert storage.list_entries(1) == [0, 2, 3]
    assert storage.limbo_ledgers() == [1] and not storage.limbo
    with pytest.raises(DataUnknownError):
        storage.read_entry(1, 1)
    with pytest.raises(NoSuchLedgerError):
        storage.read_entry(99, 0)
    storage.close()
    storage, _ = open_storage(fs, config)  # limbo survives a restart
    assert storage.limbo_ledgers() == [1]
    storage.clear_limbo(1)
    storage.close()
    storage, _ = open_storage(fs, config)
    assert storage.limbo_ledgers() == []
    with pytest.raises(NoSuchEntryError):
        storage.read_entry(1, 1)
    storage.close()


def test_skip_option_resyncs_after_a_damaged_group_header() -> None:
    fs, path, groups = _write_groups(4)
    fs.corrupt(path, groups[1] + 1, b"\x55\x55")
    storage, _ = open_storage(fs, small_config(journal_skip_corrupt_records=True))
    assert storage.list_entries(1) == [0, 2, 3]
    assert storage.limbo
    storage.close()


def test_empty_and_header_only_journals_are_fine() -> None:
    fs = MemoryFileSystem()
    open_storage(fs)[0].close()
    assert fs.list_dir(JOURNAL_DIR) == []  # nothing written: no journal file created
    storage, _ = open_storage(fs)
    assert storage.replay_outcome.records == 0 and not storage.replay_outcome.cut
    storage.close()
    fs, path, offsets = _write_groups(2)
    fs.truncate(path, offsets[0])  # the header only
    storage, _ = open_storage(fs)
    assert storage.replay_outcome.records == 0 and not storage.replay_outcome.cut
    storage.close()
    fs, path, _ = _write_groups(2)
    fs.truncate(path, 7)  # a crash while the file header was being written
    storage, _ = open_storage(fs)
    assert storage.replay_outcome.cut == [(path, 0)]
    storage.close()


def test_junk_journal_refuses_start() -> None:
    fs, path, _ = _write_groups(2)
    fs.corrupt(path, 0, b"JUNK")
    with pytest.raises(CorruptRecordError, match="offset 0"):
        Storage.open(small_config(), fs)


def test_torn_tail_in_an_older_file_is_corruption() -> None:
    fs = MemoryFileSystem()
    storage, acks = open_storage(fs, small_config(journal_file_bytes_max=2048))
    for entry_id in range(8):
        storage.add_entry(
            1, entry_id, KEY, entry_body(1, entry_id, payload=b"z" * 600), token=entry_id
        )
        acks.wait_for(entry_id)
    after = fs.crash()
    storage.abort()
    names = sorted(after.list_dir(JOURNAL_DIR))
    assert len(names) >= 3
    older = f"{JOURNAL_DIR}/{names[0]}"
    after.truncate(older, after.size(older) - 5)
    with pytest.raises(CorruptRecordError, match=names[0]):
        Storage.open(small_config(journal_file_bytes_max=2048), after)
