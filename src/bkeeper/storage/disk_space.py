"""One filesystem's free space, watched cheaply, and the state it puts its writers in.

The engine watches every filesystem holding one of its directories with one
:class:`DiskSpace` each (:mod:`bkeeper.storage.disk_set` derives the engine's state from
them); a journal and the entry-log writer see the state of the filesystem they write to.

The state machine (:func:`next_state` is the whole table; ``u`` is the fraction of the
filesystem in use and ``f`` its free bytes at the latest check)::

    state     meaning                                              leaves for
    WRITABLE  u below disk_usage_threshold: every write           FULL     when u >= threshold
    FULL      the bookie is read-only: it refuses normal adds     WRITABLE when u < lwm
              (EREADONLY); the engine still writes what reaches
              it (recovery and high-priority adds while
              f > disk_high_priority_free_bytes_min, fences,
              explicit LACs)
    NO_ROOM   a write failed for lack of space (ENOSPC, EDQUOT,   WRITABLE when u < lwm and f
              or EIO while the disk is over the threshold): the     has grown since the failure
              journal refuses every record (DiskFullError,          (or NO_ROOM_RETRY_S passed:
              EREADONLY), the flusher waits; reads are served       a quota may have been raised)

    any state -> NO_ROOM on a write that failed for lack of space (:meth:`report_no_space`)

Thresholds are checked *before* writing, so a bookie filling its disk turns read-only while
there is still room, and adds get EREADONLY rather than errors from a failed write. That
needs a current view of free space at little cost (statvfs is cheap but not free): writers
report the bytes they write (one call per journal group or flush, never per entry) and the
disk is checked again once they add up to a quarter of the headroom left at the last check
(the bytes until the next boundary: the threshold while writable, the high-priority reserve
while full), so our own writes never carry usage far past a boundary unchecked; the bookie
also checks every ``disk_check_interval_ms`` for space taken or freed by others. A check that
finds usage at ``disk_usage_warn_threshold`` or more logs a warning, once until usage is
below it again.

Listeners are called with the current state after every change, one call at a time, from the
thread that saw the change (journal, flusher or the caller's); they must not call back into
:class:`DiskSpace` nor be called with the engine lock held by the caller of :meth:`check`.
"""

from __future__ import annotations

import enum
import errno
import logging
import threading
from collections.abc import Callable

from bkeeper.common.clock import Clock, default_clock
from bkeeper.storage.config import MIB, StorageConfig
from bkeeper.storage.filesystem import FileSystem

__all__ = ["DiskSpace", "DiskState", "StateListeners", "next_state"]

log = logging.getLogger(__name__)

#: The disk is checked again once the bytes written since the last check reach the headroom
#: left divided by this ...
RECHECK_HEADROOM_DIVISOR = 4
#: ... but never more often than every this many bytes, nor less often than every this many.
RECHECK_BYTES_MIN = 64 * 1024
RECHECK_BYTES_MAX = 64 * MIB
#: NO_ROOM ends (usage below the low-water mark) once this many more bytes are free than when
#: the write failed, or this long after the failure (space not shown by statvfs: quotas).
NO_ROOM_FREED_BYTES_MIN = 64 * 1024
NO_ROOM_RETRY_S = 30.0

_NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


class DiskState(enum.Enum):
    WRITABLE = "writable"
    FULL = "full"
    NO_ROOM = "no room"


def next_state(
    state: DiskState,
    used_fraction: float,
    config: StorageConfig,
    *,
    no_room_may_end: bool,
) -> DiskState:
    """The state after a check that found ``used_fraction`` of the disk in use."""
    if state is DiskState.NO_ROOM:
        if used_fraction < config.disk_usage_lwm_threshold and no_room_may_end:
            return DiskState.WRITABLE
        return state
    if used_fraction >= config.disk_usage_threshold:
        return DiskState.FULL
    if state is DiskState.FULL and used_fraction >= config.disk_usage_lwm_threshold:
        return state
    return DiskState.WRITABLE


def is_out_of_space(exc: BaseException) -> bool:
    """Whether ``exc`` says plainly that there is no room (ENOSPC, EDQUOT)."""
    return isinstance(exc, OSError) and exc.errno in _NO_SPACE_ERRNOS


class StateListeners:
    """Callbacks told of disk state changes, one notification at a time, each with the state
    of the moment; a listener that fails is logged, not raised to the writer that saw the
    change."""

    def __init__(self, current: Callable[[], DiskState]) -> None:
        self._current = current
        self._lock = threading.Lock()
        self._listeners: list[Callable[[DiskState], None]] = []

    def add(self, listener: Callable[[DiskState], None]) -> None:
        self._listeners.append(listener)

    def notify(self) -> None:
        with self._lock:
            state = self._current()
            for listener in self._listeners:
                try:
                    listener(state)
                except Exception:  # a listener must not break the writer that saw the change
                    log.exception("disk state listener failed")


class DiskSpace:
    """The free space of the filesystem holding ``path`` and the state it puts the engine in.

    Thread-safe. ``state``, ``free_bytes`` and ``room_for_high_priority`` are plain
    attributes, cheap to read from any thread (values of the latest check).
    """

    def __init__(
        self,
        fs: FileSystem,
        path: str,
        config: StorageConfig,
        clock: Clock | None = None,
        label: str | None = None,
    ) -> None:
        """Watch the filesystem holding ``path``; ``label`` names it in log lines (default:
        ``data disk <path>``)."""
        self._fs = fs
        self._path = path
        self.label = label if label is not None else f"data disk {path}"
        self._warned = False
        self._config = config
        self._clock = clock or default_clock()
        self._lock = threading.Lock()
        self._listeners = StateListeners(lambda: self.state)
        self._written_bytes = 0
        self._recheck_bytes = RECHECK_BYTES_MIN
        self._failed_free_bytes = 0
        self._failed_at = 0.0
        self.state = DiskState.WRITABLE
        self.total_bytes = 0
        self.free_bytes = 0
        self.used_fraction = 0.0
        self.room_for_high_priority = True
        self.checks = 0

    @property
    def path(self) -> str:
        return self._path

    @property
    def free_bytes_estimate(self) -> int:
        """Free bytes at the last check less what the engine wrote since."""
        return self.free_bytes - self._written_bytes

    def add_listener(self, listener: Callable[[DiskState], None]) -> None:
        """Call ``listener(state)`` after every change of state (see the module docstring)."""
        self._listeners.add(listener)

    def note_written(self, size: int) -> None:
        """Count bytes just written; check the disk once they reach the recheck slice. (The
        write itself succeeded: a failing check is logged, not raised to the writer.)"""
        with self._lock:
            self._written_bytes += size
            due = self._written_bytes >= self._recheck_bytes
        if due:
            try:
                self.check()
            except OSError as exc:
                log.warning("could not check the free space of %s: %s", self.label, exc)

    def check(self) -> DiskState:
        """Read the free space now (statvfs) and update the state; returns it."""
        total, free = self._fs.disk_usage(self._path)
        used = 1.0 - free / total if total else 1.0
        config = self._config
        with self._lock:
            old = self.state
            may_end = (
                free - self._failed_free_bytes >= NO_ROOM_FREED_BYTES_MIN
                or self._clock.monotonic() - self._failed_at >= NO_ROOM_RETRY_S
            )
            self.state = new = next_state(old, used, config, no_room_may_end=may_end)
            self.total_bytes, self.free_bytes, self.used_fraction = total, free, used
            reserve = config.disk_high_priority_free_bytes_min
            self.room_for_high_priority = new is not DiskState.NO_ROOM and free > reserve
            if new is DiskState.WRITABLE:
                headroom = free - (1.0 - config.disk_usage_threshold) * total
            elif new is DiskState.FULL:
                headroom = free - reserve
            else:
                headroom = 0
            slice_bytes = int(headroom) // RECHECK_HEADROOM_DIVISOR
            self._recheck_bytes = min(RECHECK_BYTES_MAX, max(RECHECK_BYTES_MIN, slice_bytes))
            self._written_bytes = 0
            self.checks += 1
            warn = used >= config.disk_usage_warn_threshold and not self._warned
            self._warned = used >= config.disk_usage_warn_threshold
        if warn:
            log.warning(
                "%s: %.1f%% in use, past disk_usage_warn_threshold (%.2f); it is full at %.2f",
                self.label,
                100.0 * used,
                config.disk_usage_warn_threshold,
                config.disk_usage_threshold,
            )
        if new is not old:
            log.warning(
                "%s: %.1f%% in use, %d bytes free: %s -> %s",
                self.label,
                100.0 * used,
                free,
                old.value,
                new.value,
            )
            self._listeners.notify()
        return new

    def explains(self, exc: BaseException) -> bool:
        """Whether a failed write is explained by lack of space: ENOSPC or EDQUOT, or EIO
        while the disk is over its threshold (some filesystems report a full disk so)."""
        if is_out_of_space(exc):
            return True
        if isinstance(exc, OSError) and exc.errno == errno.EIO:
            return self.check() is not DiskState.WRITABLE
        return False

    def report_no_space(self) -> None:
        """A write failed for lack of space: NO_ROOM until space is freed (see the table)."""
        self.check()
        with self._lock:
            old = self.state
            self.state = DiskState.NO_ROOM
            self.room_for_high_priority = False
            self._failed_free_bytes = self.free_bytes
            self._failed_at = self._clock.monotonic()
            self._recheck_bytes = RECHECK_BYTES_MIN
        if old is not DiskState.NO_ROOM:
            log.warning(
                "%s: a write failed for lack of space (%d bytes free): no room",
                self.label,
                self.free_bytes,
            )
            self._listeners.notify()
