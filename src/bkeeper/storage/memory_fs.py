"""An in-memory :class:`~bkeeper.storage.filesystem.FileSystem` that can crash.

Model (a strict POSIX filesystem, like ext4 with ``data=ordered`` minus its courtesies):

* every file is an inode holding its live bytes and how many of them are durable
  (``synced``); files are append-only, so durable bytes are always a prefix of live ones;
* each directory has a live listing and a durable listing (name -> inode); creating,
  renaming or removing a file changes the live listing only, :meth:`fsync_dir` copies the
  live listing of that directory to the durable one;
* :meth:`crash` drops everything not durable: listings become the durable listings, every
  inode keeps its synced bytes (plus, with ``torn=rng``, a random prefix of its unsynced
  tail, as a torn write may). The crashed process is dead: this filesystem object and every
  handle opened through it raise ``OSError`` from then on, so threads of the dead engine
  cannot touch the disk any more. ``crash`` returns a new filesystem object on the same
  (surviving) disk for the restarted process (as does :meth:`restart`);
* :meth:`schedule_crash` makes the N-th mutating operation from now crash the machine,
  whichever thread makes it, so crashes land inside group commits, flushes and checkpoints;
* directories made by :meth:`makedirs` and truncations are durable at once.

A disk made with ``capacity_bytes`` fills up like a real one: the live bytes of the files in
the live listing count against it; a write that does not fit appends what fits and raises
``OSError(ENOSPC)`` (as a short write followed by a failed one does); creating, truncating,
renaming and removing files need no room. :meth:`disk_usage` reports the capacity.
:meth:`mount` makes a directory a filesystem of its own with its own capacity (several
disks of one machine: they crash together); files count against the mount they are under,
and :meth:`filesystem_id` tells mounts apart.

:meth:`corrupt` overwrites bytes in place, durably, to simulate media corruption;
:meth:`fail_syncs` makes file syncs fail, as a dying disk does. All methods are thread-safe
(one lock per disk).
"""

from __future__ import annotations

import errno
import os
import random
import threading

from bkeeper.storage.filesystem import BytesLike, ReadableFile, WritableFile

__all__ = ["MemoryFileSystem"]

#: The capacity reported by :meth:`MemoryFileSystem.disk_usage` when none is given.
MEMORY_DISK_BYTES = 1 << 40


class _Inode:
    __slots__ = ("data", "synced")

    def __init__(self) -> None:
        self.data = bytearray()
        self.synced = 0


class _Disk:
    """What survives a crash, shared by the filesystem objects of successive processes."""

    def __init__(self, capacity_bytes: int | None = None) -> None:
        self.lock = threading.RLock()
        #: Mount point -> its capacity (None: MEMORY_DISK_BYTES, never full).
        self.mounts: dict[str, int | None] = {"/": capacity_bytes}
        self.generation = 0
        self.live: dict[str, _Inode] = {}
        self.durable: dict[str, _Inode] = {}
        self.dirs: set[str] = {"/", "."}
        self.sync_error: OSError | None = None
        self.sync_error_paths = ""
        self.countdown: int | None = None
        self.torn: random.Random | None = None

    def crash(self, torn: random.Random | None) -> None:
        self.generation += 1
        self.countdown = None
        self.live = dict(self.durable)
        for inode in set(self.live.values()):
            keep = 0
            unsynced = len(inode.data) - inode.synced
            if torn is not None and unsynced > 0:
                keep = torn.randint(0, unsynced)
            del inode.data[inode.synced + keep :]
            inode.synced = len(inode.data)

    def mount_of(self, path: str) -> str:
        """The mount point ``path`` is under (the longest that contains it)."""
        while path not in self.mounts:
            parent = os.path.dirname(path)
            if parent == path:
                return "/"
            path = parent
        return path

    def used_bytes(self, mount: str) -> int:
        inodes = {inode for name, inode in self.live.items() if self.mount_of(name) == mount}
        return sum(len(inode.data) for inode in inodes)

    def room_bytes(self, path: str) -> int | None:
        """Bytes that still fit on the mount holding ``path`` (None: no capacity set)."""
        mount = self.mount_of(path)
        capacity = self.mounts[mount]
        if capacity is None:
            return None
        return max(0, capacity - self.used_bytes(mount))

    def tick(self) -> None:
        """Count one mutating operation; crash when a scheduled crash is due."""
        if self.countdown is not None:
            self.countdown -= 1
            if self.countdown <= 0:
                self.crash(self.torn)
                raise OSError("the machine crashed (scheduled crash)")


class _Handle:
    __slots__ = ("_fs", "_generation", "_inode", "_path")

    def __init__(self, fs: MemoryFileSystem, path: str, inode: _Inode) -> None:
        self._fs = fs
        self._path = path
        self._inode = inode
        self._generation = fs.generation

    @property
    def path(self) -> str:
        return self._path

    def _check(self) -> None:
        if self._generation != self._fs.disk.generation:
            raise OSError(f"{self._path}: file handle lost in a crash")

    def write(self, data: BytesLike) -> None:
        with self._fs.disk.lock:
            self._check()
            room = self._fs.disk.room_bytes(self._path)
            if room is not None and room < len(data):
                self._inode.data += memoryview(data)[:room]
                raise OSError(errno.ENOSPC, "No space left on device", self._path)
            self._inode.data += data
            self._fs.disk.tick()  # after: a crash may keep part of this write (torn)

    def sync(self) -> None:
        with self._fs.disk.lock:
            self._check()
            self._fs.disk.tick()
            disk = self._fs.disk
            if disk.sync_error is not None and disk.sync_error_paths in self._path:
                raise disk.sync_error
            self._inode.synced = len(self._inode.data)

    def read_at(self, offset: int, size: int) -> bytes:
        with self._fs.disk.lock:
            self._check()
            return bytes(self._inode.data[offset : offset + size])

    def size(self) -> int:
        with self._fs.disk.lock:
            self._check()
            return len(self._inode.data)

    def close(self) -> None:
        pass


class MemoryFileSystem:
    """A filesystem in memory whose :meth:`crash` loses exactly what was not made durable."""

    def __init__(self, disk: _Disk | None = None, *, capacity_bytes: int | None = None) -> None:
        if disk is not None and capacity_bytes is not None:
            raise ValueError("capacity_bytes is a property of a new disk")
        self.disk = disk if disk is not None else _Disk(capacity_bytes)
        self.generation = self.disk.generation

    # -- crash model -------------------------------------------------------------------
    def crash(self, torn: random.Random | None = None) -> MemoryFileSystem:
        """Lose everything not durable; with ``torn``, keep random prefixes of unsynced
        tails. Returns the filesystem for the restarted process (this one is dead)."""
        with self.disk.lock:
            self._check()
            self.disk.crash(torn)
        return self.restart()

    def schedule_crash(self, after_operations: int, torn: random.Random | None = None) -> None:
        """Crash at the ``after_operations``-th mutating operation from now (write, sync,
        create, rename, remove, truncate, directory fsync), whichever thread makes it; that
        operation raises ``OSError``."""
        with self.disk.lock:
            self.disk.countdown = after_operations
            self.disk.torn = torn

    def cancel_crash(self) -> None:
        """Forget a crash scheduled with :meth:`schedule_crash` that has not happened."""
        with self.disk.lock:
            self.disk.countdown = None

    @property
    def crashed(self) -> bool:
        """Whether the process using this filesystem object has crashed."""
        return self.generation != self.disk.generation

    def restart(self) -> MemoryFileSystem:
        """A filesystem object on the same disk for a new process."""
        return MemoryFileSystem(self.disk)

    def fail_syncs(self, error: OSError | None, path_contains: str = "") -> None:
        """Fault hook: syncs of files whose path contains ``path_contains`` raise ``error``
        from now on (None: stop failing)."""
        with self.disk.lock:
            self.disk.sync_error = error
            self.disk.sync_error_paths = path_contains

    def corrupt(self, path: str, offset: int, data: bytes) -> None:
        """Overwrite bytes of ``path`` at ``offset`` in place, durably (media corruption)."""
        with self.disk.lock:
            inode = self._inode(path)
            inode.data[offset : offset + len(data)] = data

    def unsynced_bytes(self, path: str) -> int:
        with self.disk.lock:
            inode = self._inode(path)
            return len(inode.data) - inode.synced

    # -- FileSystem --------------------------------------------------------------------
    def open_append(self, path: str) -> WritableFile:
        path = _norm(path)
        with self.disk.lock:
            self._check_parent(path)
            inode = self.disk.live.get(path)
            if inode is None:
                self.disk.tick()
                inode = self.disk.live[path] = _Inode()
            return _Handle(self, path, inode)

    def open_read(self, path: str) -> ReadableFile:
        path = _norm(path)
        with self.disk.lock:
            return _Handle(self, path, self._inode(path))

    def read_file(self, path: str) -> bytes:
        with self.disk.lock:
            return bytes(self._inode(path).data)

    def truncate(self, path: str, size: int) -> None:
        with self.disk.lock:
            inode = self._inode(path)
            self.disk.tick()
            del inode.data[size:]
            inode.synced = len(inode.data)

    def rename(self, source: str, target: str) -> None:
        source, target = _norm(source), _norm(target)
        with self.disk.lock:
            inode = self._inode(source)
            self._check_parent(target)
            self.disk.tick()
            del self.disk.live[source]
            self.disk.live[target] = inode

    def fsync_dir(self, path: str) -> None:
        path = _norm(path)
        with self.disk.lock:
            self._check()
            if path not in self.disk.dirs:
                raise FileNotFoundError(path)
            self.disk.tick()
            for name in [n for n in self.disk.durable if os.path.dirname(n) == path]:
                del self.disk.durable[name]
            for name, inode in self.disk.live.items():
                if os.path.dirname(name) == path:
                    self.disk.durable[name] = inode

    def list_dir(self, path: str) -> list[str]:
        path = _norm(path)
        with self.disk.lock:
            self._check()
            if path not in self.disk.dirs:
                raise FileNotFoundError(path)
            return [os.path.basename(n) for n in self.disk.live if os.path.dirname(n) == path]

    def remove(self, path: str) -> None:
        with self.disk.lock:
            path = _norm(path)
            self._inode(path)
            self.disk.tick()
            del self.disk.live[path]

    def size(self, path: str) -> int:
        with self.disk.lock:
            return len(self._inode(path).data)

    def exists(self, path: str) -> bool:
        path = _norm(path)
        with self.disk.lock:
            self._check()
            return path in self.disk.live or path in self.disk.dirs

    def makedirs(self, path: str) -> None:
        path = _norm(path)
        with self.disk.lock:
            self._check()
            while path not in self.disk.dirs:
                self.disk.dirs.add(path)
                path = os.path.dirname(path)

    def disk_usage(self, path: str) -> tuple[int, int]:
        with self.disk.lock:
            self._check()
            mount = self.disk.mount_of(_norm(path))
            capacity = self.disk.mounts[mount]
            total = capacity if capacity is not None else MEMORY_DISK_BYTES
            return total, max(0, total - self.disk.used_bytes(mount))

    def filesystem_id(self, path: str) -> str:
        with self.disk.lock:
            self._check()
            path = _norm(path)
            if path not in self.disk.dirs and path not in self.disk.live:
                raise FileNotFoundError(path)
            return self.disk.mount_of(path)

    def mount(self, path: str, capacity_bytes: int | None = None) -> None:
        """Make ``path`` (created if missing; holding no file yet) a filesystem of its own of
        ``capacity_bytes`` (None: never full); it survives crashes, as a disk does."""
        path = _norm(path)
        with self.disk.lock:
            self._check()
            if any(name.startswith(path + "/") for name in self.disk.live):
                raise ValueError(f"{path}: cannot mount over files")
            self.makedirs(path)
            self.disk.mounts[path] = capacity_bytes

    # -- helpers -----------------------------------------------------------------------
    def _check(self) -> None:
        if self.generation != self.disk.generation:
            raise OSError("filesystem of a crashed process")

    def _inode(self, path: str) -> _Inode:
        self._check()
        inode = self.disk.live.get(_norm(path))
        if inode is None:
            raise FileNotFoundError(path)
        return inode

    def _check_parent(self, path: str) -> None:
        self._check()
        if os.path.dirname(path) not in self.disk.dirs:
            raise FileNotFoundError(os.path.dirname(path))


def _norm(path: str) -> str:
    return os.path.normpath(path)
