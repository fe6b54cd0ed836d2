"""What each entry log holds: its *ledgers map*, kept in memory and written at its end.

Garbage collection needs, for every entry log, which ledgers it holds and how many bytes of
each, to know the log's live ratio (the bytes of ledgers that still exist over all its record
bytes) without reading its entries. Apache BookKeeper keeps the same thing in a trailing
ledgers map; ours is::

    map record   length u32 | crc32c u32 | body       (framed like any entry record)
      body       -1 i64 (no ledger has that id) | magic b"LMAP" | version u32 (=1) |
                 sources u32 | count u32 | sources x log id u64 |
                 count x (ledger id i64 | bytes u64)
    footer       map offset u64 | magic b"BKLM"         (the log's last 12 bytes)

``bytes`` counts each record whole (its 8-byte header and body). ``sources`` is empty for a
log the flusher wrote; a log written by compaction names the logs it copied live entries
from, so that a restart can finish a compaction that was interrupted after the new log was
committed (see :mod:`bkeeper.storage.compaction`).

The flusher's log gets its map when it rolls or the engine closes; a log without one (the
process died, or the map could not be written on a full disk) is scanned record by record
when the engine opens, up to its first damaged record (a torn tail). A map that fails its
checksum is treated as absent (the log is scanned): a damaged map never stops collection.
"""

from __future__ import annotations

import contextlib
import struct
import threading
from collections.abc import Container, Iterator
from dataclasses import dataclass, field

from crc32c import crc32c

from bkeeper.storage.filesystem import FileSystem

__all__ = [
    "FOOTER_BYTES",
    "EntryLogMeta",
    "EntryLogRecord",
    "EntryLogRegistry",
    "ScannedChunk",
    "encode_ledgers_map",
    "read_entry_log_meta",
    "scan_chunks",
    "scan_entry_log",
]

_RECORD = struct.Struct(">II")
_MAP_HEAD = struct.Struct(">q4sIII")
_PAIR = struct.Struct(">qQ")
_SOURCE = struct.Struct(">Q")
_FOOTER = struct.Struct(">Q4s")
_ENTRY_HEAD = struct.Struct(">qq")
MAP_MAGIC = b"LMAP"
FOOTER_MAGIC = b"BKLM"
MAP_VERSION = 1
MAP_LEDGER_ID = -1
FOOTER_BYTES = _FOOTER.size
#: Entry logs are scanned this many bytes at a time.
_SCAN_CHUNK_BYTES = 1024 * 1024
_HEADER_BYTES = 16


@dataclass
class EntryLogMeta:
    """One entry log's ledgers map: record bytes per ledger, and the logs it was compacted
    from (empty for a log the flusher wrote)."""

    log_id: int
    ledgers: dict[int, int] = field(default_factory=dict)
    sources: tuple[int, ...] = ()

    @property
    def total_bytes(self) -> int:
        return sum(self.ledgers.values())

    def live_bytes(self, exists: Container[int]) -> int:
        return sum(size for ledger_id, size in self.ledgers.items() if ledger_id in exists)

    def add(self, sizes: dict[int, int]) -> None:
        ledgers = self.ledgers
        for ledger_id, size in sizes.items():
            ledgers[ledger_id] = ledgers.get(ledger_id, 0) + size


def encode_ledgers_map(meta: EntryLogMeta, offset: int) -> bytes:
    """The map record and footer for ``meta``, to be appended at ``offset``."""
    body = bytearray(
        _MAP_HEAD.pack(MAP_LEDGER_ID, MAP_MAGIC, MAP_VERSION, len(meta.sources), len(meta.ledgers))
    )
    for source in meta.sources:
        body += _SOURCE.pack(source)
    for ledger_id in sorted(meta.ledgers):
        body += _PAIR.pack(ledger_id, meta.ledgers[ledger_id])
    return _RECORD.pack(len(body), crc32c(body)) + body + _FOOTER.pack(offset, FOOTER_MAGIC)


def _decode_map(log_id: int, body: bytes) -> EntryLogMeta | None:
    if len(body) < _MAP_HEAD.size:
        return None
    marker, magic, version, sources, count = _MAP_HEAD.unpack_from(body)
    if marker != MAP_LEDGER_ID or magic != MAP_MAGIC or version != MAP_VERSION:
        return None
    if len(body) != _MAP_HEAD.size + 8 * sources + _PAIR.size * count:
        return None
    at = _MAP_HEAD.size
    found = []
    for _ in range(sources):
        found.append(_SOURCE.unpack_from(body, at)[0])
        at += 8
    ledgers = {}
    for _ in range(count):
        ledger_id, size = _PAIR.unpack_from(body, at)
        ledgers[ledger_id] = size
        at += _PAIR.size
    return EntryLogMeta(log_id, ledgers, tuple(found))


def read_ledgers_map(fs: FileSystem, path: str, log_id: int) -> EntryLogMeta | None:
    """The log's map from its footer, or None when it has none (or a damaged one)."""
    with contextlib.closing(fs.open_read(path)) as handle:
        size = handle.size()
        if size < _HEADER_BYTES + _RECORD.size + FOOTER_BYTES:
            return None
        offset, magic = _FOOTER.unpack(handle.read_at(size - FOOTER_BYTES, FOOTER_BYTES))
        if magic != FOOTER_MAGIC or not _HEADER_BYTES <= offset < size - FOOTER_BYTES:
            return None
        data = handle.read_at(offset, size - FOOTER_BYTES - offset)
    if len(data) < _RECORD.size:
        return None
    length, crc = _RECORD.unpack_from(data)
    body = data[_RECORD.size :]
    if len(body) != length or crc32c(body) != crc:
        return None
    return _decode_map(log_id, body)


@dataclass(frozen=True, slots=True)
class EntryLogRecord:
    """One record of an entry log as a scan finds it."""

    offset: int
    length: int
    ledger_id: int
    entry_id: int
    body: bytes | None  # with ``bodies=True`` only


@dataclass(frozen=True, slots=True)
class ScannedChunk:
    """Whole records of an entry log read at once: ``data`` holds the file's bytes from
    offset ``base``; ``records`` are (offset, length, ledger id, entry id) of each record in
    it, in order (a record's bytes are ``data[offset - base : offset - base + 8 + length]``,
    header included)."""

    base: int
    data: bytes
    records: list[tuple[int, int, int, int]]


def scan_chunks(fs: FileSystem, path: str, *, start: int = _HEADER_BYTES) -> Iterator[ScannedChunk]:
    """The entry records of a log in order, about ``_SCAN_CHUNK_BYTES`` at a time, up to its
    map, its end or its first damaged record (a torn tail: short header, short body or a
    failed checksum), whichever is first."""
    record_head, entry_head = _RECORD.unpack_from, _ENTRY_HEAD.unpack_from
    with contextlib.closing(fs.open_read(path)) as handle:
        size = handle.size()
        base = start
        carry = b""
        while base < size:
            data = carry + handle.read_at(base + len(carry), _SCAN_CHUNK_BYTES)
            view = memoryview(data)
            records: list[tuple[int, int, int, int]] = []
            at = 0
            stop = False
            while at + _RECORD.size <= len(data):
                length, crc = record_head(data, at)
                end = at + _RECORD.size + length
                if end > len(data):
                    if base + end > size:
                        stop = True  # torn: the body runs past the end of the file
                    break
                if length < 16 or crc32c(view[at + _RECORD.size : end]) != crc:
                    stop = True
                    break
                ledger_id, entry_id = entry_head(data, at + _RECORD.size)
                if ledger_id == MAP_LEDGER_ID:
                    stop = True
                    break
                records.append((base + at, length, ledger_id, entry_id))
                at = end
            if records:
                yield ScannedChunk(base, data, records)
            if stop:
                return
            if not records and at == 0 and len(data) - at >= _RECORD.size:
                # one record longer than a chunk: read all of it at once
                length = record_head(data, 0)[0]
                if base + _RECORD.size + length > size:
                    return
                carry = data + handle.read_at(base + len(data), _RECORD.size + length - len(data))
                continue
            if base + len(data) >= size and at == len(data):
                return
            if len(data) == len(carry) and at == 0:
                return  # nothing more could be read
            carry = data[at:]
            base += at


def scan_entry_log(
    fs: FileSystem, path: str, *, bodies: bool = False, start: int = _HEADER_BYTES
) -> Iterator[EntryLogRecord]:
    """The entry records of a log in order, as :func:`scan_chunks` finds them, one by one
    (with their bodies if ``bodies``)."""
    for chunk in scan_chunks(fs, path, start=start):
        data, base = chunk.data, chunk.base
        for offset, length, ledger_id, entry_id in chunk.records:
            body = None
            if bodies:
                at = offset - base + _RECORD.size
                body = data[at : at + length]
            yield EntryLogRecord(offset, length, ledger_id, entry_id, body)


def read_entry_log_meta(fs: FileSystem, path: str, log_id: int) -> tuple[EntryLogMeta, bool]:
    """The log's map: from its footer if it has one (True), else by scanning it (False)."""
    meta = read_ledgers_map(fs, path, log_id)
    if meta is not None:
        return meta, True
    meta = EntryLogMeta(log_id)
    ledgers = meta.ledgers
    for record in scan_entry_log(fs, path):
        ledgers[record.ledger_id] = ledgers.get(record.ledger_id, 0) + 8 + record.length
    return meta, False


class EntryLogRegistry:
    """The maps of every entry log of the engine, shared by the flusher (which adds to the
    current log's), compaction (which adds and removes logs) and garbage collection (which
    reads them); thread-safe."""

    def __init__(self, metas: dict[int, EntryLogMeta] | None = None) -> None:
        self._lock = threading.Lock()
        self._metas: dict[int, EntryLogMeta] = dict(metas or {})

    def add(self, log_id: int, sizes: dict[int, int]) -> None:
        with self._lock:
            meta = self._metas.get(log_id)
            if meta is None:
                meta = self._metas[log_id] = EntryLogMeta(log_id)
            meta.add(sizes)

    def put(self, meta: EntryLogMeta) -> None:
        with self._lock:
            self._metas[meta.log_id] = meta

    def remove(self, log_id: int) -> None:
        with self._lock:
            self._metas.pop(log_id, None)

    def get(self, log_id: int) -> EntryLogMeta | None:
        """A copy of one log's map."""
        with self._lock:
            meta = self._metas.get(log_id)
            if meta is None:
                return None
            return EntryLogMeta(meta.log_id, dict(meta.ledgers), meta.sources)

    def snapshot(self) -> list[EntryLogMeta]:
        """Copies of every map, by log id."""
        with self._lock:
            return [
                EntryLogMeta(m.log_id, dict(m.ledgers), m.sources)
                for _, m in sorted(self._metas.items())
            ]

    def __len__(self) -> int:
        with self._lock:
            return len(self._metas)

    def totals(self) -> tuple[int, int]:
        """``(logs, bytes of entries in them)``, without copying the maps."""
        with self._lock:
            return len(self._metas), sum(m.total_bytes for m in self._metas.values())
