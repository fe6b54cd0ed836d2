"""Length-prefixed framing of the bookie protocol, sans-IO.

Every message in both directions is a 4-byte big-endian signed length ``N`` (not counting
itself) followed by ``N`` bytes. :class:`FrameDecoder` takes bytes as they arrive
(``receive_data``) and hands out every complete frame (``frames``) as a ``memoryview`` slice
of its buffer, without copying.

Invariants: the decoder never holds more than ``max_frame_bytes + 4`` bytes of one incomplete
frame plus the unread rest of the last chunk received; a length that is zero, negative or
over ``max_frame_bytes`` raises :class:`ProtocolError` as soon as its 4 bytes are seen, before
any of the body is buffered, and poisons the decoder (the connection must be closed).
"""

from __future__ import annotations

import struct

from bkeeper.common.errors import ProtocolError
from bkeeper.common.limits import MAX_FRAME_BYTES_DEFAULT

__all__ = ["LENGTH", "FrameDecoder", "encode_frame"]

LENGTH = struct.Struct(">i")
_unpack_length = LENGTH.unpack_from


def encode_frame(payload: bytes | bytearray | memoryview) -> bytes:
    """``payload`` with its 4-byte length prefix."""
    return LENGTH.pack(len(payload)) + bytes(payload)


class FrameDecoder:
    """Incremental decoder: bytes in, complete frames out."""

    __slots__ = ("_buffer", "_error", "_exported", "_max", "_offset", "partial_bytes")

    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES_DEFAULT) -> None:
        if max_frame_bytes <= 0:
            raise ProtocolError(f"max_frame_bytes must be positive, got {max_frame_bytes}")
        self._max = max_frame_bytes
        self._buffer = bytearray()
        self._offset = 0
        self._exported = False
        self._error: ProtocolError | None = None
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

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Add bytes received from the peer."""
        if self._error is not None:
            raise self._error
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
        """Every complete frame received so far (payload without the length prefix).

        Each frame is a view of the decoder's buffer; the decoder never writes into a
        buffer once it has handed out views of it, so frames stay valid as long as they are
        referenced.
        """
        if self._error is not None:
            raise self._error
        buffer = self._buffer
        end = len(buffer)
        offset = self._offset
        out: list[memoryview] = []
        if end - offset < 4 or end - offset - 4 < _unpack_length(buffer, offset)[0]:
            self.partial_bytes = end - offset
            return out
        view = memoryview(buffer)
        limit = self._max
        while end - offset >= 4:
            (size,) = _unpack_length(buffer, offset)
            if size <= 0 or size > limit:
                self._offset = offset
                self._check_length(size)
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
        and hands the unread rest back with :meth:`keep_tail`."""
        if self._error is not None:
            raise self._error
        buffer = self._buffer
        if self._offset < len(buffer):
            data = b"".join((memoryview(buffer)[self._offset :], data))
        self._buffer = bytearray()
        self._offset = 0
        self._exported = False
        self.partial_bytes = 0
        return data

    def keep_tail(self, buffer: bytes, offset: int) -> None:
        """Keep ``buffer[offset:]`` (less than a whole frame, after :meth:`take_all`) as the
        start of the next frame: its length is checked as :meth:`receive_data` checks it."""
        if offset < len(buffer):
            self._buffer = bytearray(memoryview(buffer)[offset:])
            self.partial_bytes = len(self._buffer)
            if self.partial_bytes >= 4:
                self._check_length(_unpack_length(self._buffer, 0)[0])

    def _check_length(self, size: int) -> None:
        if 0 < size <= self._max:
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
