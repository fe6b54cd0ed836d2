"""One client connection of a bookie: an asyncio ``Protocol`` around the sans-IO codecs.

The first frame decides the protocol (v3 or v2) for the life of the connection. Requests
are pipelined: each decoded request goes to the handlers at once (the adds of a chunk
together: v2 ones through the batch lane, ``server.batch_lane``; v3 ones gathered,
``server.v3_adds``, and handed over before any other request), and responses may leave in
another order than requests came (v3 clients match on txn id, v2 clients on ledger, entry and
operation). Responses are gathered and written once per event-loop iteration.

Limits: at ``connection_requests_in_flight_max`` requests or ``connection_bytes_in_flight_max``
request bytes in flight the connection stops reading (back-pressure); requests already read
beyond twice those limits are answered ETOOMANYREQUESTS. A malformed frame closes the
connection with one logged line (peer and reason, rate-limited, no traceback); the bookie
itself stays up. A frame over ``max_frame_bytes`` (up to ``OVERSIZED_FRAME_SKIP_BYTES_MAX``)
whose first bytes name the request (a v2 ADD; any v3 request) is answered EBADREQ from them,
its body dropped as it arrives (never buffered), and the connection goes on (counted in
``ConnectionTable.oversized_frames``, logged through its ``request_log``); one over that, or
not answerable so, or on a connection not yet admitted, closes the connection.

Bookie-wide limits (connection count, handshake and idle timeouts, the budget of
incomplete frames) live in :class:`~bkeeper.server.connections.ConnectionTable`:
the connection reports to it only what it cannot see itself, once per chunk received and
batch written (an ``active`` mark, and the size of its incomplete frame), never per request.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, cast

from bkeeper.common.errors import ProtocolError
from bkeeper.common.limits import OVERSIZED_FRAME_SKIP_BYTES_MAX
from bkeeper.common.tasks import TaskOwner
from bkeeper.server.batch_lane import V2BatchLane
from bkeeper.server.responder import AddBatchAnswer
from bkeeper.server.security import BookieSecurity, ConnectionSecurity
from bkeeper.server.v3_adds import V3AddGatherer
from bkeeper.storage import AddBatch
from bkeeper.wire import v2, v3
from bkeeper.wire.codes import Protocol, StatusCode
from bkeeper.wire.detect import detect_protocol
from bkeeper.wire.framing import FrameDecoder, OversizedFrame
from bkeeper.wire.messages import AddRequest, Request, Response
from bkeeper.wire.v2_adds import add_response_frames

if TYPE_CHECKING:
    from bkeeper.server.config import BookieConfig
    from bkeeper.server.connections import ConnectionTable

__all__ = ["BookieConnection"]

log = logging.getLogger(__name__)

Dispatch = Callable[["BookieConnection", Request, int], None]
#: (connection, batch): v2 adds, a chunk's plain ones together (``RequestHandlers.add``).
Add = Callable[["BookieConnection", AddBatchAnswer], None]
#: (status, ledger id, entry id, txn id) -> an ADD response frame, in the connection's protocol.
_EncodeAdd = Callable[[StatusCode, int, int, int], bytes]


class BookieConnection(V2BatchLane, asyncio.Protocol):
    """Reads frames, hands requests to ``dispatch`` (v2 adds to ``add`` as one
    :class:`AddBatchAnswer`, without a request object) and writes responses in batches. It
    is the handlers' ``Responder``.

    With ``security`` (TLS or authentication on; ``bkeeper.server.security``) requests go
    through its checks first, and v2 adds are refused EUA until the connection is admitted
    (authenticated, and encrypted if TLS is required); after that v2 adds go straight to
    ``add`` again. Without it nothing is checked (no cost on the add lane)."""

    def __init__(
        self,
        config: BookieConfig,
        table: ConnectionTable,
        dispatch: Dispatch,
        add: Add,
        security: BookieSecurity | None = None,
    ) -> None:
        self._config = config
        self._table = table
        self._dispatch = dispatch
        self._add = add
        #: Whether chunks go through the batch lane (v2, and admitted).
        self._batch_lane = False
        #: The adds the batch lane collects (empty between chunks; no reference back to the
        #: connection, which a closed connection's buffers would wait on the GC for).
        self._collecting = AddBatch()
        #: The v3 adds of the chunk being read, handed over together.
        self._v3_adds = V3AddGatherer()
        self.security: ConnectionSecurity | None = None
        if security is not None:
            self.security = ConnectionSecurity(security, self)
            self._handlers_dispatch = dispatch
            self._handlers_add = add
            self._dispatch = self._secure_dispatch
            if not self.security.admitted:
                self._add = self._refuse_add
        #: The TLS upgrade's task (START_TLS), cancelled once the connection is lost.
        self._tasks = TaskOwner("bookie connection")
        self._v2 = False
        self._decoder = FrameDecoder(config.max_frame_bytes, OVERSIZED_FRAME_SKIP_BYTES_MAX)
        self._transport: asyncio.Transport | None = None
        self._loop = asyncio.get_running_loop()
        self.protocol: Protocol | None = None
        self._decode: Callable[[Any], Request] = v3.decode_request
        self._encode: Callable[[Any], bytes] = v3.encode_response_frame
        self._encode_add: _EncodeAdd = v3.add_response_frame
        # Requests read beyond twice the in-flight limits are refused, not queued.
        self._refuse_requests_at = 2 * config.connection_requests_in_flight_max
        self._refuse_bytes_at = 2 * config.connection_bytes_in_flight_max
        self._out: list[bytes] = []
        self._flush_scheduled = False
        self._reading_paused = False
        self._writing_paused = False
        self.requests_in_flight = 0
        self.bytes_in_flight = 0
        self.closed = False
        self.peer = "?"
        # Kept for the connection table: see its module doc.
        self.active = False
        self.last_seen = self.accepted_at = 0.0
        self.partial_bytes = 0

    @property
    def handshaken(self) -> bool:
        return self.protocol is not None

    @property
    def busy(self) -> bool:
        return self.requests_in_flight > 0 or self._flush_scheduled

    # -- asyncio callbacks -------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement the Transport interface without subclassing it.
        self._transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        if self.closed or not self._table.admit(self):  # bookie stopping, or refused
            self.closed = True
            self._transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._table.discard(self)
        self._tasks.cancel()

    def pause_writing(self) -> None:
        self._writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._update_reading()

    def data_received(self, data: bytes) -> None:
        self.active = True
        if self._batch_lane:
            self._receive_batch(data)
            return
        decoder = self._decoder
        try:
            decoder.receive_data(data)
            while True:
                frames = decoder.frames()
                for at, frame in enumerate(frames):
                    self._handle_frame(frame)
                    if self.closed:
                        return
                    if self._batch_lane:  # chosen by this frame (v2, or admitted): the rest too
                        self._to_batch_lane(frames[at + 1 :])
                        return
                if decoder.oversized is None:
                    break
                self._refuse_oversized(decoder.oversized)  # ended the frames: the rest follow
                if self.closed:
                    return
                if self._batch_lane:  # chosen by the oversized frame, the connection's first
                    self._receive_batch(b"")
                    return
            self._hand_over_v3_adds()
        except Exception as exc:  # (called in the handler: a bug's log keeps its trace)
            self._chunk_failed(exc)
            return
        self._chunk_done()

    def _chunk_failed(self, exc: Exception) -> None:
        """A chunk's frames failed: a bad frame ends the connection; anything else is a bookie
        bug found by this client, logged (rate-limited) before the connection ends."""
        self._v3_adds.take()  # (dropped: the connection ends, they go unanswered)
        if isinstance(exc, ProtocolError):
            self.abort(f"bad frame: {exc}")
            return
        self.log_internal_error("request from %s failed", self.peer)
        self.abort(f"internal error: {exc!r}")

    def _chunk_done(self) -> None:
        """A chunk handled: the table learns the partial frame's size, reading follows."""
        partial = self._decoder.partial_bytes
        if partial != self.partial_bytes:
            self._table.partial_changed(self, partial)
            if self.closed:
                return
        self._update_reading()

    # -- requests ----------------------------------------------------------------------
    def _handle_frame(self, frame: memoryview) -> None:
        if self.protocol is None:
            self._choose_protocol(frame)  # ProtocolError: not v2/v3 v2 nor v3, caught above
        add = v2.peek_add_request(frame) if self._v2 else None
        if add is None:
            try:
                request = self._decode(frame)
            except ProtocolError as exc:
                self.abort(f"bad request: {exc}")
                return
        size = len(frame)
        if (
            self.requests_in_flight >= self._refuse_requests_at
            or self.bytes_in_flight >= self._refuse_bytes_at
        ):
            size = -1  # not counted: the handler answers ETOOMANYREQUESTS
        else:
            self.requests_in_flight += 1
            self.bytes_in_flight += size
        if add is not None:
            self._add(self, AddBatchAnswer.single(self, *add, 0, size))
        elif type(request) is AddRequest and size >= 0 and self._gathers(request, size):
            return
        else:
            self._hand_over_v3_adds()  # (what came before goes first)
            self._dispatch(self, request, size)

    def _gathers(self, request: AddRequest, size: int) -> bool:
        """Gather a v3 add (``server.v3_adds``) unless the connection is not admitted."""
        security = self.security
        if security is not None and (not security.admitted or security.upgrading):
            return False
        if not self._v3_adds.takes(request):
            self._hand_over_v3_adds()
        return self._v3_adds.gather(self, request, size)

    def _hand_over_v3_adds(self) -> None:
        batch = self._v3_adds.take()
        if batch is not None:
            self._add(self, batch)

    def _choose_protocol(self, frame: memoryview) -> None:
        self.protocol = detect_protocol(frame)
        self._speak(self.protocol is Protocol.V2)
        log.debug("connection %s speaks %s", self.peer, self.protocol.name)

    def _speak(self, v2_protocol: bool) -> None:
        """Decode and encode in v2 or in v3 (the batch lane for v2, once admitted)."""
        codec = v2 if v2_protocol else v3
        self._decode = codec.decode_request
        self._encode = codec.encode_response_frame
        self._encode_add = codec.add_response_frame
        self._v2 = v2_protocol
        self._batch_lane = v2_protocol and (self.security is None or self.security.admitted)

    def _refuse_oversized(self, oversized: OversizedFrame) -> None:
        """Answer the request of a frame over ``max_frame_bytes`` EBADREQ from its first bytes
        (the decoder drops the rest), or close the connection when they do not tell what to
        answer, or when the connection is not admitted yet (authentication first)."""
        self._decoder.oversized = None
        limit = self._config.max_frame_bytes
        reason = f"frame length {oversized.size} exceeds the limit of {limit} bytes"
        if self.protocol is None:
            self._choose_protocol(memoryview(oversized.head))  # ProtocolError: not v2/v3
        codec = v2 if self._v2 else v3
        answer = codec.oversized_answer_frame(oversized.head, StatusCode.EBADREQ)
        if answer is None or (self.security is not None and not self.security.admitted):
            self.abort(f"bad frame: {reason}")
            return
        self._table.oversized_frames.value += 1
        self.log_client_error("EBADREQ to %s: %s (max_frame_bytes)", self.peer, reason)
        self._queue(answer, -1)

    # -- security (only with ``security``) ------------------------------------------------
    def _secure_dispatch(self, conn: BookieConnection, request: Request, size: int) -> None:
        assert self.security is not None
        if not self.security.dispatch(request, size):
            self._handlers_dispatch(self, request, size)

    def _refuse_add(self, conn: BookieConnection, batch: AddBatchAnswer) -> None:
        assert self.security is not None
        for index in range(len(batch.entry_ids)):
            self.security.refuse()
            size = batch.request_bytes_of(index)
            txn_id = batch.txn_id_of(index)
            self.respond_add(
                StatusCode.EUA, batch.ledger_ids[index], batch.entry_ids[index], txn_id, size
            )

    def admitted(self) -> None:
        """The connection is authenticated (and encrypted if required): v2 adds go straight
        to the handlers from now on."""
        self._add = self._handlers_add
        self._batch_lane = self._v2

    @property
    def queued_responses(self) -> bool:
        return bool(self._out)

    def write_now(self, frame: bytes, request_bytes: int) -> None:
        """Write ``frame`` at once, after anything queued (START_TLS's answer)."""
        self.requests_in_flight -= 1
        self.bytes_in_flight -= request_bytes
        self._flush()
        if self._transport is not None and not self.closed:
            self._transport.write(frame)

    def spawn_upgrade(self, upgrade: Coroutine[None, None, None]) -> None:
        self._tasks.spawn(upgrade, f"TLS upgrade of {self.peer}")

    async def upgrade_transport(self, context: ssl.SSLContext, timeout_s: float) -> None:
        """Run the server side of the TLS handshake; the next frame chooses the protocol."""
        transport = self._transport
        if transport is None or self.closed:
            raise ConnectionResetError("connection closed before the TLS handshake")
        new = await self._loop.start_tls(
            transport, self, context, server_side=True, ssl_handshake_timeout=timeout_s
        )
        if new is None or self.closed:
            if new is not None:
                new.abort()
            raise ConnectionResetError("connection closed during the TLS handshake")
        self._transport = new
        self._reading_paused = False
        self.protocol = None
        self._speak(False)
        self._table.restart_handshake(self)

    @property
    def tls_version(self) -> str:
        ssl_object = (
            None if self._transport is None else self._transport.get_extra_info("ssl_object")
        )
        return "" if ssl_object is None else str(ssl_object.version())

    def close_after_flush(self, reason: str) -> None:
        """Log one (rate-limited) line, write what is queued, then close."""
        if self.closed:
            return
        self._table.client_log.warning("closing connection from %s: %s", self.peer, reason)
        self._flush()
        self.closed = True
        self._table.discard(self)
        if self._transport is not None:
            self._transport.close()

    # -- responses ---------------------------------------------------------------------
    def respond(self, response: Response, request_bytes: int) -> None:
        """Queue ``response`` for the next write; ``request_bytes`` < 0 was never counted."""
        try:
            frame = self._encode(response)
        except ProtocolError as exc:
            log.warning("cannot encode %s for %s: %s", type(response).__name__, self.peer, exc)
            frame = b""
        self._queue(frame, request_bytes)

    def respond_add(
        self, status: StatusCode, ledger_id: int, entry_id: int, txn_id: int, request_bytes: int
    ) -> None:
        """Queue the answer to an add (either protocol), packed without a response object."""
        self._queue(self._encode_add(status, ledger_id, entry_id, txn_id), request_bytes)

    def respond_adds(
        self,
        status: StatusCode,
        ledger_ids: list[int],
        entry_ids: list[int],
        requests: int,
        request_bytes: int,
    ) -> None:
        """Queue the answers to many v2 adds (a batch of the batch lane) as one write."""
        self.requests_in_flight -= requests
        self.bytes_in_flight -= request_bytes
        if not self.closed and ledger_ids:
            self._queue(add_response_frames(status, ledger_ids, entry_ids), -1)

    def _queue(self, frame: bytes, request_bytes: int) -> None:
        if request_bytes >= 0:
            self.requests_in_flight -= 1
            self.bytes_in_flight -= request_bytes
        if self.closed or not frame:
            return
        self._out.append(frame)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        out, self._out = self._out, []
        if out and self._transport is not None and not self.closed:
            self.active = True
            self._transport.write(b"".join(out))
        self._update_reading()

    def _update_reading(self) -> None:
        if self._transport is None or self.closed:
            return
        over = (
            self._writing_paused
            or self.requests_in_flight >= self._config.connection_requests_in_flight_max
            or self.bytes_in_flight >= self._config.connection_bytes_in_flight_max
        )
        if over and not self._reading_paused:
            self._reading_paused = True
            self._transport.pause_reading()
        elif not over and self._reading_paused:
            self._reading_paused = False
            self._transport.resume_reading()

    def abort(self, reason: str) -> None:
        """Close the connection at once, logging why (rate-limited); others are unaffected."""
        self._table.close(self, reason)

    def log_client_error(self, message: str, *args: object) -> None:
        """One rate-limited line about a bad request that is answered, not fatal."""
        self._table.request_log.info(message, *args)

    def log_internal_error(self, message: str, *args: object) -> None:
        """The exception being handled, with its traceback: a bookie bug (rate-limited)."""
        self._table.client_log.log(logging.ERROR, message, *args, exc_info=True)

    def abort_transport(self) -> None:
        self.closed = True
        if self._transport is not None:
            self._transport.abort()

    def close(self) -> None:
        """Write what is queued, then close."""
        self._flush()
        if self._transport is not None:
            self._transport.close()
