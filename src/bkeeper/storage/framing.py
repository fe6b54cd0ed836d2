"""Checksummed record framing shared by the journal and the index files (pure, no I/O).

A framed record is a 9-byte header then the payload::

    length  u32  big-endian, bytes of payload
    kind    u8   what the payload is (each file format defines its kinds)
    crc     u32  big-endian CRC-32C of (length, kind, payload), i.e. of the first 5 header
                 bytes followed by the payload

A reader checks the length against the bytes it has (short -> ``TRUNCATED``) and against
``RECORD_PAYLOAD_BYTES_MAX`` and the checksum (-> ``CORRUPT``); only a record that passes both
is handed on.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from crc32c import crc32c

__all__ = [
    "RECORD_HEADER",
    "RECORD_HEADER_BYTES",
    "RECORD_PAYLOAD_BYTES_MAX",
    "Frame",
    "FrameStatus",
    "decode_frame",
    "encode_frame",
    "frame_header",
]

RECORD_HEADER = struct.Struct(">IBI")
RECORD_HEADER_BYTES = RECORD_HEADER.size
_PREFIX = struct.Struct(">IB")
_CRC = struct.Struct(">I")

#: No record payload is larger than this: a frame claiming more is corrupt. Entries are at
#: most a 5 MiB frame; index records are split well below this.
RECORD_PAYLOAD_BYTES_MAX = 64 * 1024 * 1024


def frame_header(kind: int, payload: bytes | bytearray | memoryview) -> bytes:
    """The 9-byte header framing ``payload`` as a record of ``kind``."""
    prefix = _PREFIX.pack(len(payload), kind)
    return prefix + _CRC.pack(crc32c(payload, crc32c(prefix)))


def encode_frame(kind: int, payload: bytes) -> bytes:
    """Header and payload of one record."""
    return frame_header(kind, payload) + payload


class FrameStatus(enum.Enum):
    OK = "ok"
    TRUNCATED = "truncated"
    CORRUPT = "corrupt"


@dataclass(frozen=True, slots=True)
class Frame:
    """The outcome of decoding one record at ``offset`` of a buffer."""

    status: FrameStatus
    offset: int
    kind: int = -1
    payload: bytes = b""
    reason: str = ""
    length: int = -1

    @property
    def end(self) -> int:
        """Offset just past this record; -1 when its length cannot be trusted."""
        return self.offset + RECORD_HEADER_BYTES + self.length if self.length >= 0 else -1


def decode_frame(buffer: bytes, offset: int, kinds: frozenset[int]) -> Frame:
    """Decode the record at ``offset``; ``kinds`` are the kinds the file format allows."""
    if len(buffer) - offset < RECORD_HEADER_BYTES:
        return Frame(FrameStatus.TRUNCATED, offset, reason="short record header")
    length, kind, crc = RECORD_HEADER.unpack_from(buffer, offset)
    if kind not in kinds or length > RECORD_PAYLOAD_BYTES_MAX:
        return Frame(FrameStatus.CORRUPT, offset, reason=f"bad header (kind {kind}, {length} B)")
    start = offset + RECORD_HEADER_BYTES
    if len(buffer) - start < length:
        return Frame(FrameStatus.TRUNCATED, offset, kind, reason="short record payload")
    payload = buffer[start : start + length]
    if crc32c(payload, crc32c(buffer[offset : offset + 5])) != crc:
        # The header looked sane, so a reader that skips corrupt records may trust the length.
        return Frame(FrameStatus.CORRUPT, offset, kind, reason="checksum mismatch", length=length)
    return Frame(FrameStatus.OK, offset, kind, payload, length=length)
