"""The checkpoint file: the root that says what a restart may trust.

``<first ledger dir>/checkpoint`` (replaced atomically: temp file, fdatasync, rename, fsync
of the directory) holds, big-endian (version 2)::

    magic b"BKCP" | version u32 (=2) | index generation u64 | index bytes u64 |
    flags u32 (1 = limbo, 2 = clean stop) | journal count u16 |
    per journal: file id u64 | offset u64 | key length u16 | key (UTF-8) |
    ledger dir count u16 | per ledger dir: key length u16 | key (UTF-8) |
    crc32c u32 of everything before it

A *key* names a directory (:meth:`bkeeper.storage.dirs.StorageLayout.key`: relative to the
data directory when inside it). Version 1, written before several directories were allowed,
still opens: 48 bytes, ``magic | version u32 (=1) | journal file id u64 | journal offset u64
| index generation u64 | index bytes u64 | flags u32 | crc32c u32``, naming the one journal
``current/journal`` and the one ledger directory ``current/ledgers``.

Invariant: when it names journal position P for a journal, every record of that journal
before P has its effect in the entry logs (fdatasynced) and in the first ``index bytes`` of
the named index file (also fdatasynced), so replay starts at P. A missing file means a fresh
engine.

*Clean stop* (flag 2): written by the last checkpoint of ``Storage.close``, after every
journal was closed and flushed, so its marks are at the end of every journal: the next open
has nothing to replay (it says so). The flag informs and is never trusted to skip replay
(replay from the marks reads nothing then anyway; a run whose first checkpoint failed on a
full disk leaves the flag while its journal grows, and that is replayed). Any checkpoint of
the next run clears it. Readers that predate it ignore the flag.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import NamedTuple

from crc32c import crc32c

from bkeeper.common.errors import CorruptRecordError
from bkeeper.storage.filesystem import FileSystem, write_file_atomic
from bkeeper.storage.journal import JournalPosition

__all__ = [
    "CHECKPOINT_FILE_NAME",
    "CheckpointRecord",
    "JournalMark",
    "read_checkpoint",
    "write_checkpoint",
]

CHECKPOINT_FILE_NAME = "checkpoint"
MAGIC = b"BKCP"
VERSION = 2
_V1_BODY = struct.Struct(">4sIQQQQI")
_HEAD = struct.Struct(">4sIQQI")
_COUNT = struct.Struct(">H")
_MARK = struct.Struct(">QQH")
_CRC = struct.Struct(">I")
_LIMBO = 1
_CLEAN = 2
#: The keys of the directories of a version-1 checkpoint.
V1_JOURNAL_KEY = os.path.join("current", "journal")
V1_LEDGER_KEY = os.path.join("current", "ledgers")


class JournalMark(NamedTuple):
    """Where replay of one journal starts: its directory's key and a group boundary."""

    key: str
    position: JournalPosition


@dataclass(frozen=True, slots=True)
class CheckpointRecord:
    marks: tuple[JournalMark, ...]
    index_generation: int
    index_bytes: int
    limbo: bool
    ledger_dirs: tuple[str, ...] = (V1_LEDGER_KEY,)
    #: Written by a clean stop (see the module doc).
    clean: bool = False

    @property
    def mark(self) -> JournalPosition:
        """The mark of the first journal (the only one before several were allowed)."""
        return self.marks[0].position

    def mark_of(self, key: str) -> JournalPosition | None:
        """The mark of the journal of the directory ``key``, None if it has none."""
        for mark in self.marks:
            if mark.key == key:
                return mark.position
        return None

    def encode(self) -> bytes:
        flags = (_LIMBO if self.limbo else 0) | (_CLEAN if self.clean else 0)
        parts = [_HEAD.pack(MAGIC, VERSION, self.index_generation, self.index_bytes, flags)]
        parts.append(_COUNT.pack(len(self.marks)))
        for key, position in self.marks:
            raw = key.encode()
            parts += [_MARK.pack(position.file_id, position.offset, len(raw)), raw]
        parts.append(_COUNT.pack(len(self.ledger_dirs)))
        for key in self.ledger_dirs:
            raw = key.encode()
            parts += [_COUNT.pack(len(raw)), raw]
        body = b"".join(parts)
        return body + _CRC.pack(crc32c(body))

    @classmethod
    def decode(cls, data: bytes, path: str) -> CheckpointRecord:
        if len(data) < _HEAD.size + _CRC.size:
            raise CorruptRecordError(path, 0, f"checkpoint file has {len(data)} bytes")
        body = data[: -_CRC.size]
        (crc,) = _CRC.unpack_from(data, len(body))
        if crc32c(body) != crc:
            raise CorruptRecordError(path, 0, "checkpoint file fails its checksum")
        magic, version = struct.unpack_from(">4sI", body)
        if magic != MAGIC or version not in (1, VERSION):
            raise CorruptRecordError(path, 0, "bad checkpoint file header")
        try:
            return _decode_v1(body) if version == 1 else _decode_v2(body)
        except (struct.error, UnicodeDecodeError, ValueError) as exc:
            raise CorruptRecordError(path, 0, f"bad checkpoint file: {exc}") from exc


def _decode_v1(body: bytes) -> CheckpointRecord:
    if len(body) != _V1_BODY.size:
        raise ValueError(f"{len(body)} bytes before the checksum, not {_V1_BODY.size}")
    _, _, file_id, offset, generation, index_bytes, flags = _V1_BODY.unpack(body)
    marks = (JournalMark(V1_JOURNAL_KEY, JournalPosition(file_id, offset)),)
    return CheckpointRecord(marks, generation, index_bytes, bool(flags & _LIMBO))


def _decode_v2(body: bytes) -> CheckpointRecord:
    _, _, generation, index_bytes, flags = _HEAD.unpack_from(body)
    at = _HEAD.size
    (count,) = _COUNT.unpack_from(body, at)
    at += _COUNT.size
    marks = []
    for _ in range(count):
        file_id, offset, length = _MARK.unpack_from(body, at)
        at += _MARK.size
        key = body[at : at + length].decode()
        at += length
        marks.append(JournalMark(key, JournalPosition(file_id, offset)))
    (count,) = _COUNT.unpack_from(body, at)
    at += _COUNT.size
    ledger_dirs = []
    for _ in range(count):
        (length,) = _COUNT.unpack_from(body, at)
        at += _COUNT.size
        ledger_dirs.append(body[at : at + length].decode())
        at += length
    if at != len(body) or not marks or not ledger_dirs:
        raise ValueError("its lists do not add up to its length")
    return CheckpointRecord(
        tuple(marks),
        generation,
        index_bytes,
        bool(flags & _LIMBO),
        tuple(ledger_dirs),
        clean=bool(flags & _CLEAN),
    )


def read_checkpoint(fs: FileSystem, path: str) -> CheckpointRecord | None:
    """The persisted checkpoint, or None when there is none yet."""
    if not fs.exists(path):
        return None
    return CheckpointRecord.decode(fs.read_file(path), path)


def write_checkpoint(fs: FileSystem, path: str, record: CheckpointRecord) -> None:
    write_file_atomic(fs, path, record.encode())
