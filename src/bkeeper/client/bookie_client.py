"""A pipelined connection from a client to one bookie (v2 or v3), over an asyncio Protocol.

``send(request)`` returns a future for the response. Requests written in one event-loop
iteration leave in one ``write``. Which answer belongs to which request is decided by the
connection's :class:`~bkeeper.wire.correlate.Correlator` (v3: txn id; v2: operation, ledger
and entry, first in first out), which also bounds the requests awaiting an answer
(``pending_max``: past it ``send`` raises :class:`TooManyRequestsError`). When the connection
drops every pending future fails with :class:`BookieUnavailableError`.

The add lane (one, for both protocols): a ledger's writer registers listeners with
:meth:`BookieClient.listen_adds` and sends each entry with :meth:`BookieClient.send_add`, no
future per request (or :meth:`BookieClient.send_adds` for many entries at once); its listener is
called with the ``(status, ledger id, entry id)`` ADD answers of that ledger that arrived
together, or once with the error when the connection is lost. The entry is encoded once for
every bookie of its write set by :func:`encode_add` (over v2 the whole ADD frame; over v3 the
entry body, which ``send_add`` wraps in a request with this connection's txn id).

Back-pressure: while the socket's write buffer is over its high-water mark ``writable`` is
False and :meth:`BookieClient.wait_writable` waits; writers wait there before adding more.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, cast

from bkeeper.client.handshake import ClientSecurity, open_secure
from bkeeper.common.errors import BookieUnavailableError, ClientClosedError, ProtocolError
from bkeeper.common.limits import MAX_FRAME_BYTES_DEFAULT
from bkeeper.common.tasks import within
from bkeeper.wire import v2, v2_stream, v3
from bkeeper.wire.codes import Protocol, StatusCode
from bkeeper.wire.correlate import PENDING_REQUESTS_MAX, Correlator, Listened
from bkeeper.wire.digest import ENTRY_HEADER, DigestManager
from bkeeper.wire.framing import FrameDecoder
from bkeeper.wire.messages import AddRequest, AddResponse, BytesLike, Request, Response

__all__ = [
    "PREFIXES_CACHED_MAX",
    "WRITE_BUFFER_BYTES_MAX",
    "AddListeners",
    "BookieClient",
    "add_encoders",
    "encode_add",
    "entry_bytes_max",
]

#: Told the answers to a ledger's adds that arrived together: ``[(status, ledger id, entry id),
#: ...]`` in arrival order (one call per ledger per chunk read, not one per answer).
AddListener = Callable[[list[tuple[StatusCode, int, int]]], None]
#: Told a run of EOK answers to a ledger's adds: ``(first entry id, count)``, for the entry ids
#: ``first .. first + count - 1`` (``bkeeper.wire.runs``: no tuple per answer).
RunListener = Callable[[int, int], None]
LostListener = Callable[[BaseException], None]


def encode_add(
    protocol: Protocol, master_key: bytes, parts: tuple[BytesLike, ...], body_bytes: int
) -> bytes:
    """An entry (body ``parts``: header, digest, payload; ``body_bytes`` in all) as
    :meth:`BookieClient.send_add` takes it, built once for every bookie of the write set:
    over v2 the ADD frame, over v3 the entry body."""
    if protocol is Protocol.V2:
        return v2.add_request_frame(master_key, parts, body_bytes)
    return b"".join(parts)


def entry_bytes_max(protocol: Protocol, max_frame_bytes: int, digest_bytes: int) -> int:
    """The largest payload whose ADD request fits a frame of ``max_frame_bytes`` (the length
    prefix's value) with its headers: the packet's (v2 header and master key; v3 a bound on
    the protobuf request's), the entry header and a digest of ``digest_bytes``."""
    if protocol is Protocol.V2:
        overhead = v2.ADD_FRAME_PREFIX_BYTES - 4
    else:
        overhead = v3.ADD_REQUEST_OVERHEAD_BYTES_MAX
    return max_frame_bytes - overhead - ENTRY_HEADER.size - digest_bytes


#: (entry id, lac, ledger length, payload) -> what :meth:`BookieClient.send_add` takes
EncodeOne = Callable[[int, int, int, BytesLike], bytes]
#: (first entry id, lac, ledger length before, payloads) -> (those, ledger length after each)
EncodeMany = Callable[[int, int, int, Sequence[BytesLike]], tuple[list[bytes], list[int]]]


def add_encoders(
    protocol: Protocol, master_key: bytes, digest: DigestManager[Any]
) -> tuple[EncodeOne, EncodeMany]:
    """What :func:`encode_add` makes of one entry, and of many in one pass, with the entry
    header and digest from ``digest``: over v2 whole ADD frames (prefixes made once a body
    size), over v3 entry bodies."""
    if protocol is Protocol.V2:
        prefixes: dict[int, bytes] = {}

        def prefix_of(body_bytes: int) -> bytes:
            prefix = prefixes.get(body_bytes)
            if prefix is None:
                if len(prefixes) >= PREFIXES_CACHED_MAX:
                    prefixes.clear()
                prefix = prefixes[body_bytes] = v2.add_frame_prefix(master_key, body_bytes)
            return prefix
    else:

        def prefix_of(body_bytes: int) -> bytes:
            return b""

    fixed = ENTRY_HEADER.size + digest.digest_length
    frame_entry = digest.frame_entry

    def encode_one(entry_id: int, lac: int, length: int, payload: BytesLike) -> bytes:
        return frame_entry(entry_id, lac, length, payload, prefix_of(fixed + len(payload)))

    def encode_many(
        first: int, lac: int, length: int, payloads: Sequence[BytesLike]
    ) -> tuple[list[bytes], list[int]]:
        return digest.frame_entries(first, lac, length, payloads, prefix_of)

    return encode_one, encode_many


#: Frame heads (length, header, master key) kept by body size, per writer.
PREFIXES_CACHED_MAX = 64


class AddListeners:
    """Per-ledger listeners of a connection's add lane (see the module doc)."""

    __slots__ = ("on_add", "on_lost", "on_run")

    def __init__(self) -> None:
        self.on_add: dict[int, AddListener] = {}
        self.on_lost: dict[int, LostListener] = {}
        self.on_run: dict[int, RunListener] = {}

    def listen(
        self,
        ledger_id: int,
        on_add: AddListener,
        on_lost: LostListener,
        on_run: RunListener | None = None,
    ) -> None:
        self.on_add[ledger_id] = on_add
        self.on_lost[ledger_id] = on_lost
        if on_run is not None:
            self.on_run[ledger_id] = on_run

    def forget(self, ledger_id: int) -> None:
        self.on_add.pop(ledger_id, None)
        self.on_lost.pop(ledger_id, None)
        self.on_run.pop(ledger_id, None)

    def run(self, ledger_id: int, first_entry_id: int, count: int) -> None:
        """A run of EOK answers: to the ledger's run listener, else answer by answer."""
        listener = self.on_run.get(ledger_id)
        if listener is not None:
            listener(first_entry_id, count)
            return
        on_add = self.on_add.get(ledger_id)
        if on_add is not None:
            eok = StatusCode.EOK
            end = first_entry_id + count
            on_add([(eok, ledger_id, entry_id) for entry_id in range(first_entry_id, end)])

    def answer(self, status: StatusCode, ledger_id: int, entry_id: int) -> None:
        listener = self.on_add.get(ledger_id)
        if listener is not None:
            listener([(status, ledger_id, entry_id)])

    def lost(self, error: BaseException) -> None:
        """Tell every listener the connection is gone, once, and forget them all."""
        listeners = list(self.on_lost.values())
        self.on_add.clear()
        self.on_lost.clear()
        self.on_run.clear()
        for listener in listeners:
            listener(error)


#: Default bytes queued on a connection's socket before writers wait (``writable`` False).
WRITE_BUFFER_BYTES_MAX = 8 * 1024 * 1024


class BookieClient(asyncio.Protocol):
    """One TCP connection to a bookie. Create with :meth:`connect`."""

    def __init__(
        self,
        protocol: Protocol,
        *,
        max_frame_bytes: int = MAX_FRAME_BYTES_DEFAULT,
        pending_max: int = PENDING_REQUESTS_MAX,
        write_buffer_bytes_max: int = WRITE_BUFFER_BYTES_MAX,
        address: str = "?",
    ) -> None:
        self.protocol = protocol
        self._write_buffer_bytes_max = write_buffer_bytes_max
        self.address = address
        self._decoder = FrameDecoder(max_frame_bytes)
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._out: list[bytes] = []
        self._flush_scheduled = False
        self._requests: Correlator[asyncio.Future[Any]] = Correlator(protocol, pending_max)
        self._error: BaseException | None = None
        #: True from ``connection_made`` until the connection fails or closes (an attribute,
        #: not a property: writers test it once per add per bookie)
        self.connected = False
        #: False while the socket's write buffer is over its high-water mark
        self.writable = True
        self._write_ready = asyncio.Event()
        self._write_ready.set()
        self._listeners = AddListeners()
        self._encode: Callable[[Any], bytes]
        self._decode: Callable[[Any], Response]
        self._stream: v2_stream.ResponseStream | None = None
        if protocol is Protocol.V2:
            self._encode, self._decode = v2.encode_request_frame, v2.decode_response
            self._stream = v2_stream.ResponseStream(max_frame_bytes)
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
        security: ClientSecurity | None = None,
        **kwargs: Any,
    ) -> BookieClient:
        """Connect; with ``security`` (TLS and/or auth) run START_TLS and AUTH first
        (``bkeeper.client.handshake``: ``TlsError``, ``AuthenticationError``)."""
        loop = asyncio.get_running_loop()
        address = f"{host}:{port}"
        if security is not None and security.enabled:
            secure = await open_secure(
                host,
                port,
                protocol,
                security,
                lambda: cls(protocol, address=address, **kwargs),
                timeout_s,
                kwargs.get("max_frame_bytes", MAX_FRAME_BYTES_DEFAULT),
            )
            return cast(BookieClient, secure)
        try:
            _, client = await within(
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
        return self._requests.pending

    # -- sending -----------------------------------------------------------------------
    def send(self, request: Request) -> asyncio.Future[Any]:
        """Queue ``request``; the future resolves to its response (any status)."""
        if self._error is not None:
            raise BookieUnavailableError(f"bookie {self.address}: {self._error}")
        future: asyncio.Future[Any] = self._loop.create_future()
        request = self._requests.expect(request, future, self.address)
        self._queue(self._encode(request))
        return future

    def listen_adds(
        self,
        ledger_id: int,
        on_add: AddListener,
        on_lost: LostListener,
        on_run: RunListener | None = None,
    ) -> None:
        """Route answers to :meth:`send_add` of ``ledger_id`` to ``on_add``, and runs of EOK
        answers to ``on_run`` if given (module doc)."""
        self._listeners.listen(ledger_id, on_add, on_lost, on_run)

    def forget_adds(self, ledger_id: int) -> None:
        self._listeners.forget(ledger_id)

    def send_add(self, ledger_id: int, entry_id: int, master_key: bytes, data: bytes) -> None:
        """Queue an add of a ledger with a listener; ``data`` from :func:`encode_add`."""
        if self._error is not None:
            raise BookieUnavailableError(f"bookie {self.address}: {self._error}")
        txn = self._requests.expect_listened_add(ledger_id, entry_id, self.address)
        if txn:
            data = self._encode(AddRequest(ledger_id, entry_id, master_key, data, txn_id=txn))
        self._out.append(data)  # _queue, inline: once per add per bookie
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def send_adds(
        self, ledger_id: int, entry_ids: Sequence[int], master_key: bytes, datas: list[bytes]
    ) -> None:
        """:meth:`send_add` for many entries of one ledger (``datas[i]`` is entry
        ``entry_ids[i]``), in one call, written at once with whatever else was queued (the
        callers batch already: one call per writer per loop iteration, or an ``append_many``;
        waiting for the next iteration would only add latency)."""
        if self._error is not None:
            raise BookieUnavailableError(f"bookie {self.address}: {self._error}")
        if self.protocol is Protocol.V2:
            self._requests.expect_listened_adds(len(datas), self.address)
            self._out += datas
        else:
            for entry_id, data in zip(entry_ids, datas, strict=True):
                txn = self._requests.expect_listened_add(ledger_id, entry_id, self.address)
                request = AddRequest(ledger_id, entry_id, master_key, data, txn_id=txn)
                self._out.append(self._encode(request))
        out, self._out = self._out, []
        if self._transport is not None:
            self._transport.write(b"".join(out))

    def _queue(self, frame: bytes) -> None:
        self._out.append(frame)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def next_txn_id(self) -> int:
        """A fresh v3 txn id; callers on hot paths build requests with it to skip a copy."""
        return self._requests.next_txn_id()

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
        # Writers wait above this (``writable``); asyncio's default (64 KiB) is less than one
        # loop iteration's worth of adds, which would stall a writer on every flush.
        self._transport.set_write_buffer_limits(high=self._write_buffer_bytes_max)
        self.connected = self._error is None

    def pause_writing(self) -> None:
        self.writable = False
        self._write_ready.clear()

    def resume_writing(self) -> None:
        self.writable = True
        self._write_ready.set()

    def data_received(self, data: bytes) -> None:
        try:
            if self._stream is not None:
                run, adds, others = self._stream.feed_runs(data)
                if run is None:
                    self._v2_received(adds, others)
                elif self._requests.match_v2_run(run[2]):
                    self._listeners.run(*run)
                else:  # a keyed add waits, or more answers than adds: one by one
                    ledger_id, first, count = run
                    eok = StatusCode.EOK
                    answers = [(eok, ledger_id, e) for e in range(first, first + count)]
                    self._v2_received(answers, [])
            else:
                self._decoder.receive_data(data)
                for frame in self._decoder.frames():
                    self._answer(self._decode(frame))
        except ProtocolError as exc:
            self._fail(exc)
            if self._transport is not None:
                self._transport.abort()

    def _v2_received(self, adds: list[v2_stream.AddAnswer], others: list[Response]) -> None:
        listened, keyed = self._requests.match_v2_adds(adds)
        listeners = self._listeners.on_add
        for ledger_id, answers in listened.items():
            listener = listeners.get(ledger_id)
            if listener is not None:
                listener(answers)
        for future, status, ledger_id, entry_id in keyed:
            if not future.done():
                future.set_result(AddResponse(status, ledger_id, entry_id))
        for response in others:
            self._answer(response)

    def _answer(self, response: Response) -> None:
        value = self._requests.match(response)
        if isinstance(value, Listened):
            self._listeners.answer(response.status, value.ledger_id, value.entry_id)
        elif value is not None and not value.done():
            value.set_result(response)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(exc or ConnectionResetError("connection closed"))
        self._transport = None
        self.connected = False

    def _fail(self, exc: BaseException) -> None:
        if self._error is None:
            self._error = exc
        self.connected = False
        error = BookieUnavailableError(f"bookie {self.address}: {exc}")
        for future in self._requests.drain():
            if not future.done():
                future.set_exception(error)
        self._listeners.lost(error)
        self.writable = True
        self._write_ready.set()

    async def aclose(self) -> None:
        if self._transport is not None:
            self._flush()
            self._transport.close()
        self._fail(ClientClosedError("connection closed by the client"))
