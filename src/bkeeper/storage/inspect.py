"""Looking at a bookie's files without opening its engine (read-only, pure over the port).

What ``bkeeper shell listfilesondisc / lastmark / localconsistencycheck`` show, in the manner
of Apache BookKeeper's ``bookkeeper shell`` commands of the same names (``readjournal`` and
``readlog``: :mod:`.inspect_journal`, :mod:`.inspect_entry_log`). Every function only reads
(``exists``, ``list_dir``, ``size``, ``open_read``, ``read_file``), so it may run against the
data directory of a running bookie as well as a stopped one. The engine's own readers are
used (the checkpoint codec, :func:`~bkeeper.storage.index_file.load_index`, the entry log
reader, :func:`~bkeeper.storage.ledgers_map.read_ledgers_map`), never a second parser.
The bookie's directories (several ledger and journal directories) are learnt from its
checkpoint or given (:mod:`.inspect_dirs`); an entry log is found in whichever ledger
directory holds it (:class:`~bkeeper.storage.dirs.LedgerDirs`).

A running bookie changes its files while they are read. The rules that keep the answers
true:

* files listed may be gone when their size is asked (a retired journal, a compacted entry
  log, an old index generation): such a file is left out, since the listing is of the files
  that exist, and the caller sees the next listing without it;
* the index is loaded as of one checkpoint (its committed length): a checkpoint that
  replaces the index generation meanwhile makes the load fail with a missing file, and the
  checkpoint is read again (at most ``_INDEX_LOAD_ATTEMPTS`` times);
* compaction may remove an entry log between reading the index and reading the log: before
  a missing log is reported, the checkpoint is read again, and each entry whose log was
  missing is checked once more at the location the newer index gives it (an entry that is
  gone from the newer index, its ledger deleted, is no problem).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from bkeeper.common.errors import CorruptRecordError, StorageError
from bkeeper.storage.checkpoint_file import CheckpointRecord, read_checkpoint
from bkeeper.storage.compaction import COMPACTING_SUFFIX
from bkeeper.storage.dirs import LedgerDirs, StorageLayout
from bkeeper.storage.entry_log import EntryLogReader, entry_log_id, entry_log_name
from bkeeper.storage.filesystem import FileSystem, numbered_file_number
from bkeeper.storage.index_file import index_file_generation, load_index
from bkeeper.storage.inspect_dirs import BookieDirs, resolve_dirs
from bkeeper.storage.journal_format import journal_file_id, journal_file_name
from bkeeper.storage.ledger_state import StoredLedger
from bkeeper.storage.ledgers_map import read_ledgers_map

__all__ = [
    "CONSISTENCY_PROBLEMS_MAX",
    "ConsistencyProblem",
    "ConsistencyReport",
    "DiskFile",
    "JournalMarkView",
    "Mark",
    "check_consistency",
    "last_mark",
    "list_files",
    "load_checkpointed_index",
    "mark_of",
]

#: How many problems :func:`check_consistency` describes by default; the rest are counted.
CONSISTENCY_PROBLEMS_MAX = 100
#: A checkpoint that replaces the index generation while it is loaded: read it again, at
#: most this many times in all.
_INDEX_LOAD_ATTEMPTS = 3
#: Locations read with one ``read_many`` call (a ledger's entries, in location order).
_CHECK_BATCH_ENTRIES = 256
#: Entry logs the consistency check keeps open at once.
_CHECK_HANDLES_MAX = 16
_ENTRY_HEAD_BYTES = 16
_OFFSET_MASK = (1 << 32) - 1


# -- the files -----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class DiskFile:
    """One file of a bookie. ``kind``: journal, entrylog, compacting (an entry log being
    written by compaction, or left by one that was interrupted), index or checkpoint;
    ``number``: the journal file id, entry log id or index generation (-1 for the
    checkpoint); ``directory``: its directory as the checkpoint names it (relative to the
    data directory when inside it);
    ``current``: the index generation, or a journal's file, the checkpoint names;
    ``ledgers_map``: whether an entry log ends with its ledgers map (None: not an entry
    log, or not known)."""

    kind: str
    number: int
    path: str
    size_bytes: int
    directory: str
    current: bool = False
    ledgers_map: bool | None = None

    def as_dict(self) -> dict[str, object]:
        found: dict[str, object] = {
            "kind": self.kind,
            "dir": self.directory,
            "number": self.number,
            "name": os.path.basename(self.path),
            "path": self.path,
            "bytes": self.size_bytes,
            "current": self.current,
        }
        if self.kind == "entrylog":
            found["ledgers_map"] = self.ledgers_map
        return found


def list_files(
    fs: FileSystem,
    where: str | BookieDirs,
    *,
    journal: bool = True,
    entrylog: bool = True,
    index: bool = True,
) -> list[DiskFile]:
    """The bookie's journal files (by journal directory, then by number), entry logs (then
    compaction's ``.compacting`` files) of every ledger directory by number, index
    generations and checkpoint (with ``index``), in that order. ``where``: the bookie's
    directories, or its data directory to learn them from its checkpoint
    (:mod:`.inspect_dirs`). See the module rules for a running bookie."""
    dirs = resolve_dirs(fs, where)
    layout = dirs.layout
    root = read_checkpoint(fs, layout.checkpoint)
    files: list[DiskFile] = []
    if journal:
        for directory in layout.journal_dirs:
            mark = root.mark_of(layout.key(directory)) if root is not None else None
            for name in sorted(fs.list_dir(directory)):
                file_id = journal_file_id(name)
                if file_id is not None:
                    current = mark is not None and mark.file_id == file_id
                    _add(fs, files, layout, "journal", file_id, directory, name, current)
    if entrylog:
        for kind, number_of in (
            ("entrylog", entry_log_id),
            ("compacting", lambda name: numbered_file_number(name, COMPACTING_SUFFIX)),
        ):
            found = sorted(
                (number, position, directory, name)
                for position, directory in enumerate(layout.ledger_dirs)
                for name in fs.list_dir(directory)
                if (number := number_of(name)) is not None
            )
            for number, _, directory, name in found:
                with_map = kind == "entrylog"
                _add(fs, files, layout, kind, number, directory, name, False, with_map=with_map)
    if index:
        for name in sorted(fs.list_dir(layout.ledgers)):
            generation = index_file_generation(name)
            if generation is not None:
                current = root is not None and root.index_generation == generation
                _add(fs, files, layout, "index", generation, layout.ledgers, name, current)
        if root is not None:
            _add(fs, files, layout, "checkpoint", -1, layout.ledgers, "checkpoint", True)
    return files


def _add(
    fs: FileSystem,
    files: list[DiskFile],
    layout: StorageLayout,
    kind: str,
    number: int,
    directory: str,
    name: str,
    current: bool,
    *,
    with_map: bool = False,
) -> None:
    path = os.path.join(directory, name)
    try:
        size = fs.size(path)
        ledgers_map = read_ledgers_map(fs, path, number) is not None if with_map else None
    except FileNotFoundError:
        return  # removed since it was listed (module rules): it is no longer a file of the bookie
    key = layout.key(directory)
    files.append(DiskFile(kind, number, path, size, key, current, ledgers_map))


# -- the checkpoint ------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class JournalMarkView:
    """Where replay of one journal starts: file ``file_id`` (at ``path``) of the journal
    directory ``directory`` (``key``: how the checkpoint names it), offset ``offset``."""

    directory: str
    key: str
    file_id: int
    offset: int
    path: str

    def as_dict(self) -> dict[str, object]:
        return {
            "dir": self.directory,
            "key": self.key,
            "file_id": self.file_id,
            "offset": self.offset,
            "file": self.path,
        }


@dataclass(frozen=True, slots=True)
class Mark:
    """The checkpoint of a bookie, where it names its files: replay of each journal starts
    at its mark (``journals``, in the checkpoint's order); the index is the first
    ``index_bytes`` of generation ``index_generation``; ``ledger_dirs``: the ledger
    directories it names; ``limbo``: the whole engine is in limbo; ``clean_stop``: it was
    written by a clean stop (the bookie is stopped, with nothing to replay)."""

    path: str
    journals: tuple[JournalMarkView, ...]
    index_generation: int
    index_bytes: int
    index_path: str
    ledger_dirs: tuple[str, ...]
    limbo: bool
    clean_stop: bool = False

    @property
    def journal_file_id(self) -> int:
        """The first journal's mark (the only one before several were allowed)."""
        return self.journals[0].file_id

    @property
    def journal_offset(self) -> int:
        return self.journals[0].offset

    @property
    def journal_path(self) -> str:
        return self.journals[0].path

    def as_dict(self) -> dict[str, object]:
        return {
            "checkpoint": self.path,
            "journal_file_id": self.journal_file_id,
            "journal_offset": self.journal_offset,
            "journal_file": self.journal_path,
            "journals": [journal.as_dict() for journal in self.journals],
            "index_generation": self.index_generation,
            "index_bytes": self.index_bytes,
            "index_file": self.index_path,
            "ledger_dirs": list(self.ledger_dirs),
            "limbo": self.limbo,
            "clean_stop": self.clean_stop,
        }


def last_mark(fs: FileSystem, where: str | BookieDirs) -> Mark | None:
    """The bookie's checkpoint, or None when it has none (it never finished opening);
    ``CorruptRecordError`` naming the file when it is damaged. ``where``: as for
    :func:`list_files`."""
    layout = resolve_dirs(fs, where).layout
    root = read_checkpoint(fs, layout.checkpoint)
    return None if root is None else mark_of(layout, root)


def mark_of(layout: StorageLayout, root: CheckpointRecord) -> Mark:
    """The checkpoint ``root`` of the bookie laid out as ``layout``, where it names its files."""
    journals = []
    for key, position in root.marks:
        directory = layout.path_of(key)
        path = os.path.join(directory, journal_file_name(position.file_id))
        journals.append(JournalMarkView(directory, key, position.file_id, position.offset, path))
    return Mark(
        layout.checkpoint,
        tuple(journals),
        root.index_generation,
        root.index_bytes,
        layout.index(root.index_generation),
        tuple(layout.path_of(key) for key in root.ledger_dirs),
        root.limbo,
        root.clean,
    )


def load_checkpointed_index(
    fs: FileSystem, layout: StorageLayout
) -> tuple[CheckpointRecord | None, dict[int, StoredLedger]]:
    """The checkpoint and the index as of it, or (None, {}) before the first checkpoint
    (module rules: a generation replaced meanwhile is followed to the newer checkpoint)."""
    for attempt in range(_INDEX_LOAD_ATTEMPTS):
        root = read_checkpoint(fs, layout.checkpoint)
        if root is None:
            return None, {}
        try:
            return root, load_index(fs, layout.index(root.index_generation), root.index_bytes)
        except FileNotFoundError:
            if (
                attempt == _INDEX_LOAD_ATTEMPTS - 1
                or read_checkpoint(fs, layout.checkpoint) == root
            ):
                path = layout.index(root.index_generation)
                raise StorageError(
                    f"{path}: index file named by the checkpoint is missing"
                ) from None
    raise AssertionError("unreachable: the last attempt returns or raises")


# -- the index against the entry logs ------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ConsistencyProblem:
    """An index location that does not lead to its entry. ``problem``: ``missing log`` (no
    such entry log), ``bad record`` (the record there is cut short or fails its CRC) or
    ``wrong entry`` (the record's body names another ledger or entry)."""

    ledger_id: int
    entry_id: int
    log_id: int
    log_path: str
    offset: int
    problem: str
    detail: str

    def as_dict(self) -> dict[str, object]:
        return {
            "ledger": self.ledger_id,
            "entry": self.entry_id,
            "log_id": self.log_id,
            "log": self.log_path,
            "offset": self.offset,
            "problem": self.problem,
            "detail": self.detail,
        }


@dataclass(frozen=True, slots=True)
class ConsistencyReport:
    """What :func:`check_consistency` found: ``entries`` locations of ``ledgers`` ledgers
    checked against the entry logs of ``ledger_dirs``, pointing into ``entry_logs`` logs;
    ``problems_total`` problems, the first of
    which are in ``problems``; ``rechecked``: entries checked again at a newer checkpoint
    because their log was missing."""

    checkpoint: Mark | None
    ledger_dirs: tuple[str, ...]
    ledgers: int
    entries: int
    entry_logs: int
    problems_total: int
    problems: tuple[ConsistencyProblem, ...]
    rechecked: int

    @property
    def consistent(self) -> bool:
        return self.problems_total == 0

    @property
    def problems_left_out(self) -> int:
        return self.problems_total - len(self.problems)

    def as_dict(self) -> dict[str, object]:
        return {
            "consistent": self.consistent,
            "checkpoint": None if self.checkpoint is None else self.checkpoint.as_dict(),
            "ledger_dirs": list(self.ledger_dirs),
            "ledgers": self.ledgers,
            "entries": self.entries,
            "entry_logs": self.entry_logs,
            "rechecked": self.rechecked,
            "problems_total": self.problems_total,
            "problems_left_out": self.problems_left_out,
            "problems": [p.as_dict() for p in self.problems],
        }


def check_consistency(
    fs: FileSystem, where: str | BookieDirs, problems_max: int = CONSISTENCY_PROBLEMS_MAX
) -> ConsistencyReport:
    """Check every location of the index (as of the checkpoint) against the entry logs of
    every ledger directory: the log exists, the record at that offset is whole, its CRC
    matches and its body names that ledger and entry. ``where``: as for
    :func:`list_files`. See the module rules for a running bookie."""
    layout = resolve_dirs(fs, where).layout
    root, ledgers = load_checkpointed_index(fs, layout)
    # The engine's own map of which directory holds each log (an entry log in two of them
    # is an error naming both, as when the bookie opens).
    checker = _Checker(fs, LedgerDirs(fs, layout.ledger_dirs), problems_max)
    try:
        for ledger_id in sorted(ledgers):
            checker.check_ledger(ledger_id, ledgers[ledger_id])
        missing, checker.missing = checker.missing, []
        rechecked = 0
        if missing:
            newer_root, newer = load_checkpointed_index(fs, layout)
            if newer_root == root:
                checker.report_missing(missing)
            else:
                root = newer_root
                for ledger_id, entry_id, _ in missing:
                    state = newer.get(ledger_id)
                    location = state.locations.get(entry_id) if state is not None else 0
                    if location:  # else gone from the newer index (deleted): no problem
                        rechecked += 1
                        checker.check_entries(ledger_id, [(entry_id, location)])
                checker.report_missing(checker.missing)
    finally:
        checker.close()
    return ConsistencyReport(
        None if root is None else mark_of(layout, root),
        layout.ledger_dirs,
        len(ledgers),
        checker.entries,
        len(checker.logs),
        checker.problems_total,
        tuple(checker.problems),
        rechecked,
    )


class _Checker:
    """Reads the records the index points at and collects problems (the first
    ``problems_max`` described, all counted); entries whose log is missing are put aside
    in ``missing`` (ledger, entry, location) for the caller to decide about."""

    def __init__(self, fs: FileSystem, dirs: LedgerDirs, problems_max: int) -> None:
        self._dirs = dirs
        self._reader = EntryLogReader(fs, dirs, _CHECK_HANDLES_MAX)
        self._problems_max = problems_max
        self.problems: list[ConsistencyProblem] = []
        self.problems_total = 0
        self.entries = 0
        self.logs: set[int] = set()
        self.missing: list[tuple[int, int, int]] = []

    def check_ledger(self, ledger_id: int, state: StoredLedger) -> None:
        items = sorted(state.locations.items(), key=lambda item: item[1])
        self.entries += len(items)
        for start in range(0, len(items), _CHECK_BATCH_ENTRIES):
            self.check_entries(ledger_id, items[start : start + _CHECK_BATCH_ENTRIES])

    def check_entries(self, ledger_id: int, items: list[tuple[int, int]]) -> None:
        """Check ``(entry id, location)`` pairs of one ledger, sorted by location."""
        self.logs.update(location >> 32 for _, location in items)
        try:
            bodies = self._reader.read_many([location for _, location in items])
        except (CorruptRecordError, FileNotFoundError):
            for entry_id, location in items:  # one at a time, to tell which
                self._check_one(ledger_id, entry_id, location)
            return
        for (entry_id, location), body in zip(items, bodies, strict=True):
            self._check_body(ledger_id, entry_id, location, body)

    def _check_one(self, ledger_id: int, entry_id: int, location: int) -> None:
        try:
            body = self._reader.read(location)
        except FileNotFoundError:
            self.missing.append((ledger_id, entry_id, location))
            return
        except CorruptRecordError as exc:  # the problem names the log and offset already
            reason = str(exc).removeprefix(f"{exc.path} at offset {exc.offset}: ")
            self._problem(ledger_id, entry_id, location, "bad record", reason)
            return
        self._check_body(ledger_id, entry_id, location, body)

    def _check_body(self, ledger_id: int, entry_id: int, location: int, body: bytes) -> None:
        if len(body) < _ENTRY_HEAD_BYTES:
            detail = f"body of {len(body)} bytes holds no ledger and entry id"
            self._problem(ledger_id, entry_id, location, "wrong entry", detail)
            return
        named = (int.from_bytes(body[:8], "big", signed=True),
                 int.from_bytes(body[8:16], "big", signed=True))  # fmt: skip
        if named != (ledger_id, entry_id):
            detail = f"the record holds ledger {named[0]} entry {named[1]}"
            self._problem(ledger_id, entry_id, location, "wrong entry", detail)

    def report_missing(self, missing: list[tuple[int, int, int]]) -> None:
        count = len(self._dirs.dirs)
        where = "" if count == 1 else f" in any of the {count} ledger dirs"
        for ledger_id, entry_id, location in missing:
            name = entry_log_name(location >> 32)
            detail = f"no entry log {name}{where}"
            self._problem(ledger_id, entry_id, location, "missing log", detail)

    def _problem(
        self, ledger_id: int, entry_id: int, location: int, problem: str, detail: str
    ) -> None:
        self.problems_total += 1
        if len(self.problems) < self._problems_max:
            log_id, offset = location >> 32, location & _OFFSET_MASK
            path = self._dirs.log_path(log_id)
            self.problems.append(
                ConsistencyProblem(ledger_id, entry_id, log_id, path, offset, problem, detail)
            )

    def close(self) -> None:
        self._reader.close()
