"""The records and the ledgers map of one entry log, read-only (``bkeeper shell readlog``).

Uses the engine's own readers: :func:`~bkeeper.storage.ledgers_map.scan_entry_log` for the
records (it stops at the first damaged one), :func:`~bkeeper.storage.ledgers_map.read_ledgers_map`
for the map at the log's end, and the entry log reader to say why a record is damaged.

Rules:

* The records of a log end where its ledgers map starts, or, for a log without one (the log
  being written, or one whose process died), at the end of the file. A scan that stops
  before that end found damage there: a :class:`EntryLogDamage` gives where, why and how
  many bytes after it were not read (the scan cannot trust the damaged record's length, so
  it goes no further).
* In a log without a map, damage at the end can be a record being written right now (a
  running bookie's current log) or one torn by a crash; anywhere else it is damage.
* A map counts exactly the record bytes (header and body) of each ledger in the log (the
  writer adds them as they are synced, and a log cut back after a failed write gets no
  map): :func:`map_differences` gives each ledger where the map and the records disagree.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass

from bkeeper.common.errors import CorruptRecordError, StorageError
from bkeeper.storage.entry_log import (
    ENTRY_LOG_HEADER_BYTES,
    MAGIC,
    VERSION,
    EntryLogReader,
    entry_log_id,
    entry_log_name,
    location_of,
)
from bkeeper.storage.filesystem import FileSystem
from bkeeper.storage.inspect import bookie_layout
from bkeeper.storage.ledgers_map import (
    EntryLogMeta,
    EntryLogRecord,
    encode_ledgers_map,
    read_ledgers_map,
    scan_entry_log,
)

__all__ = [
    "EntryLogDamage",
    "EntryLogFile",
    "EntryLogRecord",
    "entry_log_file",
    "entry_log_path",
    "map_differences",
    "read_entry_log",
]

_RECORD_HEADER_BYTES = 8
#: The header every entry log starts with (see :mod:`bkeeper.storage.entry_log`).
_HEADER = struct.Struct(">4sIQ")
_MAP_LEDGER_ID = -1


@dataclass(frozen=True, slots=True)
class EntryLogFile:
    """One entry log as found: its size when looked at, whether its header is right, and
    its ledgers map (None: it has none, or a damaged one) with the offset the map starts at
    (where the records end)."""

    log_id: int
    path: str
    size_bytes: int
    header_ok: bool
    ledgers_map: EntryLogMeta | None
    records_end: int


@dataclass(frozen=True, slots=True)
class EntryLogDamage:
    """The scan stopped at ``offset`` for ``reason``; ``unread_bytes`` follow it up to the
    end of the records."""

    offset: int
    reason: str
    unread_bytes: int

    def as_dict(self) -> dict[str, object]:
        return {"offset": self.offset, "reason": self.reason, "unread_bytes": self.unread_bytes}


def entry_log_path(fs: FileSystem, data_dir: str | None, which: str) -> tuple[str, int]:
    """The path and id of an entry log given as a log id (decimal, in the ledgers directory
    of ``data_dir``) or as a path (its name must be an entry log name)."""
    if which.isdigit():
        if data_dir is None:
            raise StorageError(f"entry log id {which}: give the bookie's --data-dir")
        log_id = int(which)
        path = os.path.join(bookie_layout(fs, data_dir).ledgers, entry_log_name(log_id))
    else:
        path = which
        found = entry_log_id(os.path.basename(path))
        if found is None:
            raise StorageError(f"{path}: not an entry log name (16 hex digits, then .log)")
        log_id = found
    if not fs.exists(path):
        raise StorageError(f"{path}: no such entry log")
    return path, log_id


def entry_log_file(fs: FileSystem, path: str, log_id: int) -> EntryLogFile:
    """What the log is, from its header and its footer (its records are not read)."""
    size = fs.size(path)
    handle = fs.open_read(path)
    try:
        header = handle.read_at(0, ENTRY_LOG_HEADER_BYTES)
    finally:
        handle.close()
    header_ok = header == _HEADER.pack(MAGIC, VERSION, log_id)
    meta = read_ledgers_map(fs, path, log_id)
    # The map record and footer are the last bytes, as long as encoding the map gives.
    records_end = size if meta is None else size - len(encode_ledgers_map(meta, 0))
    return EntryLogFile(log_id, path, size, header_ok, meta, records_end)


def read_entry_log(
    fs: FileSystem, log: EntryLogFile, *, bodies: bool = False
) -> Iterator[EntryLogRecord | EntryLogDamage]:
    """The records of ``log`` in order (with their bodies if ``bodies``), then the damage
    that stopped the scan, if it stopped before the records' end (module rules). Records a
    running bookie appended after ``log`` was looked at are left out."""
    end = log.records_end
    stop = ENTRY_LOG_HEADER_BYTES
    for record in scan_entry_log(fs, log.path, bodies=bodies):
        if record.offset >= end:
            return
        yield record
        stop = record.offset + _RECORD_HEADER_BYTES + record.length
    if stop < end:
        reason = _why(fs, log, stop)
        yield EntryLogDamage(stop, reason, end - stop)


def _why(fs: FileSystem, log: EntryLogFile, offset: int) -> str:
    """Why the record at ``offset`` stopped the scan, as the entry log reader sees it."""
    reader = EntryLogReader(fs, os.path.dirname(log.path), 1)
    try:
        body = reader.read(location_of(log.log_id, offset))
    except CorruptRecordError as exc:
        return str(exc).removeprefix(f"{exc.path} at offset {exc.offset}: ")
    finally:
        reader.close()
    if len(body) < 16:
        return f"record of {len(body)} bytes holds no ledger and entry id"
    if int.from_bytes(body[:8], "big", signed=True) == _MAP_LEDGER_ID:
        return "a ledgers map record that the log's footer does not name"
    return "the scan stopped at a record that reads back whole"


def map_differences(
    log: EntryLogFile, scanned: dict[int, int]
) -> list[tuple[int, int | None, int]]:
    """``(ledger, bytes in the map or None, bytes of its records)`` for each ledger whose
    bytes in the log's map differ from the record bytes the scan found (``scanned``)."""
    meta = log.ledgers_map
    if meta is None:
        return []
    ledgers = sorted(set(meta.ledgers) | set(scanned))
    return [
        (lid, meta.ledgers.get(lid), scanned.get(lid, 0))
        for lid in ledgers
        if meta.ledgers.get(lid) != scanned.get(lid, 0)
    ]
