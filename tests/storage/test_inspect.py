"""Looking at a bookie's files (bkeeper.storage.inspect*): listings, the checkpoint, a journal
file's groups and damage, and the index checked against the entry logs, on the in-memory
filesystem and on real directories, against data written by a real Storage."""

from __future__ import annotations

import dataclasses
import os
import struct
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from crc32c import crc32c
from storage_helpers import KEY, entry_body, listing, open_storage, small_config

from bkeeper.common.errors import CorruptRecordError, StorageError, TooManyRequestsError
from bkeeper.storage import FileSystem, MemoryFileSystem, OsFileSystem, ReadableFile, Storage
from bkeeper.storage.checkpoint_file import CheckpointRecord, read_checkpoint, write_checkpoint
from bkeeper.storage.entry_log import entry_log_name
from bkeeper.storage.filesystem import write_file_atomic
from bkeeper.storage.index_file import encode_index_header, index_file_name, load_index
from bkeeper.storage.inspect import (
    ConsistencyReport,
    JournalMarkView,
    check_consistency,
    last_mark,
    list_files,
)
from bkeeper.storage.inspect_dirs import bookie_dirs
from bkeeper.storage.inspect_entry_log import entry_log_path
from bkeeper.storage.inspect_journal import (
    JournalDamage,
    JournalGroup,
    JournalItem,
    journal_path,
    read_journal,
)
from bkeeper.storage.journal_format import journal_file_name

LEDGERS = "/data/current/ledgers"
JOURNAL = "/data/current/journal"
_RECORD = struct.Struct(">II")


class ReadOnlyFs:
    """A FileSystem that only reads: any write, truncation, rename or removal fails the
    test, so a function that passes through it is proven read-only."""

    def __init__(self, fs: FileSystem) -> None:
        self._fs = fs

    def open_read(self, path: str) -> ReadableFile:
        return self._fs.open_read(path)

    def read_file(self, path: str) -> bytes:
        return self._fs.read_file(path)

    def list_dir(self, path: str) -> list[str]:
        return self._fs.list_dir(path)

    def size(self, path: str) -> int:
        return self._fs.size(path)

    def exists(self, path: str) -> bool:
        return self._fs.exists(path)

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"inspection called FileSystem.{name}")


def _write(storage: Storage, ledger_id: int, entries: range, recovery: bool = False) -> None:
    """Add the entries (tokens: (ledger, entry)); a full write cache is flushed by a
    checkpoint and the add tried again."""
    for entry_id in entries:
        body = entry_body(ledger_id, entry_id, payload=b"x" * 100)
        for _ in range(100):
            try:
                storage.add_entry(
                    ledger_id, entry_id, KEY, body, recovery=recovery, token=(ledger_id, entry_id)
                )
                break
            except TooManyRequestsError:
                storage.checkpoint()
        else:
            raise AssertionError("the write cache stayed full")


def build(fs: FileSystem, data_dir: str = "/data") -> dict[int, int]:
    """Three ledgers of 150 entries over several entry logs, checkpointed and closed;
    ledger -> entries."""
    storage, acks = open_storage(fs, small_config(data_dir))
    for ledger_id in (1, 2, 3):
        _write(storage, ledger_id, range(150))
    acks.wait_count(450)
    storage.close()
    return {1: 150, 2: 150, 3: 150}


def locations(fs: FileSystem, data_dir: str = "/data") -> dict[tuple[int, int], int]:
    """(ledger, entry) -> location, from the index as of the checkpoint."""
    ledgers = f"{data_dir}/current/ledgers"
    root = read_checkpoint(fs, f"{ledgers}/checkpoint")
    assert root is not None
    index = load_index(fs, f"{ledgers}/{index_file_name(root.index_generation)}", root.index_bytes)
    return {(lid, e): loc for lid, s in index.items() for e, loc in s.locations.items()}


def problems(report: ConsistencyReport) -> list[tuple[int, int, int, str]]:
    return [(p.ledger_id, p.entry_id, p.log_id, p.problem) for p in report.problems]


# -- listing and the checkpoint ------------------------------------------------------------
def test_list_files_names_every_file_with_its_size_and_the_current_ones() -> None:
    fs = MemoryFileSystem()
    build(fs)
    files = list_files(ReadOnlyFs(fs), "/data")  # type: ignore[arg-type]
    assert {f.path: f.size_bytes for f in files} == listing(fs)
    kinds = [f.kind for f in files]
    assert kinds == sorted(kinds, key=["journal", "entrylog", "index", "checkpoint"].index)
    root = read_checkpoint(fs, f"{LEDGERS}/checkpoint")
    assert root is not None
    current = {(f.kind, f.number) for f in files if f.current}
    assert current == {
        ("journal", root.mark.file_id),
        ("index", root.index_generation),
        ("checkpoint", -1),
    }
    logs = [f.number for f in files if f.kind == "entrylog"]
    assert len(logs) >= 3 and logs == sorted(logs)
    only_logs = list_files(fs, "/data", journal=False, index=False)
    assert [f.number for f in only_logs] == logs


def test_last_mark_is_the_checkpoint() -> None:
    fs = MemoryFileSystem()
    build(fs)
    mark = last_mark(ReadOnlyFs(fs), "/data")  # type: ignore[arg-type]
    root = read_checkpoint(fs, f"{LEDGERS}/checkpoint")
    assert mark is not None and root is not None
    assert (mark.journal_file_id, mark.journal_offset) == tuple(root.mark)
    assert (mark.index_generation, mark.index_bytes, mark.limbo) == (
        root.index_generation,
        root.index_bytes,
        False,
    )
    assert mark.index_path == f"{LEDGERS}/{index_file_name(root.index_generation)}"
    assert mark.as_dict()["journal_offset"] == root.mark.offset


def test_a_data_dir_without_checkpoint_has_no_mark_and_nothing_to_check() -> None:
    fs = MemoryFileSystem()
    fs.makedirs(JOURNAL)
    fs.makedirs(LEDGERS)
    assert last_mark(fs, "/data") is None
    report = check_consistency(fs, "/data")
    assert (report.checkpoint, report.entries, report.consistent) == (None, 0, True)


def test_a_missing_or_foreign_directory_is_named() -> None:
    fs = MemoryFileSystem()
    with pytest.raises(StorageError, match=r"^/nowhere: no such directory$"):
        list_files(fs, "/nowhere")
    fs.makedirs("/other/current/journal")
    with pytest.raises(
        StorageError,
        match=r"^/other is not a bookie data directory \(no current/ledgers in it; give "
        r"--ledger-dir and --journal-dir if the bookie was started with them\)$",
    ):
        last_mark(fs, "/other")


def test_a_damaged_checkpoint_is_an_error_naming_it() -> None:
    fs = MemoryFileSystem()
    build(fs)
    fs.corrupt(f"{LEDGERS}/checkpoint", 20, b"\xff")
    with pytest.raises(CorruptRecordError, match=r"checkpoint at offset 0: .*checksum"):
        last_mark(fs, "/data")
    with pytest.raises(CorruptRecordError, match="checkpoint"):
        check_consistency(fs, "/data")


# -- the index against the entry logs ------------------------------------------------------
def test_a_whole_bookie_is_consistent() -> None:
    fs = MemoryFileSystem()
    build(fs)
    report = check_consistency(ReadOnlyFs(fs), "/data")  # type: ignore[arg-type]
    logs = {loc >> 32 for loc in locations(fs).values()}
    assert report.consistent
    assert (report.ledgers, report.entries, report.entry_logs) == (3, 450, len(logs))
    assert report.problems == () and report.rechecked == 0


def test_a_record_failing_its_crc_is_named() -> None:
    fs = MemoryFileSystem()
    build(fs)
    location = locations(fs)[(2, 77)]
    log_id, offset = location >> 32, location & 0xFFFFFFFF
    path = f"{LEDGERS}/{entry_log_name(log_id)}"
    fs.corrupt(path, offset + _RECORD.size + 40, b"\x00")
    report = check_consistency(fs, "/data")
    assert not report.consistent and report.problems_total == 1
    assert problems(report) == [(2, 77, log_id, "bad record")]
    (problem,) = report.problems
    assert (problem.log_path, problem.offset) == (path, offset)
    assert problem.detail == "entry record fails its checksum"
    assert report.entries == 450


def test_a_record_cut_short_is_named() -> None:
    fs = MemoryFileSystem()
    build(fs)
    by_log: dict[int, list[tuple[int, int, int]]] = {}
    for (ledger_id, entry_id), location in locations(fs).items():
        by_log.setdefault(location >> 32, []).append((location & 0xFFFFFFFF, ledger_id, entry_id))
    log_id = min(by_log)
    offset, ledger_id, entry_id = max(by_log[log_id])  # the log's last record
    fs.truncate(f"{LEDGERS}/{entry_log_name(log_id)}", offset + _RECORD.size + 10)
    report = check_consistency(fs, "/data")
    assert problems(report) == [(ledger_id, entry_id, log_id, "bad record")]


def test_a_record_naming_another_entry_is_named() -> None:
    """The record's CRC is good, but its body says ledger 3 entry 5: the index is wrong."""
    fs = MemoryFileSystem()
    build(fs)
    location = locations(fs)[(1, 10)]
    log_id, offset = location >> 32, location & 0xFFFFFFFF
    path = f"{LEDGERS}/{entry_log_name(log_id)}"
    length, _ = _RECORD.unpack(fs.read_file(path)[offset : offset + _RECORD.size])
    body = bytearray(fs.read_file(path)[offset + 8 : offset + 8 + length])
    body[:16] = struct.pack(">qq", 3, 5)
    fs.corrupt(path, offset, _RECORD.pack(length, crc32c(bytes(body))) + bytes(body))
    report = check_consistency(fs, "/data")
    assert problems(report) == [(1, 10, log_id, "wrong entry")]
    assert report.problems[0].detail == "the record holds ledger 3 entry 5"


def test_a_missing_log_is_reported_for_each_of_its_entries_capped() -> None:
    fs = MemoryFileSystem()
    build(fs)
    where = locations(fs)
    log_id = min(loc >> 32 for loc in where.values())
    in_log = sorted(key for key, loc in where.items() if loc >> 32 == log_id)
    fs.remove(f"{LEDGERS}/{entry_log_name(log_id)}")
    report = check_consistency(fs, "/data", problems_max=5)
    assert report.problems_total == len(in_log) > 5
    assert report.problems_left_out == len(in_log) - 5
    assert problems(report) == [(lid, e, log_id, "missing log") for lid, e in in_log[:5]]
    assert report.problems[0].detail == f"no entry log {entry_log_name(log_id)}"
    assert report.rechecked == 0


class HookedFs(MemoryFileSystem):
    """The in-memory filesystem, running ``hook`` once, just before the first open or read
    of a path containing ``trigger``: another process (the bookie) acting in between."""

    def __init__(self, trigger: str) -> None:
        super().__init__()
        self.trigger = trigger
        self.hook: Callable[[], None] | None = None

    def _maybe(self, path: str) -> None:
        hook = self.hook
        if hook is not None and self.trigger in path:
            self.hook = None
            hook()

    def open_read(self, path: str) -> ReadableFile:
        self._maybe(path)
        return super().open_read(path)

    def read_file(self, path: str) -> bytes:
        self._maybe(path)
        return super().read_file(path)


def _two_runs(fs: FileSystem) -> None:
    """Ledger 1 in the first run's entry log; ledger 2 (20 entries) and ledger 5 (80) in the
    second's (each run of the engine starts a new log)."""
    for ledgers in ((1,), (2, 5)):
        storage, acks = open_storage(fs, small_config(compaction_rate_bytes_per_s=0))
        for ledger_id in ledgers:
            _write(storage, ledger_id, range(20 if ledger_id != 5 else 80))
        acks.wait_count(20 if ledgers == (1,) else 100)
        storage.close()


def _collect_garbage(fs: FileSystem, deleted: tuple[int, ...]) -> None:
    """The bookie deletes ``deleted`` and runs a major garbage collection."""
    storage, _ = open_storage(fs, small_config(compaction_rate_bytes_per_s=0))
    for ledger_id in deleted:
        storage.delete_ledger(ledger_id)
    storage.collect_garbage(minor=False, major=True)
    storage.close()


def test_a_log_compacted_away_during_the_check_is_followed_to_the_newer_checkpoint() -> None:
    """Ledger 5 is deleted and compaction copies ledger 2's entries out of log 2 (a fifth
    live), checkpoints and removes log 2, just as the check is about to read it: ledger 2's
    entries are checked where the newer index says they are, ledger 5's are gone."""
    fs = HookedFs(entry_log_name(2))
    _two_runs(fs)
    assert {loc >> 32 for (lid, _), loc in locations(fs).items() if lid in (2, 5)} == {2}
    fs.hook = lambda: _collect_garbage(fs, (5,))
    report = check_consistency(fs, "/data")
    assert fs.hook is None  # it ran
    assert not fs.exists(f"{LEDGERS}/{entry_log_name(2)}")
    assert {loc >> 32 for (lid, _), loc in locations(fs).items() if lid == 2} == {3}
    assert report.consistent, report.problems
    assert (report.entries, report.rechecked) == (120, 20)
    assert report.checkpoint is not None
    assert report.checkpoint == last_mark(fs, "/data")


def test_a_log_removed_with_its_deleted_ledgers_during_the_check_is_no_problem() -> None:
    fs = HookedFs(entry_log_name(2))
    _two_runs(fs)
    fs.hook = lambda: _collect_garbage(fs, (2, 5))
    report = check_consistency(fs, "/data")
    assert fs.hook is None
    assert not fs.exists(f"{LEDGERS}/{entry_log_name(2)}")
    assert report.consistent and report.rechecked == 0 and report.entries == 120


def test_a_log_missing_at_an_unchanged_checkpoint_is_reported() -> None:
    fs = HookedFs(entry_log_name(2))
    _two_runs(fs)
    fs.hook = lambda: fs.remove(f"{LEDGERS}/{entry_log_name(2)}")
    report = check_consistency(fs, "/data")
    assert report.problems_total == 100
    assert {p.problem for p in report.problems} == {"missing log"}


def test_an_index_generation_replaced_while_loading_is_followed() -> None:
    """A checkpoint writes a new index generation and removes the old one between the check
    reading the checkpoint and reading the index: the check reads the newer checkpoint."""
    fs = HookedFs("index-")
    build(fs)
    root = read_checkpoint(fs, f"{LEDGERS}/checkpoint")
    assert root is not None
    old = f"{LEDGERS}/{index_file_name(root.index_generation)}"

    def new_generation() -> None:
        generation = root.index_generation + 1
        data = encode_index_header(generation) + fs.read_file(old)[16 : root.index_bytes]
        handle = fs.open_append(f"{LEDGERS}/{index_file_name(generation)}")
        handle.write(data)
        handle.sync()
        handle.close()
        write_checkpoint(
            fs,
            f"{LEDGERS}/checkpoint",
            CheckpointRecord(root.marks, generation, len(data), False, root.ledger_dirs),
        )
        fs.remove(old)

    fs.hook = new_generation
    report = check_consistency(fs, "/data")
    assert fs.hook is None
    assert report.consistent and report.entries == 450
    assert report.checkpoint is not None
    assert report.checkpoint.index_generation == root.index_generation + 1


def test_the_check_agrees_with_a_running_storage() -> None:
    """While a storage adds entries and checkpoints in another thread, every check finds
    what the checkpoint it read names, and no problem."""
    fs = MemoryFileSystem()
    storage, _ = open_storage(fs)
    done = threading.Event()
    failures: list[BaseException] = []

    def write() -> None:
        try:
            for round_ in range(30):
                _write(storage, 1 + round_ % 4, range(round_ * 20, round_ * 20 + 20))
                storage.checkpoint()
        except BaseException as exc:
            failures.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=write)
    thread.start()
    seen = 0
    try:
        while not done.is_set() or seen == 0:
            report = check_consistency(ReadOnlyFs(fs), "/data")  # type: ignore[arg-type]
            assert report.consistent, report.problems
            seen = max(seen, report.entries)
    finally:
        thread.join()
        storage.close()
    assert failures == []
    final = check_consistency(fs, "/data")
    assert final.consistent and final.entries == 600


# -- a journal file --------------------------------------------------------------------------
def _journal(fs: FileSystem) -> tuple[str, int]:
    """A journal left by a storage that died: ledger 1 in group 0, ledger 2 in group 1,
    ledger 3 then a fence of ledger 1 in group 2."""
    storage, acks = open_storage(fs)
    for group, ledger_id in enumerate((1, 2, 3)):
        _write(storage, ledger_id, range(30))
        acks.wait_count(30 * (group + 1))
    storage.fence(1, KEY, token="fence")
    acks.wait_for("fence")
    storage.abort()
    names = [n for n in fs.list_dir(JOURNAL) if n.endswith(".txn")]
    path, file_id = journal_path(fs, "/data", str(int(max(names)[:16], 16)))
    assert path == f"{JOURNAL}/{max(names)}"
    return path, file_id


def _groups(items: list[JournalItem]) -> list[JournalGroup]:
    return [i for i in items if isinstance(i, JournalGroup)]


def _damage(items: list[JournalItem]) -> list[JournalDamage]:
    return [i for i in items if isinstance(i, JournalDamage)]


def test_read_journal_gives_every_group_and_record() -> None:
    fs = MemoryFileSystem()
    path, file_id = _journal(fs)
    items = list(read_journal(ReadOnlyFs(fs), path, file_id))  # type: ignore[arg-type]
    groups = _groups(items)
    assert _damage(items) == []
    assert [g.seq for g in groups] == list(range(len(groups)))
    records = [r for g in groups for r in g.records]
    assert [(r.kind, r.ledger_id, r.entry_id) for r in records if r.kind != "ADD_ENTRY"] == [
        ("MASTER_KEY", 1, -1),
        ("MASTER_KEY", 2, -1),
        ("MASTER_KEY", 3, -1),
        ("FENCE", 1, -1),
    ]
    adds = [(r.ledger_id, r.entry_id) for r in records if r.kind == "ADD_ENTRY"]
    assert adds == [(lid, e) for lid in (1, 2, 3) for e in range(30)]
    entry = next(r for r in records if r.kind == "ADD_ENTRY")
    assert entry.length == len(entry_body(1, 0, payload=b"x" * 100))
    assert groups[-1].offset + groups[-1].size_bytes == fs.size(path)
    assert all(g.count == len(g.records) for g in groups)
    assert all(r.group_seq == g.seq for g in groups for r in g.records)


def test_read_journal_reports_a_damaged_record_and_goes_on() -> None:
    fs = MemoryFileSystem()
    path, file_id = _journal(fs)
    before = _groups(list(read_journal(fs, path, file_id)))
    # The group holding ledger 2's entry 7, found by content: a ledger's adds may span two
    # groups when the journal thread wakes mid-way (a loaded machine).
    at = next(
        i
        for i, g in enumerate(before)
        if any((r.ledger_id, r.entry_id) == (2, 7) for r in g.records)
    )
    victim = next(r for r in before[at].records if (r.ledger_id, r.entry_id) == (2, 7))
    fs.corrupt(path, victim.offset + 9 + 30, b"\xee")  # inside its body, past the ids
    items = list(read_journal(fs, path, file_id))
    groups = _groups(items)
    assert [g.seq for g in groups] == [g.seq for g in before]
    assert len(groups[at].records) == len(before[at].records) - 1
    (damage,) = _damage(items)
    assert (damage.offset, damage.group_offset, damage.reason) == (
        victim.offset,
        before[at].offset,
        "checksum mismatch",
    )
    assert damage.next_group == before[at + 1].offset and not damage.at_tail
    assert damage.ledgers == (2,)  # ledger 2's adds began once ledger 1's were durable
    assert items.index(damage) == items.index(groups[at]) + 1


def test_read_journal_reports_a_torn_tail_and_a_bad_group_header() -> None:
    fs = MemoryFileSystem()
    path, file_id = _journal(fs)
    before = _groups(list(read_journal(fs, path, file_id)))
    fs.truncate(path, before[-1].offset + 30)
    items = list(read_journal(fs, path, file_id))
    (damage,) = _damage(items)
    assert damage.at_tail and damage.offset == before[-1].offset
    assert damage.reason == (
        f"group shorter than its header says (30 of {before[-1].size_bytes} bytes in the file)"
    )
    assert [g.seq for g in _groups(items)] == [g.seq for g in before[:-1]]

    fs.corrupt(path, before[1].offset + 3, b"\x77")  # group 1's header length
    items = list(read_journal(fs, path, file_id))
    first = _damage(items)[0]
    assert first.offset == before[1].offset and first.reason.startswith("bad group header")
    assert first.next_group == before[2].offset
    assert [g.seq for g in _groups(items)] == [g.seq for g in before[:-1] if g.seq != 1]


def test_read_journal_reports_a_bad_file_header() -> None:
    fs = MemoryFileSystem()
    path, file_id = _journal(fs)
    fs.corrupt(path, 0, b"XXXX")
    items = list(read_journal(fs, path, file_id))
    assert items[0] == JournalDamage(0, -1, "bad file header", 16, None)
    assert len(_groups(items)) == len(_groups(list(read_journal(fs, path, file_id))))


def test_journal_path_takes_an_id_or_a_path_and_names_what_is_wrong() -> None:
    fs = MemoryFileSystem()
    path, file_id = _journal(fs)
    assert journal_path(fs, None, path) == (path, file_id)
    with pytest.raises(StorageError, match="give the bookie's --data-dir"):
        journal_path(fs, None, "1")
    with pytest.raises(StorageError, match=r"/data/current/journal/00000000000003e7.txn: no such"):
        journal_path(fs, "/data", "999")
    with pytest.raises(StorageError, match=r"^/tmp/x.log: not a journal file name"):
        journal_path(fs, None, "/tmp/x.log")


# -- real directories ------------------------------------------------------------------------
def test_on_a_real_directory(tmp_path: Path) -> None:
    fs = OsFileSystem()
    data = str(tmp_path / "bookie")
    build(fs, data)
    files = list_files(fs, data)
    assert {f.path: f.size_bytes for f in files} == {
        str(p): p.stat().st_size for p in (tmp_path / "bookie").rglob("*") if p.is_file()
    }
    assert check_consistency(fs, data).consistent
    location = locations(fs, data)[(3, 149)]
    log = os.path.join(data, "current", "ledgers", entry_log_name(location >> 32))
    with open(log, "r+b") as handle:
        handle.seek((location & 0xFFFFFFFF) + _RECORD.size + 20)
        handle.write(b"\x01\x02")
    report = check_consistency(fs, data)
    assert problems(report) == [(3, 149, location >> 32, "bad record")]
    assert report.problems[0].log_path == log


# -- several ledger dirs and journal dirs ----------------------------------------------------
SECOND = "/disk2"
MULTI_LEDGER_DIRS = (LEDGERS, f"{SECOND}/ledgers")
MULTI_JOURNAL_DIRS = (JOURNAL, f"{SECOND}/journal")
MULTI_DIRS = (*MULTI_JOURNAL_DIRS, *MULTI_LEDGER_DIRS)
CHECKPOINT = f"{LEDGERS}/checkpoint"


def build_multi(
    fs: FileSystem,
    ledger_dirs: tuple[str, ...] = MULTI_LEDGER_DIRS,
    journal_dirs: tuple[str, ...] = MULTI_JOURNAL_DIRS,
) -> None:
    """:func:`build` by a storage with two ledger dirs and two journal dirs (the first of
    each in the data dir, named by the checkpoint relative to it; the second outside)."""
    config = small_config(ledger_dirs=ledger_dirs, journal_dirs=journal_dirs)
    storage, acks = open_storage(fs, config)
    for ledger_id in (1, 2, 3):
        _write(storage, ledger_id, range(150))
    acks.wait_count(450)
    storage.close()


def _in_dir(fs: FileSystem, directory: str, suffix: str) -> list[int]:
    return sorted(int(n[:16], 16) for n in fs.list_dir(directory) if n.endswith(suffix))


def test_list_files_of_several_dirs_names_each_file_s_dir() -> None:
    fs = MemoryFileSystem()
    build_multi(fs)
    files = list_files(ReadOnlyFs(fs), "/data")  # type: ignore[arg-type]
    assert {f.path: f.size_bytes for f in files} == listing(fs, MULTI_DIRS)
    root = read_checkpoint(fs, CHECKPOINT)
    assert root is not None
    assert root.ledger_dirs == ("current/ledgers", f"{SECOND}/ledgers")
    assert [m.key for m in root.marks] == ["current/journal", f"{SECOND}/journal"]
    journals = [(f.directory, f.number, f.current) for f in files if f.kind == "journal"]
    assert journals == [
        (key, file_id, file_id == mark.file_id)
        for (key, mark), directory in zip(root.marks, MULTI_JOURNAL_DIRS, strict=True)
        for file_id in _in_dir(fs, directory, ".txn")
    ]
    assert {d for d, _, current in journals if current} == {m.key for m in root.marks}
    logs = [(f.number, f.path) for f in files if f.kind == "entrylog"]
    by_number = sorted(
        (log_id, f"{d}/{entry_log_name(log_id)}")
        for d in MULTI_LEDGER_DIRS
        for log_id in _in_dir(fs, d, ".log")
    )
    assert logs == by_number
    keys = {f.directory for f in files if f.kind == "entrylog"}
    assert keys == {"current/ledgers", f"{SECOND}/ledgers"}  # logs in both
    assert [(f.kind, f.directory, f.current) for f in files if f.kind != "journal"][-2:] == [
        ("index", "current/ledgers", True),
        ("checkpoint", "current/ledgers", True),
    ]
    assert files[0].as_dict() == {
        "kind": "journal",
        "dir": "current/journal",
        "number": files[0].number,
        "name": journal_file_name(files[0].number),
        "path": f"{JOURNAL}/{journal_file_name(files[0].number)}",
        "bytes": fs.size(f"{JOURNAL}/{journal_file_name(files[0].number)}"),
        "current": True,
    }


def test_last_mark_names_every_journal_s_mark_and_the_ledger_dirs() -> None:
    fs = MemoryFileSystem()
    build_multi(fs)
    mark = last_mark(ReadOnlyFs(fs), "/data")  # type: ignore[arg-type]
    root = read_checkpoint(fs, CHECKPOINT)
    assert mark is not None and root is not None
    first_mark, second_mark = (m.position for m in root.marks)
    assert mark.journals == (
        JournalMarkView(
            JOURNAL,
            "current/journal",
            first_mark.file_id,
            first_mark.offset,
            f"{JOURNAL}/{journal_file_name(first_mark.file_id)}",
        ),
        JournalMarkView(
            f"{SECOND}/journal",
            f"{SECOND}/journal",
            second_mark.file_id,
            second_mark.offset,
            f"{SECOND}/journal/{journal_file_name(second_mark.file_id)}",
        ),
    )
    assert mark.ledger_dirs == MULTI_LEDGER_DIRS
    assert (mark.journal_file_id, mark.journal_offset) == tuple(first_mark)
    assert mark.as_dict()["journals"] == [j.as_dict() for j in mark.journals]


def test_a_damaged_log_in_the_second_ledger_dir_is_named() -> None:
    fs = MemoryFileSystem()
    build_multi(fs)
    report = check_consistency(ReadOnlyFs(fs), "/data")  # type: ignore[arg-type]
    assert report.consistent and report.entries == 450
    assert report.ledger_dirs == MULTI_LEDGER_DIRS
    in_second = {
        key: loc
        for key, loc in locations(fs).items()
        if fs.exists(f"{SECOND}/ledgers/{entry_log_name(loc >> 32)}")
    }
    (ledger_id, entry_id), location = min(in_second.items())
    log_id, offset = location >> 32, location & 0xFFFFFFFF
    path = f"{SECOND}/ledgers/{entry_log_name(log_id)}"
    fs.corrupt(path, offset + _RECORD.size + 40, b"\x00")
    report = check_consistency(fs, "/data")
    assert problems(report) == [(ledger_id, entry_id, log_id, "bad record")]
    assert (report.problems[0].log_path, report.problems[0].offset) == (path, offset)

    fs.remove(path)
    report = check_consistency(fs, "/data", problems_max=1)
    assert report.problems_total == sum(1 for loc in in_second.values() if loc >> 32 == log_id)
    assert report.problems[0].problem == "missing log"
    assert (
        report.problems[0].detail
        == f"no entry log {entry_log_name(log_id)} in any of the 2 ledger dirs"
    )


def test_dirs_given_override_the_checkpoint_s_and_a_difference_is_one_line() -> None:
    fs = MemoryFileSystem()
    build_multi(fs)
    same = bookie_dirs(fs, "/data", MULTI_LEDGER_DIRS, MULTI_JOURNAL_DIRS)
    assert (same.ledger_dirs, same.journal_dirs, same.disagreement) == (
        MULTI_LEDGER_DIRS,
        MULTI_JOURNAL_DIRS,
        None,
    )
    assert bookie_dirs(fs, "/data").disagreement is None
    given = bookie_dirs(fs, "/data", journal_dirs=(JOURNAL,))
    assert (given.ledger_dirs, given.journal_dirs) == (MULTI_LEDGER_DIRS, (JOURNAL,))
    assert given.disagreement == (
        f"the dirs given differ from those the checkpoint {CHECKPOINT} names (journal dirs "
        f"{JOURNAL} and {SECOND}/journal, given {JOURNAL}): showing the dirs given"
    )
    files = list_files(fs, given, entrylog=False, index=False)
    assert {f.directory for f in files} == {"current/journal"}
    both = bookie_dirs(fs, "/data", (LEDGERS,), (f"{SECOND}/journal", JOURNAL))
    assert both.disagreement == (
        f"the dirs given differ from those the checkpoint {CHECKPOINT} names (ledger dirs "
        f"{LEDGERS} and {SECOND}/ledgers, given {LEDGERS}; journal dirs {JOURNAL} and "
        f"{SECOND}/journal, given {SECOND}/journal and {JOURNAL}): showing the dirs given"
    )
    report = check_consistency(fs, both)  # the logs of the second ledger dir left out
    assert report.ledger_dirs == (LEDGERS,)
    assert {p.problem for p in report.problems} == {"missing log"}
    with pytest.raises(StorageError, match=r"^ledger dir /nope \(given\): no such directory$"):
        bookie_dirs(fs, "/data", (LEDGERS, "/nope"))


def test_a_bookie_without_checkpoint_uses_the_dirs_given() -> None:
    fs = MemoryFileSystem()
    build_multi(fs)
    fs.remove(CHECKPOINT)
    files = list_files(fs, bookie_dirs(fs, "/data", MULTI_LEDGER_DIRS, MULTI_JOURNAL_DIRS))
    assert {f.path for f in files} == set(listing(fs, MULTI_DIRS))
    assert not any(f.current for f in files)
    alone = list_files(fs, "/data")  # the default dirs only
    assert {f.path for f in alone} == set(listing(fs))
    assert last_mark(fs, "/data") is None


def test_a_first_ledger_dir_outside_the_data_dir_must_be_given() -> None:
    """The checkpoint is in the first ledger dir: given it, the rest is learnt (the journal
    dirs); the data dir alone is not enough, and the error says what to give."""
    fs = MemoryFileSystem()
    fs.makedirs("/data")
    ledger_dirs = ("/disk1/ledgers", f"{SECOND}/ledgers")
    build_multi(fs, ledger_dirs, ("/disk1/journal", f"{SECOND}/journal"))
    with pytest.raises(
        StorageError,
        match=r"^/data is not a bookie data directory \(no current/journal and current/ledgers "
        r"in it; give --ledger-dir and --journal-dir if the bookie was started with them\)$",
    ):
        last_mark(fs, "/data")
    dirs = bookie_dirs(fs, "/data", ledger_dirs)
    assert dirs.journal_dirs == ("/disk1/journal", f"{SECOND}/journal")
    assert dirs.disagreement is None
    mark = last_mark(fs, dirs)
    assert mark is not None and [j.key for j in mark.journals] == list(dirs.journal_dirs)
    assert check_consistency(fs, dirs).entries == 450


def test_a_dir_the_checkpoint_names_that_is_missing_is_named() -> None:
    fs = MemoryFileSystem()
    build_multi(fs)
    root = read_checkpoint(fs, CHECKPOINT)
    assert root is not None
    gone = (root.marks[0], root.marks[1]._replace(key="/gone/journal"))
    write_checkpoint(fs, CHECKPOINT, dataclasses.replace(root, marks=gone))
    with pytest.raises(
        StorageError,
        match=rf"^journal dir /gone/journal \(named by the checkpoint {CHECKPOINT}\): no such "
        "directory$",
    ):
        list_files(fs, "/data")
    dirs = bookie_dirs(fs, "/data", journal_dirs=MULTI_JOURNAL_DIRS)  # an override
    assert dirs.disagreement is not None and "/gone/journal" in dirs.disagreement


def test_a_version_1_checkpoint_names_the_default_dirs() -> None:
    """A data dir last checkpointed before several dirs were allowed."""
    fs = MemoryFileSystem()
    build(fs)
    root = read_checkpoint(fs, CHECKPOINT)
    assert root is not None
    body = struct.pack(
        ">4sIQQQQI", b"BKCP", 1, *root.mark, root.index_generation, root.index_bytes, 0
    )
    fs.remove(CHECKPOINT)
    write_file_atomic(fs, CHECKPOINT, body + struct.pack(">I", crc32c(body)))
    mark = last_mark(fs, "/data")
    assert mark is not None
    assert [(j.directory, j.key, j.file_id, j.offset) for j in mark.journals] == [
        (JOURNAL, "current/journal", *root.mark)
    ]
    assert mark.ledger_dirs == (LEDGERS,)
    current = {(f.kind, f.number) for f in list_files(fs, "/data") if f.current}
    assert ("journal", root.mark.file_id) in current
    assert check_consistency(fs, "/data").entries == 450


def test_journal_path_finds_an_id_in_its_journal_dir_and_refuses_an_ambiguous_one() -> None:
    fs = MemoryFileSystem()
    build_multi(fs)
    # Each journal numbers its files on its own, so the same id may be in both dirs; which
    # ids are left depends on when checkpoints came (a roll, then removal): make one shared.
    file_id = _in_dir(fs, JOURNAL, ".txn")[0]
    name = journal_file_name(file_id)
    if file_id not in _in_dir(fs, f"{SECOND}/journal", ".txn"):
        copy = fs.open_append(f"{SECOND}/journal/{name}")
        copy.write(fs.read_file(f"{JOURNAL}/{name}"))
        copy.sync()
        copy.close()
    with pytest.raises(StorageError) as raised:
        journal_path(fs, "/data", str(file_id))
    assert str(raised.value) == (
        f"journal file id {file_id} is ambiguous: in dirs {JOURNAL} and {SECOND}/journal; "
        "give --journal-dir or the file's path"
    )
    assert journal_path(fs, None, str(file_id), journal_dirs=(f"{SECOND}/journal",)) == (
        f"{SECOND}/journal/{name}",
        file_id,
    )
    assert journal_path(fs, "/data", f"{JOURNAL}/{name}") == (f"{JOURNAL}/{name}", file_id)
    with pytest.raises(StorageError) as raised:
        journal_path(fs, "/data", "999")
    assert str(raised.value) == (
        f"no journal file {journal_file_name(999)} in the journal dirs {JOURNAL} and "
        f"{SECOND}/journal"
    )


def test_entry_log_path_finds_a_log_in_the_second_ledger_dir() -> None:
    fs = MemoryFileSystem()
    build_multi(fs)
    log_id = _in_dir(fs, f"{SECOND}/ledgers", ".log")[0]
    path = f"{SECOND}/ledgers/{entry_log_name(log_id)}"
    assert entry_log_path(fs, "/data", str(log_id)) == (path, log_id)
    assert entry_log_path(fs, None, str(log_id), ledger_dirs=MULTI_LEDGER_DIRS) == (path, log_id)
    with pytest.raises(StorageError) as raised:
        entry_log_path(fs, "/data", "999")
    assert str(raised.value) == (
        f"no entry log {entry_log_name(999)} in the ledger dirs {LEDGERS} and {SECOND}/ledgers"
    )
    with pytest.raises(StorageError, match=r"^entry log id 1: give the bookie's --data-dir"):
        entry_log_path(fs, None, "1")


def test_an_entry_log_in_two_ledger_dirs_is_an_error_naming_both() -> None:
    """As when the bookie opens: which copy the index means cannot be told."""
    fs = MemoryFileSystem()
    build_multi(fs)
    log_id = _in_dir(fs, f"{SECOND}/ledgers", ".log")[0]
    name = entry_log_name(log_id)
    handle = fs.open_append(f"{LEDGERS}/{name}")
    handle.write(fs.read_file(f"{SECOND}/ledgers/{name}"))
    handle.close()
    both = rf"^entry log {name} is in two ledger directories, {LEDGERS} and {SECOND}/ledgers$"
    with pytest.raises(StorageError, match=both):
        check_consistency(fs, "/data")
    with pytest.raises(StorageError, match=both):
        entry_log_path(fs, "/data", str(log_id))
