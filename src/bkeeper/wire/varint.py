"""Protobuf's base-128 varint, the one copy: the v3 packet header, v2's hand-encoded
``AuthMessage``, the length prefix of ledger metadata and the protocol fuzzer all use it."""

from __future__ import annotations

from bkeeper.common.errors import ProtocolError
from bkeeper.wire.messages import BytesLike

__all__ = ["VARINT_BYTES_MAX", "decode_varint", "encode_varint"]

#: A 64-bit value takes at most ten 7-bit groups.
VARINT_BYTES_MAX = 10

_U64 = (1 << 64) - 1


def encode_varint(value: int) -> bytes:
    """The varint of ``value`` (a negative one as its 64-bit two's complement, as protobuf
    encodes negative int32/int64 fields)."""
    value &= _U64
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def decode_varint(data: BytesLike, offset: int) -> tuple[int, int]:
    """The varint at ``offset`` and the offset after it; ``ProtocolError`` when the data ends
    inside it or it runs past :data:`VARINT_BYTES_MAX` bytes."""
    value = shift = 0
    for index in range(offset, min(len(data), offset + VARINT_BYTES_MAX)):
        byte = data[index]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, index + 1
        shift += 7
    raise ProtocolError("truncated or overlong varint")
