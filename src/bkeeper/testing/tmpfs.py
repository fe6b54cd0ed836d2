"""A small real filesystem for full-disk tests: a tmpfs of a given size, mounted and unmounted.

Mounting needs root (or ``CAP_SYS_ADMIN``); :func:`mounted_tmpfs` raises ``ConfigError``
saying why when it cannot mount, so that fixtures can skip (or fail, in CI) with the reason.
:func:`fill_disk` writes a filler file until the filesystem holds a given fraction, or is full.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

from bkeeper.common.errors import ConfigError

__all__ = ["fill_disk", "mounted_tmpfs", "used_fraction"]

#: The filler is written in chunks of this size, then page by page near the end.
_FILL_CHUNK_BYTES = 1024 * 1024
_PAGE_BYTES = 4096


@contextlib.contextmanager
def mounted_tmpfs(path: Path, size_bytes: int) -> Iterator[Path]:
    """Mount a tmpfs of ``size_bytes`` at ``path`` (created if missing); unmount on exit."""
    if shutil.which("mount") is None or shutil.which("umount") is None:
        raise ConfigError("cannot mount a tmpfs: mount/umount not found")
    path.mkdir(parents=True, exist_ok=True)
    try:
        result = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(path)],
            capture_output=True,
            text=True,
            check=False,
        )
    except BaseException:  # a stop (SIGTERM, Ctrl-C) while it mounted: maybe mounted
        if os.path.ismount(path):
            _unmount(path)
        raise
    if result.returncode != 0:
        reason = result.stderr.strip() or f"exit code {result.returncode}"
        raise ConfigError(f"cannot mount a tmpfs at {path}: {reason}")
    try:
        yield path
    finally:
        _unmount(path)


def _unmount(path: Path) -> None:
    """Unmount; if files are still open there, detach it lazily (it goes once they close)."""
    if subprocess.run(["umount", str(path)], capture_output=True, check=False).returncode == 0:
        return
    lazy = subprocess.run(["umount", "-l", str(path)], capture_output=True, text=True, check=False)
    if lazy.returncode != 0:
        raise ConfigError(f"cannot unmount the tmpfs at {path}: {lazy.stderr.strip()}")


def used_fraction(path: Path) -> float:
    usage = shutil.disk_usage(path)
    return 1.0 - usage.free / usage.total


def fill_disk(filler: Path, fraction: float | None = None) -> None:
    """Append to ``filler`` until the filesystem holding it has ``fraction`` in use, or, with
    None, until it is full (a write fails with ENOSPC)."""
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        chunk = _FILL_CHUNK_BYTES
        while True:
            usage = shutil.disk_usage(filler.parent)
            if fraction is not None:
                missing = int(fraction * usage.total) - (usage.total - usage.free)
                if missing <= 0:
                    return
                chunk = min(_FILL_CHUNK_BYTES, max(_PAGE_BYTES, missing))
            try:
                os.write(fd, b"\0" * chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                if fraction is not None or chunk <= 1:
                    return
                chunk //= 2
    finally:
        os.close(fd)
