"""The checkpoint file: the root that says what a restart may trust.

``<data_dir>/current/ledgers/checkpoint`` (replaced atomically: temp file, fdatasync, rename,
fsync of the directory) holds 48 bytes, big-endian::

    magic b"BKCP" | version u32 (=1) | journal file id u64 | journal offset u64 |
    index generation u64 | index bytes u64 | flags u32 (1 = limbo) | crc32c u32 of the rest

Invariant: when it names journal position P, every record before P has its effect in the
entry logs (fdatasynced) and in the first ``index bytes`` of the named index file (also
fdatasynced), so replay starts at P. A missing file means a fresh engine.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from crc32c import crc32c

from bkeeper.common.errors import CorruptRecordError
from bkeeper.storage.filesystem import FileSystem, write_file_atomic
from bkeeper.storage.journal import JournalPosition

__all__ = ["CHECKPOINT_FILE_NAME", "CheckpointRecord", "read_checkpoint", "write_checkpoint"]

CHECKPOINT_FILE_NAME = "checkpoint"
MAGIC = b"BKCP"
VERSION = 1
_BODY = struct.Struct(">4sIQQQQI")
_CRC = struct.Struct(">I")
_LIMBO = 1


@dataclass(frozen=True, slots=True)
class CheckpointRecord:
    mark: JournalPosition
    index_generation: int
    index_bytes: int
    limbo: bool

    def encode(self) -> bytes:
        body = _BODY.pack(
            MAGIC,
            VERSION,
            self.mark.file_id,
            self.mark.offset,
            self.index_generation,
            self.index_bytes,
            _LIMBO if self.limbo else 0,
        )
        return body + _CRC.pack(crc32c(body))

    @classmethod
    def decode(cls, data: bytes, path: str) -> CheckpointRecord:
        if len(data) != _BODY.size + _CRC.size:
            raise CorruptRecordError(path, 0, f"checkpoint file has {len(data)} bytes")
        (crc,) = _CRC.unpack_from(data, _BODY.size)
        if crc32c(data[: _BODY.size]) != crc:
            raise CorruptRecordError(path, 0, "checkpoint file fails its checksum")
        magic, version, file_id, offset, generation, index_bytes, flags = _BODY.unpack_from(data)
        if magic != MAGIC or version != VERSION:
            raise CorruptRecordError(path, 0, "bad checkpoint file header")
        mark = JournalPosition(file_id, offset)
        return cls(mark, generation, index_bytes, bool(flags & _LIMBO))


def read_checkpoint(fs: FileSystem, path: str) -> CheckpointRecord | None:
    """The persisted checkpoint, or None when there is none yet."""
    if not fs.exists(path):
        return None
    return CheckpointRecord.decode(fs.read_file(path), path)


def write_checkpoint(fs: FileSystem, path: str, record: CheckpointRecord) -> None:
    write_file_atomic(fs, path, record.encode())
