"""The filesystem port of the storage engine and its real (``os``-based) implementation.

Everything the engine persists goes through :class:`FileSystem`, so that crash tests can run
the same engine on :class:`~bkeeper.storage.memory_fs.MemoryFileSystem`, which drops every
byte not made durable when it "crashes".

Durability contract (what the engine relies on, what the in-memory model enforces):

* bytes appended with :meth:`WritableFile.write` are durable once :meth:`WritableFile.sync`
  (fdatasync) returns;
* a new file's *name*, a rename and a removal are durable once :meth:`FileSystem.fsync_dir`
  of the parent directory returns;
* :meth:`FileSystem.truncate` is durable when it returns;
* directories made by :meth:`FileSystem.makedirs` are durable when it returns.

Files are only ever appended to (never overwritten in place), truncated, renamed or removed.
"""

from __future__ import annotations

import os
import shutil
from typing import Protocol

from bkeeper.common.errors import StorageError

__all__ = [
    "BytesLike",
    "FileSystem",
    "OsFileSystem",
    "ReadableFile",
    "WritableFile",
    "create_durably",
    "numbered_file_name",
    "numbered_file_number",
    "write_file_atomic",
]

BytesLike = bytes | bytearray | memoryview


class WritableFile(Protocol):
    """A file opened for appending."""

    @property
    def path(self) -> str: ...

    def write(self, data: BytesLike) -> None:
        """Append all of ``data`` (retrying short writes)."""

    def sync(self) -> None:
        """Make every byte written so far durable (fdatasync)."""

    def size(self) -> int:
        """The file's length, including bytes not yet synced."""

    def close(self) -> None: ...


class ReadableFile(Protocol):
    """A file opened for positional reads."""

    def read_at(self, offset: int, size: int) -> bytes:
        """Up to ``size`` bytes at ``offset``; fewer only at the end of the file."""

    def size(self) -> int: ...

    def close(self) -> None: ...


class FileSystem(Protocol):
    """The filesystem operations the storage engine uses."""

    def open_append(self, path: str) -> WritableFile:
        """Open ``path`` for appending, creating it if missing."""

    def open_read(self, path: str) -> ReadableFile: ...

    def read_file(self, path: str) -> bytes:
        """The whole content of a (small) file."""

    def truncate(self, path: str, size: int) -> None:
        """Cut ``path`` to ``size`` bytes, durably."""

    def rename(self, source: str, target: str) -> None:
        """Atomically replace ``target`` by ``source`` (durable after fsync_dir)."""

    def fsync_dir(self, path: str) -> None: ...

    def list_dir(self, path: str) -> list[str]:
        """Names (not paths) of the files in directory ``path``."""

    def remove(self, path: str) -> None: ...

    def size(self, path: str) -> int: ...

    def exists(self, path: str) -> bool: ...

    def makedirs(self, path: str) -> None:
        """Create ``path`` and its parents if missing, durably."""

    def disk_usage(self, path: str) -> tuple[int, int]:
        """``(total, free)`` bytes of the filesystem holding ``path``."""

    def filesystem_id(self, path: str) -> str:
        """The same text for every existing path on one filesystem, another for each other
        filesystem (its device)."""


def write_file_atomic(fs: FileSystem, path: str, data: bytes) -> None:
    """Replace ``path`` by ``data`` atomically and durably: temp file, sync, rename, fsync dir.
    If writing the temp file fails (a full disk), it is removed and ``path`` is unchanged."""
    temp = path + ".tmp"
    if fs.exists(temp):
        fs.remove(temp)
    handle = fs.open_append(temp)
    try:
        handle.write(data)
        handle.sync()
    except BaseException:
        handle.close()
        fs.remove(temp)
        raise
    handle.close()
    fs.rename(temp, path)
    fs.fsync_dir(os.path.dirname(path) or ".")


def create_durably(fs: FileSystem, directory: str, path: str, header: bytes) -> WritableFile:
    """Create ``path`` in ``directory`` holding ``header``, durably (file synced, directory
    fsynced); on failure remove what was made. ``StorageError`` if ``path`` exists: files
    are named by ids that only grow, so one found there is not the caller's to append to."""
    if fs.exists(path):
        raise StorageError(f"{path} exists already")
    file = fs.open_append(path)
    try:
        file.write(header)
        file.sync()
        fs.fsync_dir(directory)
    except BaseException:
        file.close()
        fs.remove(path)
        fs.fsync_dir(directory)
        raise
    return file


def _fdatasync(fd: int) -> None:
    """``fdatasync`` where the platform has it, else ``fsync``; looked up at each call (one
    per group commit), so a test can record that the real call happens."""
    getattr(os, "fdatasync", os.fsync)(fd)


class _OsWritableFile:
    __slots__ = ("_fd", "_path", "_size")

    def __init__(self, path: str) -> None:
        self._path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._size = os.fstat(self._fd).st_size

    @property
    def path(self) -> str:
        return self._path

    def write(self, data: BytesLike) -> None:
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            self._size += written
            view = view[written:]

    def sync(self) -> None:
        _fdatasync(self._fd)

    def size(self) -> int:
        return self._size

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class _OsReadableFile:
    __slots__ = ("_fd",)

    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_RDONLY)

    def read_at(self, offset: int, size: int) -> bytes:
        return os.pread(self._fd, size, offset)

    def size(self) -> int:
        return os.fstat(self._fd).st_size

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class OsFileSystem:
    """The real filesystem, through ``os``."""

    def open_append(self, path: str) -> WritableFile:
        return _OsWritableFile(path)

    def open_read(self, path: str) -> ReadableFile:
        return _OsReadableFile(path)

    def read_file(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def truncate(self, path: str, size: int) -> None:
        fd = os.open(path, os.O_WRONLY)
        try:
            os.ftruncate(fd, size)
            os.fsync(fd)
        finally:
            os.close(fd)

    def rename(self, source: str, target: str) -> None:
        os.replace(source, target)

    def fsync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def list_dir(self, path: str) -> list[str]:
        return [e.name for e in os.scandir(path) if e.is_file()]

    def remove(self, path: str) -> None:
        os.remove(path)

    def size(self, path: str) -> int:
        return os.path.getsize(path)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def makedirs(self, path: str) -> None:
        created = not os.path.isdir(path)
        os.makedirs(path, exist_ok=True)
        if created:
            parent = os.path.dirname(os.path.abspath(path))
            self.fsync_dir(parent)

    def disk_usage(self, path: str) -> tuple[int, int]:
        usage = shutil.disk_usage(path)
        return usage.total, usage.free

    def filesystem_id(self, path: str) -> str:
        return f"dev {os.stat(path).st_dev}"


def numbered_file_name(number: int, suffix: str, prefix: str = "") -> str:
    """``<prefix><number as 16 hex digits><suffix>``: how journals, entry logs and index
    files are named, so a directory listing sorts them by number."""
    return f"{prefix}{number:016x}{suffix}"


def numbered_file_number(name: str, suffix: str, prefix: str = "") -> int | None:
    """The number in a name made by :func:`numbered_file_name`, or None for any other file."""
    if len(name) != len(prefix) + 16 + len(suffix):
        return None
    if not (name.startswith(prefix) and name.endswith(suffix)):
        return None
    try:
        return int(name[len(prefix) : len(prefix) + 16], 16)
    except ValueError:
        return None
