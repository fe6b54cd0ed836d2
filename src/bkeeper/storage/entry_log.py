"""Entry logs: append-only files holding entry bodies flushed from the write cache.

An entry log ``<log id as 16 hex digits>.log`` is::

    header   16 bytes: magic b"BKEL" | version u32 (=1) | log id u64
    record*  length u32 | crc32c u32 (CRC-32C of the body) | body

An entry's *location* is ``log id << 32 | offset of its record`` (Apache BookKeeper packs
locations the same way), so a log holds at most 4 GiB and log ids stay below 2**31.

Invariants: a log is only appended to, by one writer (the flusher); each run of the engine
starts a new log, created by the first flush that has entries to write, so a torn tail from a
crash is never appended to; after a failed write or fdatasync (a full disk) the log is cut
back to what was synced and the next flush starts a new one; the location index only ever
points at records that were fdatasynced before the index was persisted. A log that rolls or
is closed ends with its ledgers map (:mod:`bkeeper.storage.ledgers_map`), which garbage
collection and compaction (:mod:`bkeeper.storage.compaction`) use to reclaim the space of
deleted ledgers.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
from collections.abc import Sequence
from typing import Protocol

from crc32c import crc32c

from bkeeper.common.errors import CorruptRecordError
from bkeeper.storage.filesystem import (
    BytesLike,
    FileSystem,
    ReadableFile,
    WritableFile,
    create_durably,
    numbered_file_name,
    numbered_file_number,
)
from bkeeper.storage.ledgers_map import EntryLogMeta, EntryLogRegistry, encode_ledgers_map

__all__ = [
    "ENTRY_LOG_HEADER_BYTES",
    "EntryLogReader",
    "EntryLogWriter",
    "LogIds",
    "LogPaths",
    "entry_log_id",
    "entry_log_name",
    "location_of",
]

MAGIC = b"BKEL"
VERSION = 1
SUFFIX = ".log"
_HEADER = struct.Struct(">4sIQ")
ENTRY_LOG_HEADER_BYTES = _HEADER.size
_RECORD = struct.Struct(">II")
_LEDGER_ID = struct.Struct(">q")
log = logging.getLogger(__name__)
_OFFSET_MASK = (1 << 32) - 1
#: A read fetches the record header and this many body bytes at once (one pread for most
#: entries); longer bodies take a second pread.
_READ_AHEAD_BYTES = 8192
#: ``read_many`` reads a run of nearby records of one log with one pread of at most this
#: many bytes (plus the read-ahead for the last record).
_RUN_BYTES_MAX = 1024 * 1024


def _run_end(locations: Sequence[int], start: int) -> int:
    """The end (exclusive) of the run of ``locations`` from ``start``: same log, offsets
    increasing, within ``_RUN_BYTES_MAX`` of the first."""
    log_id = locations[start] >> 32
    base = previous = locations[start] & _OFFSET_MASK
    end = start + 1
    while end < len(locations):
        location = locations[end]
        offset = location & _OFFSET_MASK
        if location >> 32 != log_id or offset <= previous or offset - base > _RUN_BYTES_MAX:
            break
        previous = offset
        end += 1
    return end


def entry_log_name(log_id: int) -> str:
    return numbered_file_name(log_id, SUFFIX)


def entry_log_id(name: str) -> int | None:
    """The number in a file name of this kind, or None for any other file."""
    return numbered_file_number(name, SUFFIX)


def location_of(log_id: int, offset: int) -> int:
    return (log_id << 32) | offset


class LogIds:
    """Hands out entry log ids, increasing, to the flusher and to compaction (thread-safe)."""

    def __init__(self, next_id: int) -> None:
        self._next = next_id
        self._lock = threading.Lock()

    def take(self) -> int:
        with self._lock:
            log_id = self._next
            self._next += 1
            return log_id


class LogPaths(Protocol):
    """Where entry logs live (:class:`bkeeper.storage.dirs.LedgerDirs`: several directories)."""

    def log_path(self, log_id: int) -> str:
        """The path of an existing log."""

    def new_log_path(self, log_id: int) -> str:
        """The path of a new log: chooses its directory and records it."""

    def keep_appending(self, log_id: int) -> bool:
        """False when the log's directory takes no more entries (a new log goes elsewhere)."""

    def forget(self, log_id: int) -> None:
        """The log was removed."""

    def note_written(self, size: int, path: str | None = None) -> None:
        """``size`` bytes were just written to a log in the directory ``path`` (free-space
        accounting: the next new log's directory is chosen by it)."""


class _OneDir:
    """Every log in one directory."""

    def __init__(self, directory: str) -> None:
        self._directory = directory

    def log_path(self, log_id: int) -> str:
        return os.path.join(self._directory, entry_log_name(log_id))

    new_log_path = log_path

    def keep_appending(self, log_id: int) -> bool:
        return True

    def note_written(self, size: int, path: str | None = None) -> None:
        return None  # one directory: nothing to choose between

    def forget(self, log_id: int) -> None:
        pass


def _log_paths(where: str | LogPaths) -> LogPaths:
    return _OneDir(where) if isinstance(where, str) else where


class EntryLogWriter:
    """Appends batches of entries to the current entry log, rolling by size.

    Used by one thread at a time (the flush lock, or the one compaction). Rolled logs are
    synced, then given their ledgers map, before they are closed; :meth:`sync` syncs the
    current one. Record bytes per ledger reach ``registry`` once they are synced.
    ``suffix`` names the files (compaction writes ``.compacting`` files and renames them).
    """

    def __init__(
        self,
        fs: FileSystem,
        directory: str | LogPaths,
        log_ids: LogIds,
        log_bytes_max: int,
        registry: EntryLogRegistry | None = None,
        *,
        suffix: str = SUFFIX,
        sources: tuple[int, ...] = (),
    ) -> None:
        """A writer given ``sources`` (compaction's) fails when it cannot write the map:
        the map is what lets a restart finish the compaction."""
        self._fs = fs
        self._paths = _log_paths(directory)
        self._log_ids = log_ids
        self._log_bytes_max = log_bytes_max
        self._registry = registry
        self._suffix = suffix
        self._sources = sources
        self._file: WritableFile | None = None
        self._log_id = -1
        self._unsynced = False
        self._synced_bytes = 0
        self._meta = EntryLogMeta(-1)
        self._pending: dict[int, int] = {}  # ledger id -> record bytes appended, not synced
        #: Bytes appended so far (all logs), for the disk space accounting ...
        self.bytes_written = 0

    @property
    def meta(self) -> EntryLogMeta:
        """The ledgers map of the current (or last closed) log, as synced so far."""
        return self._meta

    @property
    def current_path(self) -> str | None:
        """The path of the log being written (None when none is open)."""
        return self._file.path if self._file is not None else None

    @property
    def current_log_id(self) -> int:
        """The id of the log being written (-1 when none is open)."""
        return self._log_id if self._file is not None else -1

    def append(self, bodies: Sequence[bytes]) -> list[int]:
        """Append ``bodies`` (one write per log touched); their locations, in order."""
        locations: list[int] = []
        start = 0
        unpack = _LEDGER_ID.unpack_from
        while start < len(bodies):
            file = self._writable(len(bodies[start]))
            offset = file.size()
            buf = bytearray()
            pending = self._pending
            end = start
            while end < len(bodies):
                body = bodies[end]
                record_end = offset + len(buf) + _RECORD.size + len(body)
                if end > start and record_end > self._log_bytes_max:
                    break
                locations.append(location_of(self._log_id, offset + len(buf)))
                buf += _RECORD.pack(len(body), crc32c(body))
                buf += body
                ledger_id = unpack(body)[0]
                pending[ledger_id] = pending.get(ledger_id, 0) + _RECORD.size + len(body)
                end += 1
            self._unsynced = True
            self._count(file, len(buf))
            file.write(buf)
            start = end
        return locations

    def append_runs(self, runs: Sequence[tuple[int, Sequence[bytes]]]) -> list[list[int]]:
        """Append the bodies of ``runs`` (``(ledger id, bodies of that ledger)``), in order,
        one write per log touched; their locations, a list per run. As :meth:`append`, with
        the per-ledger bookkeeping done once per run (no work per entry beyond its record)."""
        out: list[list[int]] = []
        pack = _RECORD.pack
        head = _RECORD.size
        buf = bytearray()
        file: WritableFile | None = None
        offset = base = 0
        log_max = self._log_bytes_max
        pending: dict[int, int] = self._pending
        for ledger_id, bodies in runs:
            places: list[int] = []
            out.append(places)
            run_bytes = 0
            for body in bodies:
                size = len(body)
                if file is None or (buf and offset + len(buf) + head + size > log_max):
                    if file is not None:
                        self._write_out(file, buf)
                        pending[ledger_id] = pending.get(ledger_id, 0) + run_bytes
                        run_bytes = 0
                        buf = bytearray()
                    file = self._writable(size)
                    offset = file.size()
                    base = location_of(self._log_id, offset)
                    pending = self._pending  # a new log has a new map
                places.append(base + len(buf))
                buf += pack(size, crc32c(body))
                buf += body
                run_bytes += head + size
            pending[ledger_id] = pending.get(ledger_id, 0) + run_bytes
        if file is not None and buf:
            self._write_out(file, buf)
        return out

    def _write_out(self, file: WritableFile, buf: bytearray) -> None:
        self._unsynced = True
        self._count(file, len(buf))
        file.write(buf)

    def _count(self, file: WritableFile, size: int) -> None:
        """``size`` bytes written to ``file``: counted, and told to its directory's free-space
        estimate at once, so that a log rolled later in the same flush goes to the directory
        with the most free space as it is then (told after the flush, every choice within
        it saw the space before it: one directory took several logs in a row)."""
        self.bytes_written += size
        self._paths.note_written(size, os.path.dirname(file.path))

    def append_raw(self, records: BytesLike, sizes: dict[int, int]) -> int:
        """Append whole records as they are (headers and checksums included, as copied
        from another log) to the current log; ``sizes`` are their bytes per ledger. Returns
        the offset they start at in :attr:`current_log_id`. The caller keeps each call within
        a log's size limit (compaction copies at most what one log held)."""
        file = self._writable(len(records) - _RECORD.size)
        offset = file.size()
        file.write(records)
        self._unsynced = True
        self._count(file, len(records))
        pending = self._pending
        for ledger_id, size in sizes.items():
            pending[ledger_id] = pending.get(ledger_id, 0) + size
        return offset

    def sync(self) -> None:
        """Make every appended entry durable."""
        if self._file is not None and self._unsynced:
            self._file.sync()
            self._unsynced = False
            self._synced_bytes = self._file.size()
            self._meta.add(self._pending)
            if self._registry is not None:
                self._registry.add(self._log_id, self._pending)
            self._pending = {}

    def discard_unsynced(self) -> None:
        """After a failed append or sync: cut the current log back to what was synced,
        durably (nothing points past it), and leave it: the next append starts a new log.
        A log holding no synced record is removed instead."""
        file, self._file = self._file, None
        self._unsynced = False
        self._pending = {}
        if file is None:
            return
        file.close()
        if self._synced_bytes > ENTRY_LOG_HEADER_BYTES:
            self._fs.truncate(file.path, self._synced_bytes)
            return
        self._fs.remove(file.path)
        self._fs.fsync_dir(os.path.dirname(file.path))
        self._paths.forget(self._log_id)
        if self._registry is not None:
            self._registry.remove(self._log_id)

    def close(self) -> None:
        """Sync, end the log with its ledgers map and close it."""
        if self._file is not None:
            self.sync()
            self._write_map(self._file)
            self._file.close()
            self._file = None

    def _write_map(self, file: WritableFile) -> None:
        """Append the ledgers map. It only spares a scan at the next open: when it cannot be
        written (a full disk), the log is cut back to its entries and keeps no map."""
        try:
            file.write(encode_ledgers_map(self._meta, self._synced_bytes))
            file.sync()
        except OSError as exc:
            if self._sources:
                raise
            log.warning(
                "entry log %s keeps no ledgers map (the next start scans it): %s", file.path, exc
            )
            self._fs.truncate(file.path, self._synced_bytes)

    def abandon(self) -> None:
        """Drop the file handle without syncing (process death)."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def _writable(self, next_body_bytes: int) -> WritableFile:
        file = self._file
        needed = _RECORD.size + next_body_bytes
        if file is not None and not self._paths.keep_appending(self._log_id):
            file = None  # its directory takes no more: a new log goes to another
        if file is not None and (
            file.size() + needed <= self._log_bytes_max or file.size() == ENTRY_LOG_HEADER_BYTES
        ):
            return file
        self.close()
        log_id = self._log_ids.take()
        path = self._paths.new_log_path(log_id)
        if self._suffix != SUFFIX:
            path = path[: -len(SUFFIX)] + self._suffix
        try:
            file = create_durably(
                self._fs, os.path.dirname(path), path, _HEADER.pack(MAGIC, VERSION, log_id)
            )
        except BaseException:
            self._paths.forget(log_id)
            raise
        self._log_id = log_id
        self._file = file
        self._synced_bytes = ENTRY_LOG_HEADER_BYTES
        self._meta = EntryLogMeta(log_id, sources=self._sources)
        return file


class EntryLogReader:
    """Reads entries by location; keeps at most ``handles_max`` logs open (thread-safe)."""

    def __init__(self, fs: FileSystem, directory: str | LogPaths, handles_max: int) -> None:
        self._fs = fs
        self._paths = _log_paths(directory)
        self._handles_max = handles_max
        self._handles: dict[int, ReadableFile] = {}
        self._lock = threading.Lock()

    def read(self, location: int) -> bytes:
        """The body stored at ``location``; CorruptRecordError if it fails its checksum."""
        return self.read_many((location,))[0]

    def read_many(self, locations: Sequence[int]) -> list[bytes]:
        """The bodies at ``locations``, in order, as :meth:`read` gives them; records that
        lie close together in one log (a ledger's entries flushed together) are read with
        one pread per run of up to ``_RUN_BYTES_MAX`` bytes instead of one each. The
        checksums are checked outside the lock, with no object per entry but the body."""
        bodies: list[bytes] = []
        crcs: list[int] = []
        index, count = 0, len(locations)
        with self._lock:
            while index < count:
                end = _run_end(locations, index)
                self._read_run_locked(locations, index, end, bodies, crcs)
                index = end
        for at, (body, crc) in enumerate(zip(bodies, crcs, strict=True)):
            if crc32c(body) != crc:
                location = locations[at]
                raise self._corrupt(
                    location >> 32, location & _OFFSET_MASK, "entry record fails its checksum"
                )
        return bodies

    def _read_run_locked(
        self,
        locations: Sequence[int],
        start: int,
        end: int,
        bodies: list[bytes],
        crcs: list[int],
    ) -> None:
        """Read the records at ``locations[start:end]`` (one run) with one pread, appending
        each body and the checksum its record header holds."""
        log_id = locations[start] >> 32
        base = locations[start] & _OFFSET_MASK
        handle = self._handle_locked(log_id)
        head = _RECORD.size
        span = (locations[end - 1] & _OFFSET_MASK) - base + head + _READ_AHEAD_BYTES
        data = handle.read_at(base, span)
        size = len(data)
        unpack = _RECORD.unpack_from
        add_body, add_crc = bodies.append, crcs.append
        for index in range(start, end):
            offset = locations[index] & _OFFSET_MASK
            at = offset - base
            if size < at + head:
                raise self._corrupt(log_id, offset, "short record header")
            length, crc = unpack(data, at)
            body = data[at + head : at + head + length]
            if len(body) < length:
                body += handle.read_at(offset + head + len(body), length - len(body))
                if len(body) != length:
                    raise self._corrupt(log_id, offset, "entry record fails its checksum")
            add_body(body)
            add_crc(crc)

    def forget(self, log_id: int) -> None:
        """Close the handle of a log about to be removed."""
        with self._lock:
            handle = self._handles.pop(log_id, None)
        if handle is not None:
            handle.close()

    def close(self) -> None:
        with self._lock:
            handles, self._handles = self._handles, {}
        for handle in handles.values():
            handle.close()

    def _handle_locked(self, log_id: int) -> ReadableFile:
        handle = self._handles.get(log_id)
        if handle is None:
            if len(self._handles) >= self._handles_max:
                oldest = next(iter(self._handles))
                self._handles.pop(oldest).close()
            handle = self._fs.open_read(self._path(log_id))
            self._handles[log_id] = handle
        return handle

    def _path(self, log_id: int) -> str:
        return self._paths.log_path(log_id)

    def _corrupt(self, log_id: int, offset: int, reason: str) -> CorruptRecordError:
        return CorruptRecordError(self._path(log_id), offset, reason)
