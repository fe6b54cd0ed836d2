"""Length-prefixed framing of the bookie protocol, sans-IO.

Every message in both directions is a 4-byte big-endian signed length ``N`` (not counting
itself) followed by ``N`` bytes. :class:`FrameDecoder` takes bytes as they arrive
(``receive_data``) and hands out every complete frame (``frames``) as a ``memoryview`` slice
of its buffer, without copying.

Oversized frames: a decoder made with ``skip_frame_bytes_max`` (a bookie's) treats a frame
longer than ``max_frame_bytes`` and at most that long as a request to refuse, not a broken
stream: it keeps the frame's first :data:`OVERSIZED_HEAD_BYTES` bytes as
:attr:`FrameDecoder.oversized` (for its owner to answer from: the header names the request)
and drops the rest of the frame as it arrives, never buffering it. ``frames`` stops at such a
frame; the frames after it come out once the owner cleared ``oversized``. A frame whose first
bytes cannot start an answerable request (a v2 ADD, a v3 ``Request``) is an error at once,
without waiting for the rest of its head.

Invariants: after ``frames`` (or ``keep_tail``) the decoder holds at most
``max_frame_bytes + 4`` bytes of one incomplete frame plus the unread rest of the last chunk
received, and nothing of an oversized frame but its head; a length that is zero, negative or
over ``max_frame_bytes`` (and not skipped) raises :class:`ProtocolError` as soon as its 4
bytes are seen, before any of the body is buffered, and poisons the decoder (the connection
must be closed).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from bkeeper.common.errors import ProtocolError
from bkeeper.common.limits import MAX_FRAME_BYTES_DEFAULT

__all__ = ["LENGTH", "OVERSIZED_HEAD_BYTES", "FrameDecoder", "OversizedFrame", "encode_frame"]

LENGTH = struct.Struct(">i")
_unpack_length = LENGTH.unpack_from


#: Bytes of an oversized frame kept to answer it from: a v2 ADD's header, master key, ledger
#: and entry ids take 40; a v3 request's header and its ADD's ids at most about 60.
OVERSIZED_HEAD_BYTES = 64


def _may_name_a_request(buffer: bytes | bytearray, start: int, end: int) -> bool:
    """Whether the bytes from ``start`` (up to ``end``, as many as arrived) may begin a
    request answerable from its head: a v2 ADD (header version 1 or 2, opcode 1) or a v3
    ``Request`` (its header field's tag, 0x0A). Anything else is refused at once."""
    if end <= start:
        return True  # nothing to tell yet
    first = buffer[start]
    if first == 0x0A:
        return True
    return first in (1, 2) and (end == start + 1 or buffer[start + 1] == 1)


@dataclass(frozen=True, slots=True)
class OversizedFrame:
    """A frame over the decoder's limit that it drops: its length and first bytes."""

    size: int
    head: bytes


def encode_frame(payload: bytes | bytearray | memoryview) -> bytes:
    """``payload`` with its 4-byte length prefix."""
    return LENGTH.pack(len(payload)) + bytes(payload)


class FrameDecoder:
    """Incremental decoder: bytes in, complete frames out."""

    __slots__ = (
        "_buffer",
        "_error",
        "_exported",
        "_max",
        "_offset",
        "_skip",
        "_skip_max",
        "oversized",
        "partial_bytes",
    )

    def __init__(
        self, max_frame_bytes: int = MAX_FRAME_BYTES_DEFAULT, skip_frame_bytes_max: int = 0
    ) -> None:
        """``skip_frame_bytes_max``: frames longer than ``max_frame_bytes`` and at most this
        long are dropped, their head kept in :attr:`oversized` (0: every frame over the limit
        is an error)."""
        if max_frame_bytes <= 0:
            raise ProtocolError(f"max_frame_bytes must be positive, got {max_frame_bytes}")
        self._max = max_frame_bytes
        self._skip_max = skip_frame_bytes_max
        self._buffer = bytearray()
        self._offset = 0
        self._exported = False
        self._error: ProtocolError | None = None
        #: Bytes of the current oversized frame still to drop as they arrive.
        self._skip = 0
        #: The oversized frame at which :meth:`frames` stopped; its owner answers it and sets
        #: this back to None, after which the frames behind it come out.
        self.oversized: OversizedFrame | None = None
        #: Bytes of the incomplete frame held after the last :meth:`frames` (an attribute,
        #: not a property: read once per chunk on the bookie's hot path).
        self.partial_bytes = 0

    @property
    def max_frame_bytes(self) -> int:
        return self._max

    @property
    def buffered_bytes(self) -> int:
        """Bytes received and not yet handed out as frames."""
        return len(self._buffer) - self._offset

    @property
    def skipping_bytes(self) -> int:
        """Bytes of an oversized frame still to be dropped when they arrive."""
        return self._skip

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Add bytes received from the peer."""
        if self._error is not None:
            raise self._error
        if self._skip:
            data = self._drop(data)
            if not data:
                return
        if self._exported:
            # Frames handed out are views of the current buffer, which therefore must not
            # be resized: start a new buffer with the unread rest (at most a partial frame).
            rest = self._buffer[self._offset :]
            rest += data
            self._buffer = rest
            self._offset = 0
            self._exported = False
        else:
            self._buffer += data
        if len(self._buffer) >= 4:
            self._check_length(_unpack_length(self._buffer, 0)[0])

    def frames(self) -> list[memoryview]:
        """Every complete frame received so far (payload without the length prefix), up to
        an oversized frame (then :attr:`oversized` is set, and this returns nothing more
        until it is cleared).

        Each frame is a view of the decoder's buffer; the decoder never writes into a
        buffer once it has handed out views of it, so frames stay valid as long as they are
        referenced.
        """
        if self._error is not None:
            raise self._error
        if self.oversized is not None:
            return []
        buffer = self._buffer
        end = len(buffer)
        offset = self._offset
        out: list[memoryview] = []
        limit = self._max
        if end - offset < 4:
            self.partial_bytes = end - offset
            return out
        if end - offset - 4 < _unpack_length(buffer, offset)[0] <= limit:
            self.partial_bytes = end - offset
            return out
        view = memoryview(buffer)
        while end - offset >= 4:
            (size,) = _unpack_length(buffer, offset)
            if size <= 0 or size > limit:
                self._offset = offset
                offset = self._begin_skip(buffer, offset, size)
                break
            start = offset + 4
            if end - start < size:
                break
            offset = start + size
            out.append(view[start:offset])
        self._offset = offset
        self.partial_bytes = end - offset
        self._exported = True
        return out

    def take_all(self, data: bytes) -> bytes:
        """Everything buffered and ``data``, as one ``bytes`` (``data`` itself when nothing
        is buffered), leaving the decoder empty: for a reader that walks the frames itself
        and hands the unread rest back with :meth:`keep_tail`. Bytes of an oversized frame
        being dropped are dropped first."""
        if self._error is not None:
            raise self._error
        if self._skip:
            data = bytes(self._drop(data))
        buffer = self._buffer
        if self._offset < len(buffer):
            data = b"".join((memoryview(buffer)[self._offset :], data))
        self._buffer = bytearray()
        self._offset = 0
        self._exported = False
        self.partial_bytes = 0
        return data

    def frame_end(self, buffer: bytes, offset: int) -> int:
        """For a reader walking ``buffer`` itself after :meth:`take_all`: where the frame at
        ``offset`` ends (its payload is ``buffer[offset + 4 : end]``), or -1 when it is
        incomplete or its length is bad (:meth:`keep_tail` takes it back and tells which)."""
        end = len(buffer)
        if end - offset < 4:
            return -1
        size: int = _unpack_length(buffer, offset)[0]
        stop = offset + 4 + size
        if size <= 0 or size > self._max or stop > end:
            return -1
        return stop

    def keep_tail(self, buffer: bytes, offset: int) -> None:
        """Keep ``buffer[offset:]`` (less than a whole frame, after :meth:`take_all`) as the
        start of the next frame: its length is checked as :meth:`frames` checks it (an
        oversized frame whose head is there sets :attr:`oversized`; what follows the frame,
        if any, is kept)."""
        end = len(buffer)
        if end - offset >= 4:
            size = _unpack_length(buffer, offset)[0]
            if size <= 0 or size > self._max:
                offset = self._begin_skip(buffer, offset, size)
        if offset < end:
            self._buffer = bytearray(memoryview(buffer)[offset:])
            self.partial_bytes = len(self._buffer)
            if self.oversized is None and self.partial_bytes >= 4:
                self._check_length(_unpack_length(self._buffer, 0)[0])

    def _begin_skip(self, buffer: bytes | bytearray, offset: int, size: int) -> int:
        """The frame at ``offset`` is ``size`` bytes long, over the limit: if it may be
        skipped and its head is in ``buffer``, keep the head in :attr:`oversized`, drop the
        rest and return the offset after the frame (or the buffer's end, the rest to drop
        as it comes); else the offset itself (head incomplete). Raises for a bad length."""
        end = len(buffer)
        start = offset + 4
        if size <= 0 or size > self._skip_max or not _may_name_a_request(buffer, start, end):
            self._check_length(size, skipping=False)
        head_bytes = min(size, OVERSIZED_HEAD_BYTES)
        if end - start < head_bytes:
            return offset
        self.oversized = OversizedFrame(size, bytes(buffer[start : start + head_bytes]))
        stop = start + size
        if stop <= end:
            return stop
        self._skip = stop - end
        return end

    def _drop(self, data: bytes | bytearray | memoryview) -> bytes | bytearray | memoryview:
        """``data`` less the bytes of the oversized frame still to drop."""
        skip = self._skip
        if len(data) <= skip:
            self._skip = skip - len(data)
            return b""
        self._skip = 0
        return memoryview(data)[skip:]

    def _check_length(self, size: int, skipping: bool = True) -> None:
        if 0 < size <= self._max or (skipping and self._max < size <= self._skip_max):
            return
        if size <= 0:
            reason = f"frame length {size} is not positive"
        else:
            reason = f"frame length {size} exceeds the limit of {self._max} bytes"
        self._error = ProtocolError(reason)
        self._buffer = bytearray()
        self._offset = 0
        self.partial_bytes = 0
        raise self._error
