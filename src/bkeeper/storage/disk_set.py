"""The filesystems of the engine's directories, and the engine's disk state derived from them.

Every ledger and journal directory is on some filesystem; directories on one filesystem share
one :class:`~bkeeper.storage.disk_space.DiskSpace` (one statvfs per check, one state, one
write tally). A journal sees the state of its own filesystem (it refuses records only while
that one has no room); the entry-log writer sees those of the ledger directories through
:class:`~bkeeper.storage.dirs.LedgerDirs`. The engine's state, which the bookie turns into
read-only mode, is :func:`engine_disk_state` of them all (the whole table)::

    NO_ROOM   a journal's filesystem has no room (a write failed there: that journal refuses
              its records), or every ledger directory's has none (no flush can be written)
    FULL      else: a journal's filesystem is full (a journal that cannot write stops the
              ledgers mapped to it), or every ledger directory is full or has no room (with
              ``readonly_on_any_dir_full``: any of them)
    WRITABLE  else

A full ledger directory on its own takes no new entry log (see :mod:`bkeeper.storage.dirs`)
and, without ``readonly_on_any_dir_full``, leaves the bookie writable. Recovery and
high-priority adds are taken while every journal's filesystem and at least one ledger
directory's have more than ``disk_high_priority_free_bytes_min`` free.

Listeners are called with the engine's state after every change of it, one call at a time,
from the thread that saw the change (as :class:`DiskSpace` does).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from bkeeper.common.clock import Clock
from bkeeper.storage.config import StorageConfig
from bkeeper.storage.disk_space import DiskSpace, DiskState, StateListeners
from bkeeper.storage.filesystem import FileSystem

__all__ = ["DiskSet", "engine_disk_state"]

log = logging.getLogger(__name__)


def engine_disk_state(
    journals: Sequence[DiskState], ledgers: Sequence[DiskState], *, any_ledger_dir_full: bool
) -> DiskState:
    """The engine's state from its journal and ledger directories' (see the module table)."""
    if DiskState.NO_ROOM in journals or all(s is DiskState.NO_ROOM for s in ledgers):
        return DiskState.NO_ROOM
    if DiskState.FULL in journals:
        return DiskState.FULL
    full = [s is not DiskState.WRITABLE for s in ledgers]
    if all(full) or (any_ledger_dir_full and any(full)):
        return DiskState.FULL
    return DiskState.WRITABLE


class DiskSet:
    """One :class:`DiskSpace` per filesystem of the given directories, and the engine's state.

    ``state`` is a plain attribute (the latest value), cheap to read from any thread.
    """

    def __init__(
        self,
        fs: FileSystem,
        journal_dirs: Sequence[str],
        ledger_dirs: Sequence[str],
        config: StorageConfig,
        clock: Clock | None = None,
    ) -> None:
        """The directories must exist (their filesystems are told apart by device)."""
        self._fs = fs
        self._config = config
        dirs_by_fs: dict[str, list[str]] = {}
        for path in (*journal_dirs, *ledger_dirs):
            dirs_by_fs.setdefault(fs.filesystem_id(path), []).append(path)
        self._by_dir: dict[str, DiskSpace] = {}
        spaces = []
        for paths in dirs_by_fs.values():
            space = DiskSpace(fs, paths[0], config, clock, label=f"disk of {', '.join(paths)}")
            spaces.append(space)
            self._by_dir.update(dict.fromkeys(paths, space))
        self.spaces: tuple[DiskSpace, ...] = tuple(spaces)
        self.journal_spaces = tuple(self._by_dir[path] for path in journal_dirs)
        self.ledger_spaces = tuple(self._by_dir[path] for path in ledger_dirs)
        self._lock = threading.Lock()
        self._listeners = StateListeners(lambda: self.state)
        self.state = DiskState.WRITABLE
        for space in self.spaces:
            space.add_listener(self._on_change)

    def dirs_of(self, space: DiskSpace) -> list[str]:
        """The directories on the filesystem ``space`` watches."""
        return [path for path, watch in self._by_dir.items() if watch is space]

    def space_of(self, path: str) -> DiskSpace:
        """The watch of the filesystem holding one of the directories."""
        return self._by_dir[path]

    def add_listener(self, listener: Callable[[DiskState], None]) -> None:
        """Call ``listener(state)`` after every change of the engine's state."""
        self._listeners.add(listener)

    def check(self) -> DiskState:
        """Check every filesystem now (one statvfs each); the engine's state."""
        for space in self.spaces:
            space.check()
        self._on_change(None)
        return self.state

    @property
    def room_for_high_priority(self) -> bool:
        """Whether recovery and high-priority adds may be taken (values of the last checks)."""
        return any(s.room_for_high_priority for s in self.ledger_spaces) and all(
            s.room_for_high_priority for s in self.journal_spaces
        )

    @property
    def checks(self) -> int:
        return sum(space.checks for space in self.spaces)

    def usage(self) -> tuple[int, int]:
        """``(total, free)`` bytes of the ledger directories' filesystems, each counted once
        (what the bookie reports to clients as its disk capacity and free space)."""
        total = free = 0
        for space in dict.fromkeys(self.ledger_spaces):
            space_total, space_free = self._fs.disk_usage(space.path)
            total += space_total
            free += space_free
        return total, free

    def _on_change(self, _state: DiskState | None) -> None:
        with self._lock:
            old = self.state
            self.state = new = engine_disk_state(
                [s.state for s in self.journal_spaces],
                [s.state for s in self.ledger_spaces],
                any_ledger_dir_full=self._config.readonly_on_any_dir_full,
            )
        if new is not old:
            if len(self.spaces) > 1:
                log.warning("storage disk state: %s -> %s", old.value, new.value)
            self._listeners.notify()
