"""BATCH_READ answers as the client decodes them: the frame kept whole, its bodies not split.

:func:`decode_batch_frame` reads a v2 BATCH_READ response's fixed fields and keeps the frame
(:class:`FramedBatchReadResponse`, a :class:`BatchReadResponse` whose ``bodies`` stays empty);
``DigestManager.verify_batch_frame`` then walks the length-prefixed bodies and checks each
digest in the same pass, one unpack per entry for its length, header and digest, instead of
a view per body here and a second pass over them there. Other readers of the frame (tests,
tools) get the bodies of any BATCH_READ answer, framed or not, from :func:`batch_bodies`.

Layout after the packet header: rc (4) | ledger id (8) | start entry id (8) | request id (8)
| repeated (length (4), body).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from bkeeper.common.errors import ProtocolError
from bkeeper.wire.codes import V2_TO_STATUS
from bkeeper.wire.messages import BatchReadResponse

__all__ = [
    "BODIES_AT",
    "FramedBatchReadResponse",
    "batch_bodies",
    "decode_batch_frame",
    "split_bodies",
]

_FIXED = struct.Struct(">iiqqq")  # header, rc, ledger id, start entry id, request id
_I = struct.Struct(">i")
#: Where the first body's length is, from the start of the frame (without its length).
BODIES_AT = _FIXED.size


@dataclass(frozen=True, slots=True)
class FramedBatchReadResponse(BatchReadResponse):
    """A BATCH_READ answer with its bodies still in ``frame``, from :data:`BODIES_AT`."""

    frame: memoryview | None = None


def decode_batch_frame(frame: bytes | memoryview) -> FramedBatchReadResponse:
    """The fixed fields of a v2 BATCH_READ response ``frame`` (without its length)."""
    view = frame if isinstance(frame, memoryview) else memoryview(frame)
    if len(view) < BODIES_AT:
        raise ProtocolError(
            f"v2 BATCH_READ response of {len(view)} bytes is shorter than {BODIES_AT}"
        )
    _, rc, ledger_id, start, request_id = _FIXED.unpack_from(view)
    status = V2_TO_STATUS.get(rc)
    if status is None:
        raise ProtocolError(f"v2 error code {rc} is not known")
    return FramedBatchReadResponse(status, ledger_id, start, request_id, frame=view)


def split_bodies(
    frame: memoryview, pos: int = BODIES_AT, limit: int | None = None
) -> list[memoryview]:
    """The bodies of a BATCH_READ response frame from ``pos`` (the first ``limit``), as
    views; a cut or overrunning length raises :class:`ProtocolError`."""
    bodies: list[memoryview] = []
    end = len(frame)
    while pos < end and (limit is None or len(bodies) < limit):
        if end - pos < 4:
            raise ProtocolError(f"v2 BATCH_READ response entry length cut at byte {pos}")
        (size,) = _I.unpack_from(frame, pos)
        pos += 4
        stop = pos + size
        if size < 0 or stop > end:
            raise ProtocolError(f"BATCH_READ response entry of {size} bytes overruns the frame")
        bodies.append(frame[pos:stop])
        pos = stop
    return bodies


def batch_bodies(response: BatchReadResponse) -> list[memoryview] | tuple[object, ...]:
    """The bodies of a BATCH_READ answer, whether its bodies are split (v3, the in-memory
    cluster) or still in its frame (v2 over TCP: :class:`FramedBatchReadResponse`)."""
    if isinstance(response, FramedBatchReadResponse) and response.frame is not None:
        return split_bodies(response.frame)
    return response.bodies
