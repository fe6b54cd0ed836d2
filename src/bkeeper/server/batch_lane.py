"""The v2 batch lane of a bookie connection (``server.connection``): once a connection speaks
v2 (and is admitted), each chunk's plain adds go to the handlers together, one
:class:`~bkeeper.server.responder.AddBatchAnswer` per run of them, scanned straight into its
parallel lists (``wire.v2_adds.scan_add_requests``) with no object per add; any other frame
goes through the connection's frame handler, in order."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from bkeeper.server.responder import AddBatchAnswer
from bkeeper.wire.framing import FrameDecoder, OversizedFrame, encode_frame
from bkeeper.wire.v2_adds import PLAIN_ADD_FRAME_BYTES_MIN, scan_add_requests

if TYPE_CHECKING:
    from bkeeper.server.config import BookieConfig
    from bkeeper.server.connection import Add, BookieConnection
    from bkeeper.storage import AddBatch

__all__ = ["V2BatchLane"]


class V2BatchLane:
    """The batch lane's part of :class:`~bkeeper.server.connection.BookieConnection`, which
    provides what is declared here."""

    _config: BookieConfig
    _decoder: FrameDecoder
    _collecting: AddBatch
    _add: Add
    _refuse_requests_at: int
    _refuse_bytes_at: int
    requests_in_flight: int
    bytes_in_flight: int
    closed: bool

    def _handle_frame(self, frame: memoryview) -> None:
        raise NotImplementedError

    def _refuse_oversized(self, oversized: OversizedFrame) -> None:
        raise NotImplementedError

    def _chunk_failed(self, exc: Exception) -> None:
        raise NotImplementedError

    def _chunk_done(self) -> None:
        raise NotImplementedError

    def _to_batch_lane(self, frames: list[memoryview]) -> None:
        """Hand ``frames`` (the rest of a chunk) and any partial frame to the batch lane:
        once per connection, after the frame that chose it."""
        oversized = self._decoder.oversized
        if oversized is not None:  # it ended ``frames``; the decoder holds what follows it
            for frame in frames:
                self._handle_frame(frame)
                if self.closed:
                    return
            self._refuse_oversized(oversized)
            if not self.closed:
                self._receive_batch(b"")
            return
        rest = [encode_frame(frame) for frame in frames]
        rest.append(self._decoder.take_all(b""))
        self._receive_batch(b"".join(rest))

    def _receive_batch(self, data: bytes) -> None:
        """The v2 batch lane: the plain adds of the chunk go to ``add`` together (one batch
        per run of them, collected straight into it), any other frame through
        :meth:`_handle_frame`, in order. An oversized frame ends the walk (``keep_tail``
        finds it); it is answered, and the walk goes on after it."""
        decoder = self._decoder
        try:
            while True:
                self._walk_batch(decoder.take_all(data))
                if self.closed:
                    return
                if decoder.oversized is None:
                    break
                self._refuse_oversized(decoder.oversized)
                if self.closed:
                    return
                data = b""
        except Exception as exc:  # (called in the handler: a bug's log keeps its trace)
            self._chunk_failed(exc)
            return
        self._chunk_done()

    def _walk_batch(self, buffer: bytes) -> None:
        """The frames of ``buffer`` for :meth:`_receive_batch`; the rest back to the decoder."""
        max_frame = self._config.max_frame_bytes
        decoder = self._decoder
        offset = 0
        while True:
            stop = decoder.frame_end(buffer, offset)
            if stop < 0:
                break  # incomplete, or a bad length (keep_tail: oversized, or ProtocolError)
            if stop - offset >= PLAIN_ADD_FRAME_BYTES_MIN:
                batch = self._collecting
                offset_after, count, size = scan_add_requests(
                    buffer,
                    offset,
                    max_frame,
                    self._refuse_requests_at - self.requests_in_flight,
                    self._refuse_bytes_at - self.bytes_in_flight,
                    batch.ledger_ids,
                    batch.entry_ids,
                    batch.lacs,
                    batch.master_keys,
                    batch.bodies,
                )
                if count:
                    offset = offset_after
                    self._hand_over(count, size)
                    if self.closed:
                        return
                    continue
            self._handle_frame(memoryview(buffer)[offset + 4 : stop])
            if self.closed:
                return
            offset = stop
        decoder.keep_tail(buffer, offset)

    def _hand_over(self, count: int, size: int) -> None:
        """Hand the ``count`` adds collected (``size`` request bytes) to the handlers as one
        batch; the next adds are collected into a new one."""
        self.requests_in_flight += count
        self.bytes_in_flight += size
        conn = cast("BookieConnection", self)
        self._add(conn, AddBatchAnswer.taking(conn, self._collecting, count, size))
