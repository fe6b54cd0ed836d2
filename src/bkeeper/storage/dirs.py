"""The engine's directories: where each file lives, and which ledger directory takes a new
entry log.

Layout (:class:`StorageLayout`)::

    <ledger dir>/<log id, 16 hex>.log        entry logs, in any of the ledger directories
    <first ledger dir>/index-<gen>.idx       the location index and ledger states
    <first ledger dir>/checkpoint            the root: what a restart may trust
    <journal dir>/<file id, 16 hex>.txn      the journal files of that directory's journal

With no ``ledger_dirs`` (``journal_dirs``) configured the one ledger (journal) directory is
``<data_dir>/current/ledgers`` (``<data_dir>/current/journal``), as before several were
allowed, so existing data directories open unchanged. The checkpoint names directories by a
*key*: their path relative to ``data_dir`` when inside it (a data directory moved as a whole
still opens), else their absolute path.

Choosing a directory (:class:`LedgerDirs`): a new entry log goes to the writable ledger
directory whose filesystem has the most free space (free bytes at the last check less those
written since); directories on one filesystem take turns. A directory whose filesystem is
FULL or has NO_ROOM is *out of rotation*: it takes no new log while another directory is
writable, and the log being written there is closed at the next flush, which starts a new
log elsewhere. It comes back once its filesystem is writable again (usage below
``disk_usage_lwm_threshold``). When no directory is writable, new logs go to the one with the
most free space that still has room (the bookie is read-only then, but recovery adds, fences
and explicit LACs are still flushed); when none has room, flushes wait
(:mod:`bkeeper.storage.flusher`). Reads find a log in whichever directory holds it: every
ledger directory is listed once at open, and each new log is recorded when it is created.

Changed directories (checked at open against the last checkpoint, which lists the ledger
directories and one journal mark per journal directory): adding directories is allowed.
A ledger directory may be dropped from ``ledger_dirs`` only once it holds no entry log, and
the first one (index and checkpoint) not at all: the open fails with one line naming the
directory otherwise, rather than answer "no such entry" for entries in it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence

from bkeeper.common.errors import StorageError
from bkeeper.storage.checkpoint_file import CHECKPOINT_FILE_NAME, CheckpointRecord
from bkeeper.storage.config import StorageConfig
from bkeeper.storage.disk_set import DiskSet
from bkeeper.storage.disk_space import DiskSpace, DiskState
from bkeeper.storage.entry_log import entry_log_id, entry_log_name
from bkeeper.storage.filesystem import FileSystem
from bkeeper.storage.index_file import index_file_name

__all__ = ["LedgerDirs", "StorageLayout", "check_ledger_dirs"]

DEFAULT_LEDGER_DIR = os.path.join("current", "ledgers")
DEFAULT_JOURNAL_DIR = os.path.join("current", "journal")


class StorageLayout:
    """Where the engine's files live (see the module docstring)."""

    def __init__(
        self, data_dir: str, ledger_dirs: Sequence[str] = (), journal_dirs: Sequence[str] = ()
    ) -> None:
        self.data_dir = data_dir
        self.current = os.path.join(data_dir, "current")
        self.ledger_dirs = tuple(ledger_dirs) or (os.path.join(data_dir, DEFAULT_LEDGER_DIR),)
        self.journal_dirs = tuple(journal_dirs) or (os.path.join(data_dir, DEFAULT_JOURNAL_DIR),)
        #: The first ledger directory: the index file and the checkpoint.
        self.ledgers = self.ledger_dirs[0]
        #: The first journal directory (the only one unless several are configured).
        self.journal = self.journal_dirs[0]
        self.checkpoint = os.path.join(self.ledgers, CHECKPOINT_FILE_NAME)

    @classmethod
    def of(cls, config: StorageConfig) -> StorageLayout:
        return cls(config.data_dir, config.ledger_dirs, config.journal_dirs)

    @property
    def all_dirs(self) -> tuple[str, ...]:
        return (*self.journal_dirs, *self.ledger_dirs)

    def index(self, generation: int) -> str:
        return os.path.join(self.ledgers, index_file_name(generation))

    def makedirs(self, fs: FileSystem) -> None:
        for path in self.all_dirs:
            fs.makedirs(path)

    def key(self, path: str) -> str:
        """How the checkpoint names the directory ``path`` (see the module docstring)."""
        full = os.path.normpath(os.path.abspath(path))
        relative = os.path.relpath(full, os.path.normpath(os.path.abspath(self.data_dir)))
        return (
            full if relative == os.pardir or relative.startswith(os.pardir + os.sep) else relative
        )

    def path_of(self, key: str) -> str:
        """The directory a checkpoint's key names."""
        return key if os.path.isabs(key) else os.path.join(self.data_dir, key)

    @property
    def ledger_keys(self) -> tuple[str, ...]:
        return tuple(self.key(path) for path in self.ledger_dirs)

    @property
    def journal_keys(self) -> tuple[str, ...]:
        return tuple(self.key(path) for path in self.journal_dirs)


def check_ledger_dirs(fs: FileSystem, layout: StorageLayout, root: CheckpointRecord | None) -> None:
    """Refuse to open when ``ledger_dirs`` lost a directory that holds data (see the module
    docstring): ``StorageError`` naming it."""
    if root is None:
        default_home = os.path.join(layout.data_dir, DEFAULT_LEDGER_DIR)
        for path in dict.fromkeys((*layout.ledger_dirs[1:], default_home)):
            found = os.path.join(path, CHECKPOINT_FILE_NAME)
            if path != layout.ledgers and fs.exists(found):
                raise StorageError(
                    f"no checkpoint in the first ledger directory {layout.ledgers}, but {found} "
                    "exists: the index and checkpoint live in the first of ledger_dirs; list "
                    f"{path} first"
                )
        return
    configured = set(layout.ledger_keys)
    for key in root.ledger_dirs:
        if key in configured:
            continue
        path = layout.path_of(key)
        if not fs.exists(path):
            raise StorageError(
                f"ledger directory {path} of the last checkpoint is missing and not in "
                "ledger_dirs: the entries in its entry logs would be lost; put it back"
            )
        logs = [name for name in fs.list_dir(path) if entry_log_id(name) is not None]
        if logs:
            raise StorageError(
                f"ledger directory {path} holds {len(logs)} entry logs but is not in "
                "ledger_dirs: add it back (its entries would be lost otherwise)"
            )


class LedgerDirs:
    """Which ledger directory holds each entry log, and where a new one goes.

    Thread-safe. Also the flusher's view of the ledger directories' disk space: ``state``
    (NO_ROOM when no directory has room, FULL when none is writable), ``add_listener``, and
    ``note_written`` / ``explains`` / ``report_no_space`` for the directory of the log being
    written (or of a path given). Without a :class:`DiskSet` nothing is watched: every
    directory is writable and no failure is put down to lack of space.
    """

    def __init__(self, fs: FileSystem, dirs: Sequence[str], disks: DiskSet | None = None) -> None:
        if not dirs:
            raise StorageError("no ledger directory")
        self._fs = fs
        self.dirs = tuple(dirs)
        self._disks = disks
        self._spaces = tuple(disks.space_of(d) for d in self.dirs) if disks is not None else None
        self._lock = threading.Lock()
        self._where: dict[int, int] = {}  # log id -> index in dirs
        self._current = 0  # the directory of the log created last
        self._turn = 0
        for index, path in enumerate(self.dirs):
            if not fs.exists(path):
                continue
            for name in fs.list_dir(path):
                log_id = entry_log_id(name)
                if log_id is None:
                    continue
                if log_id in self._where:
                    other = self.dirs[self._where[log_id]]
                    raise StorageError(
                        f"entry log {name} is in two ledger directories, {other} and {path}"
                    )
                self._where[log_id] = index

    # -- where logs are ------------------------------------------------------------------
    def log_ids(self) -> list[int]:
        """Ids of every entry log known, ascending."""
        with self._lock:
            return sorted(self._where)

    def log_path(self, log_id: int) -> str:
        """The path of the log (in the first directory if no directory holds it: opening it
        then fails naming that path)."""
        with self._lock:
            index = self._where.get(log_id)
        if index is None:  # made by a writer that did not record it here: look once
            name = entry_log_name(log_id)
            found = [
                i for i, path in enumerate(self.dirs) if self._fs.exists(os.path.join(path, name))
            ]
            if not found:
                return os.path.join(self.dirs[0], name)
            index = found[0]
            with self._lock:
                self._where[log_id] = index
        return os.path.join(self.dirs[index], entry_log_name(log_id))

    def new_log_path(self, log_id: int) -> str:
        """Choose the directory of a new log (see the module docstring) and record it."""
        with self._lock:
            if log_id in self._where:
                path = os.path.join(self.dirs[self._where[log_id]], entry_log_name(log_id))
                raise StorageError(f"{path} exists already")
            index = self._choose_locked()
            self._where[log_id] = self._current = index
        return os.path.join(self.dirs[index], entry_log_name(log_id))

    def forget(self, log_id: int) -> None:
        """The log was removed."""
        with self._lock:
            self._where.pop(log_id, None)

    def keep_appending(self, log_id: int) -> bool:
        """Whether the log may take more entries: False once its directory is out of
        rotation while another directory is writable."""
        spaces = self._spaces
        if spaces is None:
            return True
        with self._lock:
            index = self._where.get(log_id)
        if index is None or spaces[index].state is DiskState.WRITABLE:
            return True
        return not any(space.state is DiskState.WRITABLE for space in spaces)

    def _choose_locked(self) -> int:
        spaces = self._spaces
        count = len(self.dirs)
        if spaces is None or count == 1:
            return 0
        for wanted in (DiskState.WRITABLE, DiskState.FULL):
            candidates = [i for i in range(count) if spaces[i].state is wanted]
            if candidates:
                break
        else:
            candidates = list(range(count))
        self._turn += 1
        # most free space first; ties (one filesystem) in turn
        return max(
            candidates,
            key=lambda i: (spaces[i].free_bytes_estimate, -((i - self._turn) % count)),
        )

    # -- the flusher's view of the disk space ----------------------------------------------
    @property
    def state(self) -> DiskState:
        """NO_ROOM when no ledger directory has room, FULL when none is writable, else
        WRITABLE."""
        if self._spaces is None:
            return DiskState.WRITABLE
        states = {space.state for space in self._spaces}
        if states == {DiskState.NO_ROOM}:
            return DiskState.NO_ROOM
        return DiskState.WRITABLE if DiskState.WRITABLE in states else DiskState.FULL

    def add_listener(self, listener: Callable[[DiskState], None]) -> None:
        """Call ``listener(self.state)`` after a change of a directory's state."""
        if self._spaces is None:
            return
        lock = threading.Lock()

        def changed(_state: DiskState) -> None:
            with lock:  # one at a time, each with the state of the moment
                listener(self.state)

        for space in dict.fromkeys(self._spaces):
            space.add_listener(changed)

    def check(self) -> DiskState:
        """Check every filesystem of the engine now; the engine's state."""
        return self._disks.check() if self._disks is not None else DiskState.WRITABLE

    def _space(self, path: str | None) -> DiskSpace | None:
        if self._spaces is None:
            return None
        if path is None or path not in self.dirs:  # not a directory of ours: the current's
            return self._spaces[self._current]
        return self._spaces[self.dirs.index(path)]

    def note_written(self, size: int, path: str | None = None) -> None:
        """Bytes just written to the log being written (or to the directory ``path``)."""
        space = self._space(path)
        if space is not None:
            space.note_written(size)

    def explains(self, exc: BaseException, path: str | None = None) -> bool:
        """Whether a failed write to the log being written (or to the directory ``path``) is
        explained by lack of space (see :meth:`DiskSpace.explains`)."""
        space = self._space(path)
        return space is not None and space.explains(exc)

    def report_no_space(self, path: str | None = None) -> None:
        """A write to the log being written (or to the directory ``path``) failed for lack
        of space: that filesystem has NO_ROOM until space is freed."""
        space = self._space(path)
        if space is not None:
            space.report_no_space()
