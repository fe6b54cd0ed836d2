"""The journal's on-disk format: file header, groups and records (pure codec, no I/O).

A journal file ``<file id as 16 hex digits>.txn`` is::

    file header  16 bytes: magic b"BKJN" | version u32 (=1) | file id u64
    group*       one per write+fdatasync

A group is a GROUP record (see :mod:`bkeeper.storage.framing` for the record frame) whose
16-byte payload is ``seq u64 | bytes u32 | count u32``: the group's number within the file
(0, 1, 2, ...), then the byte length and number of the records that follow it. The records::

    kind  name           payload
    1     ADD_ENTRY      the entry body (begins ledgerId i64 | entryId i64 | LAC i64 | ...)
    2     MASTER_KEY     ledgerId i64 | master key
    3     FENCE          ledgerId i64
    4     EXPLICIT_LAC   ledgerId i64 | the WRITE_LAC body (ledgerId | LAC | digest)
    5     FORCE_LEDGER   ledgerId i64
    6     DELETE_LEDGER  ledgerId i64

Invariants: a group is written with one write and made durable with one fdatasync before any
of its records is acknowledged, so only the last group of the newest file can be torn by a
crash; groups never span files; every offset the engine remembers (the checkpoint mark) is a
group boundary.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from bkeeper.storage.filesystem import numbered_file_name, numbered_file_number
from bkeeper.storage.framing import (
    RECORD_HEADER_BYTES,
    FrameStatus,
    decode_frame,
    encode_frame,
)

__all__ = [
    "FILE_HEADER_BYTES",
    "GROUP_HEADER_BYTES",
    "JOURNAL_KINDS",
    "GroupHeader",
    "JournalRecord",
    "RecordKind",
    "decode_group_header",
    "decode_record",
    "encode_file_header",
    "encode_group_header",
    "file_header_ok",
    "journal_file_id",
    "journal_file_name",
    "ledger_record",
]

MAGIC = b"BKJN"
VERSION = 1
_FILE_HEADER = struct.Struct(">4sIQ")
FILE_HEADER_BYTES = _FILE_HEADER.size
_GROUP = struct.Struct(">QII")
GROUP_HEADER_BYTES = RECORD_HEADER_BYTES + _GROUP.size
_LEDGER = struct.Struct(">q")
_ENTRY_HEAD = struct.Struct(">qqq")
SUFFIX = ".txn"


class RecordKind(enum.IntEnum):
    GROUP = 0
    ADD_ENTRY = 1
    MASTER_KEY = 2
    FENCE = 3
    EXPLICIT_LAC = 4
    FORCE_LEDGER = 5
    DELETE_LEDGER = 6


JOURNAL_KINDS = frozenset(int(k) for k in RecordKind)
_RECORD_KINDS = JOURNAL_KINDS - {int(RecordKind.GROUP)}
_GROUP_KINDS = frozenset({int(RecordKind.GROUP)})


def journal_file_name(file_id: int) -> str:
    return numbered_file_name(file_id, SUFFIX)


def journal_file_id(name: str) -> int | None:
    """The number in a file name of this kind, or None for any other file."""
    return numbered_file_number(name, SUFFIX)


def encode_file_header(file_id: int) -> bytes:
    return _FILE_HEADER.pack(MAGIC, VERSION, file_id)


def file_header_ok(data: bytes, file_id: int) -> bool:
    if len(data) < FILE_HEADER_BYTES:
        return False
    magic, version, stored_id = _FILE_HEADER.unpack_from(data)
    return bool(magic == MAGIC and version == VERSION and stored_id == file_id)


@dataclass(frozen=True, slots=True)
class GroupHeader:
    seq: int
    records_bytes: int
    count: int


def encode_group_header(seq: int, records_bytes: int, count: int) -> bytes:
    return encode_frame(RecordKind.GROUP, _GROUP.pack(seq, records_bytes, count))


def decode_group_header(data: bytes, offset: int) -> GroupHeader | str:
    """The group header at ``offset``, or why there is none."""
    frame = decode_frame(data, offset, _GROUP_KINDS)
    if frame.status is not FrameStatus.OK:
        return frame.reason
    if len(frame.payload) != _GROUP.size:
        return "bad group header length"
    return GroupHeader(*_GROUP.unpack(frame.payload))


def ledger_record(kind: RecordKind, ledger_id: int, tail: bytes = b"") -> bytes:
    """A framed MASTER_KEY / FENCE / EXPLICIT_LAC / FORCE_LEDGER / DELETE_LEDGER record."""
    return encode_frame(kind, _LEDGER.pack(ledger_id) + tail)


@dataclass(frozen=True, slots=True)
class JournalRecord:
    """One decoded record: ``data`` is the entry body (ADD_ENTRY) or the bytes after the
    ledger id (MASTER_KEY: the key; EXPLICIT_LAC: the LAC body), else empty."""

    kind: RecordKind
    ledger_id: int
    entry_id: int
    data: bytes
    offset: int


def decode_record(data: bytes, offset: int) -> tuple[JournalRecord | None, int, str]:
    """``(record, end, "")`` for the record at ``offset``, or ``(None, end, reason)`` when it
    is damaged; ``end`` is where the next record starts, -1 when the length is untrusted."""
    frame = decode_frame(data, offset, _RECORD_KINDS)
    if frame.status is not FrameStatus.OK:
        return None, frame.end, frame.reason
    kind = RecordKind(frame.kind)
    payload = frame.payload
    if kind is RecordKind.ADD_ENTRY:
        if len(payload) < _ENTRY_HEAD.size:
            return None, frame.end, "entry body shorter than its header"
        ledger_id, entry_id, _ = _ENTRY_HEAD.unpack_from(payload)
        return JournalRecord(kind, ledger_id, entry_id, payload, offset), frame.end, ""
    if len(payload) < _LEDGER.size:
        return None, frame.end, "record shorter than a ledger id"
    (ledger_id,) = _LEDGER.unpack_from(payload)
    return JournalRecord(kind, ledger_id, -1, payload[_LEDGER.size :], offset), frame.end, ""
