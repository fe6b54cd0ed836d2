"""Protocol detection: the first frame of a connection decides v3 or v2 for its whole life.

Apache BookKeeper's bookie tries to parse the first frame as a v3 ``Request`` and falls back
to v2 for good when that fails. The same decision follows from the first byte alone: a v3
``Request`` is a protobuf message whose first field is the required ``header`` (field 1,
length-delimited), so it begins with the tag byte ``0x0A``; a v2 packet begins with its
header int, whose top byte is the protocol version (0, 1 or 2). The two never overlap.
"""

from __future__ import annotations

from bkeeper.common.errors import ProtocolError
from bkeeper.wire.codes import Protocol
from bkeeper.wire.messages import BytesLike

__all__ = ["detect_protocol"]

_V3_FIRST_BYTE = 0x0A
_V2_VERSIONS = (0, 1, 2)


def detect_protocol(first_frame: BytesLike) -> Protocol:
    """v3 or v2, from the first frame of a connection (without its length prefix)."""
    if not first_frame:
        raise ProtocolError("empty first frame")
    first = first_frame[0]
    if first == _V3_FIRST_BYTE:
        return Protocol.V3
    if first in _V2_VERSIONS:
        return Protocol.V2
    raise ProtocolError(f"first frame starts with byte 0x{first:02x}: neither v2 nor v3")
