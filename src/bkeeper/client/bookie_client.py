"""A pipelined connection from a client to one bookie (v2 or v3), over an asyncio Protocol.

``send(request)`` returns a future for the response. Requests written in one event-loop
iteration leave in one ``write``. v3 responses match on txn id (assigned here); v2 responses
match on (operation, ledger id, entry id), or the request id of a batch read, first in first
out. The number of requests awaiting an answer is bounded by ``pending_max``: past it
``send`` raises :class:`TooManyRequestsError` (callers add their own back-pressure first).
When the connection drops every pending future fails with :class:`BookieUnavailableError`.

The writer's hot path over v2 skips futures: a ledger's writer registers listeners with
:meth:`listen_adds`, sends pre-built frames with :meth:`send_add_frame` (the same bytes for
every bookie of the write set), and its listener is called with (status, entry id) for each
ADD response of that ledger, or once with the error when the connection is lost.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
from collections.abc import Callable
from typing import Any, cast

from bkeeper.common.errors import (
    BookieUnavailableError,
    ClientClosedError,
    ProtocolError,
    TooManyRequestsError,
)
from bkeeper.common.limits import MAX_FRAME_BYTES_DEFAULT
from bkeeper.wire import v2, v3
from bkeeper.wire.codes import Protocol, StatusCode, V2OpCode
from bkeeper.wire.framing import FrameDecoder
from bkeeper.wire.messages import (
    AddRequest,
    AddResponse,
    AuthRequest,
    AuthResponse,
    BatchReadRequest,
    BatchReadResponse,
    ReadRequest,
    ReadResponse,
    Request,
    Response,
)

__all__ = ["AddListeners", "BookieClient"]

_V2Key = tuple[int, int, int]
AddListener = Callable[[StatusCode, int], None]
LostListener = Callable[[BaseException], None]


class AddListeners:
    """Per-ledger listeners of a connection's v2 ADD fast path (see the module doc)."""

    __slots__ = ("on_add", "on_lost")

    def __init__(self) -> None:
        self.on_add: dict[int, AddListener] = {}
        self.on_lost: dict[int, LostListener] = {}

    def listen(self, ledger_id: int, on_add: AddListener, on_lost: LostListener) -> None:
        self.on_add[ledger_id] = on_add
        self.on_lost[ledger_id] = on_lost

    def forget(self, ledger_id: int) -> None:
        self.on_add.pop(ledger_id, None)
        self.on_lost.pop(ledger_id, None)

    def lost(self, error: BaseException) -> None:
        """Tell every listener the connection is gone, once, and forget them all."""
        listeners = list(self.on_lost.values())
        self.on_add.clear()
        self.on_lost.clear()
        for listener in listeners:
            listener(error)


def _v2_request_key(request: Request) -> _V2Key:
    if isinstance(request, AddRequest):
        return (V2OpCode.ADD_ENTRY, request.ledger_id, request.entry_id)
    if isinstance(request, ReadRequest):
        return (V2OpCode.READ_ENTRY, request.ledger_id, request.entry_id)
    if isinstance(request, BatchReadRequest):
        return (V2OpCode.BATCH_READ_ENTRY, request.request_id, 0)
    if isinstance(request, AuthRequest):
        return (V2OpCode.AUTH, 0, 0)
    raise ProtocolError(f"{type(request).__name__} is not available over the v2 protocol")


def _v2_response_key(response: Response) -> _V2Key:
    if isinstance(response, AddResponse):
        return (V2OpCode.ADD_ENTRY, response.ledger_id, response.entry_id)
    if isinstance(response, ReadResponse):
        return (V2OpCode.READ_ENTRY, response.ledger_id, response.entry_id)
    if isinstance(response, BatchReadResponse):
        return (V2OpCode.BATCH_READ_ENTRY, response.request_id, 0)
    if isinstance(response, AuthResponse):
        return (V2OpCode.AUTH, 0, 0)
    raise ProtocolError(f"unexpected v2 response {type(response).__name__}")


class BookieClient(asyncio.Protocol):
    """One TCP connection to a bookie. Create with :meth:`connect`."""

    def __init__(
        self,
        protocol: Protocol,
        *,
        max_frame_bytes: int = MAX_FRAME_BYTES_DEFAULT,
        pending_max: int = 100_000,
        address: str = "?",
    ) -> None:
        self.protocol = protocol
        self.address = address
        self._pending_max = pending_max
        self._decoder = FrameDecoder(max_frame_bytes)
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._out: list[bytes] = []
        self._flush_scheduled = False
        self._next_txn = 1
        self._by_txn: dict[int, asyncio.Future[Any]] = {}
        self._by_key: dict[_V2Key, collections.deque[asyncio.Future[Any]]] = {}
        self._pending = 0
        self._error: BaseException | None = None
        self._write_ready = asyncio.Event()
        self._write_ready.set()
        self._listeners = AddListeners()
        self._encode: Callable[[Any], bytes]
        self._decode: Callable[[Any], Response]
        self._stream: v2.ResponseStream | None = None
        if protocol is Protocol.V2:
            self._encode, self._decode = v2.encode_request_frame, v2.decode_response
            self._stream = v2.ResponseStream(max_frame_bytes)
        else:
            self._encode, self._decode = v3.encode_request_frame, v3.decode_response

    @classmethod
    async def connect(
        cls,
        host: str,
        port: int,
        protocol: Protocol = Protocol.V3,
        *,
        timeout_s: float = 10.0,
        **kwargs: Any,
    ) -> BookieClient:
        loop = asyncio.get_running_loop()
        address = f"{host}:{port}"
        try:
            _, client = await asyncio.wait_for(
                loop.create_connection(
                    lambda: cls(protocol, address=address, **kwargs), host, port
                ),
                timeout_s,
            )
        except (OSError, TimeoutError) as exc:
            raise BookieUnavailableError(f"cannot connect to bookie {address}: {exc}") from exc
        return client

    @property
    def pending(self) -> int:
        return self._pending

    @property
    def connected(self) -> bool:
        return self._transport is not None and self._error is None

    # -- sending -----------------------------------------------------------------------
    def send(self, request: Request) -> asyncio.Future[Any]:
        """Queue ``request``; the future resolves to its response (any status)."""
        if self._error is not None:
            raise BookieUnavailableError(f"bookie {self.address}: {self._error}")
        if self._pending >= self._pending_max:
            raise TooManyRequestsError(f"{self._pending} requests pending to {self.address}")
        future: asyncio.Future[Any] = self._loop.create_future()
        if self.protocol is Protocol.V3:
            txn = request.txn_id
            if txn == 0:
                txn = self.next_txn_id()
                request = dataclasses.replace(request, txn_id=txn)
            self._by_txn[txn] = future
        else:
            key = _v2_request_key(request)
            queue = self._by_key.get(key)
            if queue is None:
                self._by_key[key] = queue = collections.deque()
            queue.append(future)
        self._pending += 1
        self._out.append(self._encode(request))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)
        return future

    def listen_adds(self, ledger_id: int, on_add: AddListener, on_lost: LostListener) -> None:
        """Route ADD responses of ``ledger_id`` sent by :meth:`send_add_frame` to ``on_add``."""
        if self.protocol is not Protocol.V2:
            raise ProtocolError("listen_adds needs a v2 connection")
        self._listeners.listen(ledger_id, on_add, on_lost)

    def forget_adds(self, ledger_id: int) -> None:
        self._listeners.forget(ledger_id)

    def send_add_frame(self, frame: bytes) -> None:
        """Queue a pre-built v2 ADD frame of a ledger with a listener (see module doc)."""
        if self._error is not None:
            raise BookieUnavailableError(f"bookie {self.address}: {self._error}")
        if self._pending >= self._pending_max:
            raise TooManyRequestsError(f"{self._pending} requests pending to {self.address}")
        self._pending += 1
        self._out.append(frame)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def next_txn_id(self) -> int:
        """A fresh v3 txn id; callers on hot paths build requests with it to skip a copy."""
        txn = self._next_txn
        self._next_txn = txn + 1
        return txn

    async def request(self, request: Request) -> Any:
        return await self.send(request)

    async def wait_writable(self) -> None:
        """Wait while the socket's write buffer is over its high-water mark."""
        await self._write_ready.wait()

    def _flush(self) -> None:
        self._flush_scheduled = False
        out, self._out = self._out, []
        if out and self._transport is not None:
            self._transport.write(b"".join(out))

    # -- asyncio callbacks -------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement the Transport interface without subclassing it.
        self._transport = cast(asyncio.Transport, transport)

    def pause_writing(self) -> None:
        self._write_ready.clear()

    def resume_writing(self) -> None:
        self._write_ready.set()

    def data_received(self, data: bytes) -> None:
        try:
            if self._stream is not None:
                self._v2_received(self._stream.feed(data))
            else:
                self._decoder.receive_data(data)
                for frame in self._decoder.frames():
                    self._complete(self._decode(frame))
        except ProtocolError as exc:
            self._fail(exc)
            if self._transport is not None:
                self._transport.abort()

    def _v2_received(self, responses: list[Any]) -> None:
        listeners = self._listeners.on_add
        by_key = self._by_key
        for item in responses:
            if type(item) is tuple:
                status, ledger_id, entry_id = item
                if not by_key or (V2OpCode.ADD_ENTRY, ledger_id, entry_id) not in by_key:
                    listener = listeners.get(ledger_id)
                    if listener is not None:
                        self._pending -= 1
                        listener(status, entry_id)
                    continue
                self._complete(AddResponse(status, ledger_id, entry_id))
            else:
                self._complete(item)

    def _complete(self, response: Response) -> None:
        if self.protocol is Protocol.V3:
            future = self._by_txn.pop(response.txn_id, None)
        else:
            queue = self._by_key.get(_v2_response_key(response))
            future = queue.popleft() if queue else None
            if queue is not None and not queue:
                del self._by_key[_v2_response_key(response)]
        if future is None:
            return  # an answer to a request we gave up on
        self._pending -= 1
        if not future.done():
            future.set_result(response)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(exc or ConnectionResetError("connection closed"))
        self._transport = None

    def _fail(self, exc: BaseException) -> None:
        if self._error is None:
            self._error = exc
        error = BookieUnavailableError(f"bookie {self.address}: {exc}")
        futures = list(self._by_txn.values())
        for queue in self._by_key.values():
            futures.extend(queue)
        self._by_txn.clear()
        self._by_key.clear()
        self._pending = 0
        for future in futures:
            if not future.done():
                future.set_exception(error)
        self._listeners.lost(error)
        self._write_ready.set()

    async def aclose(self) -> None:
        if self._transport is not None:
            self._flush()
            self._transport.close()
        self._fail(ClientClosedError("connection closed by the client"))
