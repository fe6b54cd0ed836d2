"""One client connection of a bookie: an asyncio ``Protocol`` around the sans-IO codecs.

The first frame decides the protocol (v3 or v2) for the life of the connection. Requests
are pipelined: each decoded request goes to the handlers at once, and responses may leave in
another order than requests came (v3 clients match on txn id, v2 clients on ledger, entry and
operation). Responses are gathered and written once per event-loop iteration.

Limits: at ``connection_requests_in_flight_max`` requests or ``connection_bytes_in_flight_max``
request bytes in flight the connection stops reading (back-pressure); requests already read
beyond twice those limits are answered ETOOMANYREQUESTS. A malformed frame closes the
connection with one logged line (peer and reason, rate-limited, no traceback); the bookie
itself stays up. Bookie-wide limits (connection count, handshake and idle timeouts, the
budget of incomplete frames) live in :class:`~bkeeper.server.connections.ConnectionTable`:
the connection reports to it only what it cannot see itself, once per chunk received and
batch written (an ``active`` mark, and the size of its incomplete frame), never per request.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from bkeeper.common.errors import ProtocolError
from bkeeper.wire import v2, v3
from bkeeper.wire.codes import Protocol, StatusCode
from bkeeper.wire.detect import detect_protocol
from bkeeper.wire.framing import FrameDecoder
from bkeeper.wire.messages import Request, Response

if TYPE_CHECKING:
    from bkeeper.server.config import BookieConfig
    from bkeeper.server.connections import ConnectionTable

__all__ = ["BookieConnection"]

log = logging.getLogger(__name__)

Dispatch = Callable[["BookieConnection", Request, int], None]
#: (connection, frame, flags, ledger id, entry id, frame bytes): a v2 ADD on the fast lane.
AddV2 = Callable[["BookieConnection", memoryview, int, int, int, int], None]


class BookieConnection(asyncio.Protocol):
    """Reads frames, hands requests to ``dispatch`` and writes responses in batches."""

    def __init__(
        self,
        config: BookieConfig,
        table: ConnectionTable,
        dispatch: Dispatch,
        add_v2: AddV2,
    ) -> None:
        self._config = config
        self._table = table
        self._dispatch = dispatch
        self._add_v2 = add_v2
        self._v2 = False
        self._decoder = FrameDecoder(config.max_frame_bytes)
        self._transport: asyncio.Transport | None = None
        self._loop = asyncio.get_running_loop()
        self.protocol: Protocol | None = None
        self._decode: Callable[[Any], Request] = v3.decode_request
        self._encode: Callable[[Any], bytes] = v3.encode_response_frame
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

    def pause_writing(self) -> None:
        self._writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._update_reading()

    def data_received(self, data: bytes) -> None:
        self.active = True
        decoder = self._decoder
        try:
            decoder.receive_data(data)
            frames = decoder.frames()
            for frame in frames:
                self._handle_frame(frame)
                if self.closed:
                    return
        except ProtocolError as exc:
            self.abort(f"bad frame: {exc}")
            return
        except Exception as exc:  # a bookie bug found by this client: say so (rate-limited)
            self.log_internal_error("request from %s failed", self.peer)
            self.abort(f"internal error: {exc!r}")
            return
        partial = decoder.partial_bytes
        if partial != self.partial_bytes:
            self._table.partial_changed(self, partial)
            if self.closed:
                return
        self._update_reading()

    # -- requests ----------------------------------------------------------------------
    def _handle_frame(self, frame: memoryview) -> None:
        if self.protocol is None:
            self._choose_protocol(frame)  # ProtocolError: neither v2 nor v3, caught above
        if self._v2 and (add := v2.peek_add_request(frame)) is not None:
            self._handle_add_v2(frame, add)
            return
        try:
            request = self._decode(frame)
        except ProtocolError as exc:
            self.abort(f"bad request: {exc}")
            return
        size = len(frame)
        limit = self._config.connection_requests_in_flight_max
        if self.requests_in_flight >= 2 * limit or (
            self.bytes_in_flight >= 2 * self._config.connection_bytes_in_flight_max
        ):
            self._dispatch(self, request, -1)  # -1: answer ETOOMANYREQUESTS
            return
        self.requests_in_flight += 1
        self.bytes_in_flight += size
        self._dispatch(self, request, size)

    def _handle_add_v2(self, frame: memoryview, add: tuple[int, int, int]) -> None:
        """The fast lane of a v2 ADD: no request object, the response packed directly."""
        flags, ledger_id, entry_id = add
        size = len(frame)
        config = self._config
        if self.requests_in_flight >= 2 * config.connection_requests_in_flight_max or (
            self.bytes_in_flight >= 2 * config.connection_bytes_in_flight_max
        ):
            self.respond_add(StatusCode.ETOOMANYREQUESTS, ledger_id, entry_id, -1)
            return
        self.requests_in_flight += 1
        self.bytes_in_flight += size
        self._add_v2(self, frame, flags, ledger_id, entry_id, size)

    def _choose_protocol(self, frame: memoryview) -> None:
        self.protocol = detect_protocol(frame)
        if self.protocol is Protocol.V2:
            self._decode = v2.decode_request
            self._encode = v2.encode_response_frame
            self._v2 = True
        log.debug("connection %s speaks %s", self.peer, self.protocol.name)

    # -- responses ---------------------------------------------------------------------
    def respond(self, response: Response, request_bytes: int) -> None:
        """Queue ``response`` for the next write; ``request_bytes`` < 0 was never counted."""
        if request_bytes >= 0:
            self.requests_in_flight -= 1
            self.bytes_in_flight -= request_bytes
        if self.closed:
            return
        try:
            self._out.append(self._encode(response))
        except ProtocolError as exc:
            log.warning("cannot encode %s for %s: %s", type(response).__name__, self.peer, exc)
            return
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def respond_add(self, status: StatusCode, ledger_id: int, entry_id: int, size: int) -> None:
        """Queue a v2 ADD response (the fast lane's ``respond``)."""
        if size >= 0:
            self.requests_in_flight -= 1
            self.bytes_in_flight -= size
        if self.closed:
            return
        self._out.append(v2.add_response_frame(status, ledger_id, entry_id))
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
