"""One entry log read for ``bkeeper shell readlog`` (bkeeper.storage.inspect_entry_log): its
records, its ledgers map, and damage, against logs written by a real Storage."""

from __future__ import annotations

import pytest
from storage_helpers import open_storage
from test_inspect import LEDGERS, ReadOnlyFs, _write, build, locations

from bkeeper.common.errors import StorageError
from bkeeper.storage import MemoryFileSystem
from bkeeper.storage.compaction import COMPACTING_SUFFIX
from bkeeper.storage.entry_log import entry_log_name
from bkeeper.storage.filesystem import numbered_file_name
from bkeeper.storage.inspect import list_files
from bkeeper.storage.inspect_entry_log import (
    EntryLogDamage,
    EntryLogFile,
    EntryLogRecord,
    entry_log_file,
    entry_log_path,
    map_differences,
    read_entry_log,
)
from bkeeper.storage.ledgers_map import EntryLogMeta, encode_ledgers_map


def _first_log(fs: MemoryFileSystem) -> EntryLogFile:
    path, log_id = entry_log_path(fs, "/data", "1")
    assert path == f"{LEDGERS}/{entry_log_name(1)}"
    return entry_log_file(fs, path, log_id)


def _records(items: list[EntryLogRecord | EntryLogDamage]) -> list[EntryLogRecord]:
    return [i for i in items if isinstance(i, EntryLogRecord)]


def _rewrite(fs: MemoryFileSystem, path: str, data: bytes) -> None:
    if fs.exists(path):
        fs.remove(path)
    handle = fs.open_append(path)
    handle.write(data)
    handle.sync()
    handle.close()


def test_a_closed_log_gives_every_record_and_its_map() -> None:
    fs = MemoryFileSystem()
    build(fs)
    log = _first_log(ReadOnlyFs(fs))  # type: ignore[arg-type]
    assert log.header_ok and log.ledgers_map is not None
    items = list(read_entry_log(ReadOnlyFs(fs), log, bodies=True))  # type: ignore[arg-type]
    records = _records(items)
    assert len(records) == len(items)  # no damage
    in_index = sorted(
        (loc & 0xFFFFFFFF, lid, e) for (lid, e), loc in locations(fs).items() if loc >> 32 == 1
    )
    assert [(r.offset, r.ledger_id, r.entry_id) for r in records] == in_index
    last = records[-1]
    assert log.records_end == last.offset + 8 + last.length < log.size_bytes
    assert all(r.body is not None and len(r.body) == r.length for r in records)
    scanned: dict[int, int] = {}
    for r in records:
        scanned[r.ledger_id] = scanned.get(r.ledger_id, 0) + 8 + r.length
    assert log.ledgers_map.ledgers == scanned
    assert map_differences(log, scanned) == []


def test_a_damaged_record_stops_the_scan_and_says_why() -> None:
    fs = MemoryFileSystem()
    build(fs)
    log = _first_log(fs)
    before = _records(list(read_entry_log(fs, log)))
    victim = before[10]
    fs.corrupt(log.path, victim.offset + 8 + 40, b"\x00")  # in its payload (b"x" * 100)
    items = list(read_entry_log(fs, log))
    assert _records(items) == before[:10]
    assert items[-1] == EntryLogDamage(
        victim.offset, "entry record fails its checksum", log.records_end - victim.offset
    )


def test_a_log_without_map_ends_at_its_size_and_a_torn_header_is_named() -> None:
    fs = MemoryFileSystem()
    build(fs)
    log = _first_log(fs)
    before = _records(list(read_entry_log(fs, log)))
    last = before[-1]
    fs.truncate(log.path, last.offset + 4)  # the map and half the last record's header go
    cut = _first_log(fs)
    assert cut.ledgers_map is None and cut.records_end == cut.size_bytes == last.offset + 4
    assert [f.ledgers_map for f in list_files(fs, "/data", journal=False, index=False)][:2] == [
        False,
        True,
    ]
    items = list(read_entry_log(fs, cut))
    assert _records(items) == before[:-1]
    assert items[-1] == EntryLogDamage(last.offset, "short record header", 4)
    assert map_differences(cut, {}) == []  # no map, nothing to disagree with


def test_a_map_that_disagrees_with_the_records_is_told() -> None:
    fs = MemoryFileSystem()
    build(fs)
    log = _first_log(fs)
    assert log.ledgers_map is not None
    true = dict(log.ledgers_map.ledgers)
    wrong = dict(true)
    first = min(wrong)
    wrong[first] += 49
    wrong[99] = 10
    records = fs.read_file(log.path)[: log.records_end]
    map_bytes = encode_ledgers_map(EntryLogMeta(1, wrong), log.records_end)
    _rewrite(fs, log.path, records + map_bytes)
    changed = _first_log(fs)
    assert changed.records_end == log.records_end
    assert map_differences(changed, true) == [
        (first, true[first] + 49, true[first]),
        (99, 10, 0),
    ]


def test_a_bad_header_is_told_and_the_records_still_read() -> None:
    fs = MemoryFileSystem()
    build(fs)
    before = _records(list(read_entry_log(fs, _first_log(fs))))
    fs.corrupt(f"{LEDGERS}/{entry_log_name(1)}", 0, b"XXXX")
    log = _first_log(fs)
    assert not log.header_ok
    assert _records(list(read_entry_log(fs, log))) == before


def test_list_files_shows_compactions_files() -> None:
    fs = MemoryFileSystem()
    build(fs)
    name = numbered_file_name(77, COMPACTING_SUFFIX)
    _rewrite(fs, f"{LEDGERS}/{name}", b"x" * 40)
    (compacting,) = [f for f in list_files(fs, "/data") if f.kind == "compacting"]
    assert (compacting.number, compacting.size_bytes, compacting.ledgers_map) == (77, 40, None)


def test_the_log_being_written_reads_up_to_what_it_holds() -> None:
    """A running storage's current log has no map yet: its records end at its size."""
    fs = MemoryFileSystem()
    storage, acks = open_storage(fs)
    try:
        _write(storage, 7, range(30))
        acks.wait_count(30)
        storage.checkpoint()
        path, log_id = entry_log_path(fs, "/data", f"{LEDGERS}/{entry_log_name(1)}")
        log = entry_log_file(fs, path, log_id)
        items = list(read_entry_log(fs, log))
    finally:
        storage.close()
    assert log.ledgers_map is None and log.records_end == log.size_bytes
    assert [(r.ledger_id, r.entry_id) for r in _records(items)] == [(7, e) for e in range(30)]
    assert len(_records(items)) == len(items)


def test_entry_log_path_takes_an_id_or_a_path_and_names_what_is_wrong() -> None:
    fs = MemoryFileSystem()
    build(fs)
    path = f"{LEDGERS}/{entry_log_name(2)}"
    assert entry_log_path(fs, None, path) == (path, 2)
    with pytest.raises(StorageError, match="give the bookie's --data-dir"):
        entry_log_path(fs, None, "2")
    with pytest.raises(StorageError, match=r"/data/current/ledgers/00000000000003e7.log: no such"):
        entry_log_path(fs, "/data", "999")
    with pytest.raises(StorageError, match=r"^/x/index-1.idx: not an entry log name"):
        entry_log_path(fs, None, "/x/index-1.idx")
