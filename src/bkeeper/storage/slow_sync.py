"""Slow disks on demand, for fault injection (``bkeeper verify``'s ``slow-disk`` nemesis).

A bookie started with the environment variable :data:`ENV_VAR` set to ``1`` (read by
``bkeeper bookie``: :func:`slow_sync_filesystem`) stores through
:class:`SlowSyncFileSystem`: before each ``fdatasync`` of a file it appends to (journal,
entry logs, index), it looks at the control file :data:`CONTROL_NAME` in the bookie's data
directory and, if the file is there, sleeps for the number of milliseconds it holds (a
decimal integer, at most :data:`DELAY_MS_MAX`) on the calling thread: the journal's or the
flusher's, never the event loop. No file, no delay; the file is re-read only when its
modification time or size changes. A control file that does not hold a valid number is
logged once per change and ignored (the disk stays fast): a test harness's typo must not
stop a bookie.

The delay comes before the real ``fdatasync``, which still happens: durability is unchanged,
only later. Without the variable nothing here is used.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable

from bkeeper.common.errors import ConfigError
from bkeeper.storage.filesystem import BytesLike, OsFileSystem, WritableFile

__all__ = [
    "BeforeSyncFile",
    "CONTROL_NAME",
    "DELAY_MS_MAX",
    "ENV_VAR",
    "SlowSyncFileSystem",
    "slow_sync_filesystem",
    "set_sync_delay",
]

log = logging.getLogger(__name__)

#: Set to ``1`` in a bookie's environment to make its fsyncs slowable (module doc).
ENV_VAR = "BKEEPER_FAULT_SLOW_SYNC"
#: The control file, in the bookie's data directory: milliseconds to add before each fsync.
CONTROL_NAME = "fault-sync-delay-ms"
#: The longest delay a control file may ask for.
DELAY_MS_MAX = 60_000


def set_sync_delay(data_dir: str | os.PathLike[str], delay_ms: int | None) -> None:
    """Ask the bookie storing in ``data_dir`` to delay each fsync by ``delay_ms`` (None:
    no delay any more). For harnesses; the bookie must run with :data:`ENV_VAR` set."""
    path = os.path.join(data_dir, CONTROL_NAME)
    if delay_ms is None:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
        return
    if not 0 <= delay_ms <= DELAY_MS_MAX:
        raise ConfigError(f"delay_ms: must be within 0..{DELAY_MS_MAX}, got {delay_ms}")
    temp = path + ".tmp"
    with open(temp, "w") as f:
        f.write(f"{delay_ms}\n")
    os.replace(temp, path)  # the bookie never reads a half-written number


class _Control:
    """The control file's current delay, re-read when the file changes."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()  # the journal and flusher threads both sync
        self._seen: tuple[int, int] | None = None  # (mtime_ns, size) last read
        self._delay_s = 0.0

    def delay_s(self) -> float:
        try:
            info = os.stat(self.path)
        except FileNotFoundError:
            return 0.0
        stamp = (info.st_mtime_ns, info.st_size)
        with self._lock:
            if stamp != self._seen:
                self._seen = stamp
                self._delay_s = self._read()
            return self._delay_s

    def _read(self) -> float:
        try:
            with open(self.path) as f:
                text = f.read().strip()
        except OSError as exc:
            log.warning("slow-sync control file %s unreadable, no delay: %s", self.path, exc)
            return 0.0
        try:
            delay_ms = int(text)
        except ValueError:
            delay_ms = -1
        if not 0 <= delay_ms <= DELAY_MS_MAX:
            log.warning(
                "slow-sync control file %s holds %r, not milliseconds within 0..%d: no delay",
                self.path, text[:40], DELAY_MS_MAX,
            )  # fmt: skip
            return 0.0
        log.warning("fault injection: each fsync delayed by %d ms", delay_ms)
        return delay_ms / 1000.0


class BeforeSyncFile:
    """A writable file that calls ``before_sync`` (on the syncing thread) before each
    ``sync``: the slowable disk's delay here, a test's gate elsewhere."""

    __slots__ = ("_before_sync", "_inner")

    def __init__(self, inner: WritableFile, before_sync: Callable[[], None]) -> None:
        self._inner = inner
        self._before_sync = before_sync

    @property
    def path(self) -> str:
        return self._inner.path

    def write(self, data: BytesLike) -> None:
        self._inner.write(data)

    def sync(self) -> None:
        self._before_sync()
        self._inner.sync()

    def size(self) -> int:
        return self._inner.size()

    def close(self) -> None:
        self._inner.close()


class SlowSyncFileSystem(OsFileSystem):
    """The real filesystem, with each appended file's fsync delayed as ``control_path``
    says (module doc)."""

    def __init__(self, control_path: str) -> None:
        self._control = _Control(control_path)

    @property
    def control_path(self) -> str:
        return self._control.path

    def delay_s(self) -> float:
        """What each fsync waits now."""
        return self._control.delay_s()

    def open_append(self, path: str) -> WritableFile:
        return BeforeSyncFile(super().open_append(path), self._wait)

    def _wait(self) -> None:
        delay = self._control.delay_s()
        if delay > 0:
            time.sleep(delay)


def slow_sync_filesystem(
    switch: str, data_dir: str | os.PathLike[str]
) -> SlowSyncFileSystem | None:
    """The slowable filesystem for a bookie storing in ``data_dir`` when ``switch`` (the
    value of :data:`ENV_VAR`, which the CLI reads) is ``1``; None when it is empty;
    ``ConfigError`` for any other value."""
    if not switch:
        return None
    if switch != "1":
        raise ConfigError(f"{ENV_VAR}: must be 1 or unset, got {switch!r}")
    log.warning("fault injection on: fsyncs wait as %s says", os.path.join(data_dir, CONTROL_NAME))
    return SlowSyncFileSystem(os.path.join(data_dir, CONTROL_NAME))
