"""The v2 responses a client receives, decoded incrementally (:class:`ResponseStream`), with
a fast lane for ADD answers, the bulk of a writer's traffic: no object per answer, and a run
of EOK answers (:mod:`bkeeper.wire.runs`) taken whole. The layouts are :mod:`bkeeper.wire.v2`'s.
"""

from __future__ import annotations

import struct

from bkeeper.common.errors import ProtocolError
from bkeeper.wire.batch_frames import decode_batch_frame
from bkeeper.wire.codes import StatusCode, V2OpCode
from bkeeper.wire.messages import BytesLike, Response
from bkeeper.wire.runs import ADD_ANSWER_BYTES, RUN_ANSWERS_MIN, AddRun, add_run
from bkeeper.wire.v2 import CURRENT_VERSION, decode_response, status_from_rc

__all__ = ["AddAnswer", "ResponseStream"]

_I = struct.Struct(">i")
_ADD_RESPONSE_FRAME = struct.Struct(">iiiqq")
_OP_ADD = int(V2OpCode.ADD_ENTRY)
_OP_BATCH = int(V2OpCode.BATCH_READ_ENTRY)
_EOK = StatusCode.EOK


#: An ADD response as :class:`ResponseStream` returns it: ``(status, ledger id, entry id)``.
AddAnswer = tuple[StatusCode, int, int]


class ResponseStream:
    """Incremental decoder of the responses a bookie sends a v2 client, with a fast lane for
    ADD responses (the bulk of a writer's traffic).

    :meth:`feed` returns two lists, each in arrival order: :data:`AddAnswer` triples
    ``(status, ledger id, entry id)`` for ADD responses (no object built per add), and decoded
    :class:`Response` objects for everything else (BATCH_READ answers as
    ``batch_frames.FramedBatchReadResponse``: bodies left in the frame for the verifier).
    Answers to different requests are independent, so the two lists need no order between
    them. A frame length that is not positive or exceeds ``max_frame_bytes``, or an
    undecodable response, raises
    :class:`ProtocolError`; the stream is unusable afterwards.
    """

    __slots__ = ("_buffer", "_max")

    def __init__(self, max_frame_bytes: int) -> None:
        self._buffer = bytearray()
        self._max = max_frame_bytes

    def feed_runs(self, data: BytesLike) -> tuple[AddRun | None, list[AddAnswer], list[Response]]:
        """:meth:`feed`, with the writer's fast lane: when the whole answers buffered are one
        run of EOK ADD answers (``bkeeper.wire.runs``), that run and two empty lists."""
        buffer = self._buffer
        buffer += data
        whole = len(buffer) // ADD_ANSWER_BYTES * ADD_ANSWER_BYTES
        if whole >= RUN_ANSWERS_MIN * ADD_ANSWER_BYTES:
            with memoryview(buffer) as view, view[:whole] as region:
                run = add_run(region)
            if run is not None:
                del buffer[:whole]
                return run, [], []
        return None, *self._decode_buffered()

    def feed(self, data: BytesLike) -> tuple[list[AddAnswer], list[Response]]:
        self._buffer += data
        return self._decode_buffered()

    def _decode_buffered(self) -> tuple[list[AddAnswer], list[Response]]:
        buffer = self._buffer
        end = len(buffer)
        offset = 0
        adds: list[AddAnswer] = []
        out: list[Response] = []
        add = adds.append
        unpack_add = _ADD_RESPONSE_FRAME.unpack_from
        unpack_length = _I.unpack_from
        limit = self._max
        eok = _EOK
        while end - offset >= 4:
            (size,) = unpack_length(buffer, offset)
            if size <= 0 or size > limit:
                raise ProtocolError(
                    f"frame length {size} is not positive"
                    if size <= 0
                    else f"frame length {size} exceeds the limit of {limit} bytes"
                )
            stop = offset + 4 + size
            if stop > end:
                break
            if size == 24:
                _, head, rc, ledger_id, entry_id = unpack_add(buffer, offset)
                if (head >> 16) & 0xFF == _OP_ADD and (head >> 24) <= CURRENT_VERSION:
                    add((eok if rc == 0 else status_from_rc(rc), ledger_id, entry_id))
                    offset = stop
                    continue
            with memoryview(buffer) as view:
                frame = bytes(view[offset + 4 : stop])
            if (frame[1] == _OP_BATCH) and frame[0] <= CURRENT_VERSION:
                out.append(decode_batch_frame(frame))  # bodies left in the frame
            else:
                out.append(decode_response(frame))
            offset = stop
        if offset:
            del buffer[:offset]
        return adds, out
