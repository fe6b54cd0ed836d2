"""A deterministic in-memory cluster for scenario tests of the client.

N bookies, each the real request handlers over a real storage engine on a crashable
:class:`MemoryFileSystem`, reached through an in-memory transport instead of TCP, and the
``memory://`` metadata driver. Fault hooks per bookie and per request type:

* ``down`` — connections are refused and pending requests fail (a crashed bookie);
* ``error`` — answer with a given status instead of serving;
* ``delay`` — serve after a delay;
* ``drop``/``hang`` — never answer (the request is served or not, as chosen);
* ``corrupt`` — flip the last byte of every entry body served, by READ or BATCH_READ (a bad
  replica).

``crash(i)`` drops everything bookie ``i`` had not fsynced and restarts it from its disk.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import itertools
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bkeeper.client.bookie_client import AddListeners
from bkeeper.client.bookkeeper import BookKeeper
from bkeeper.client.config import ClientConfig
from bkeeper.common.errors import BookieUnavailableError
from bkeeper.meta.bookie_info import BookieServiceInfo
from bkeeper.meta.cluster import ClusterMetadata
from bkeeper.meta.registry import BookieRegistration
from bkeeper.server.config import BookieConfig
from bkeeper.server.handlers import BookieState, RequestHandlers, error_response
from bkeeper.storage import GroupTokens, MemoryFileSystem, Storage, StorageConfig
from bkeeper.testing.virtual_time import LoopClock, VirtualTimeLoop
from bkeeper.wire import v2
from bkeeper.wire.codes import Protocol, StatusCode
from bkeeper.wire.messages import (
    AddRequest,
    AddResponse,
    BatchReadResponse,
    ReadResponse,
    Request,
    Response,
)

__all__ = ["Fault", "MemoryBookie", "MemoryCluster"]

_log = logging.getLogger(__name__)

_counter = itertools.count()


@dataclass
class Fault:
    """What a bookie does with requests of one type (or all: ``kind=None``); ``applied``
    counts the requests it acted on, so a test can check that it fired."""

    error: StatusCode | None = None
    delay_s: float = 0.0
    drop: bool = False
    serve_dropped: bool = True
    corrupt: bool = False
    #: the first ``skip`` requests it sees are served as if it were not there
    skip: int = 0
    applied: int = 0


@dataclass
class MemoryBookie:
    bookie_id: str
    fs: MemoryFileSystem
    storage: Storage | None = None
    handlers: RequestHandlers | None = None
    down: bool = False
    #: seconds a new connection to this bookie takes to come up (a slow network or host)
    connect_delay_s: float = 0.0
    faults: dict[type[Any] | None, Fault] = field(default_factory=dict)
    connections: list[_MemoryConnection] = field(default_factory=list)
    registration: BookieRegistration | None = None
    requests: int = 0

    @property
    def data_dir(self) -> str:
        """The bookie's data directory on its ``fs``."""
        return f"/{self.bookie_id.replace(':', '_')}"


class _Responder:
    """Stands in for a server connection (the handlers' ``Responder``): handlers answer
    through ``respond``, adds through ``respond_add``."""

    peer = "memory"

    def __init__(
        self, conn: _MemoryConnection, future: asyncio.Future[Any], corrupt: bool = False
    ) -> None:
        self._conn = conn
        self._future = future
        self._corrupt = corrupt

    def respond(self, response: Response, size: int) -> None:
        if self._corrupt and isinstance(response, ReadResponse) and response.body:
            response = dataclasses.replace(response, body=_flip_last_byte(response.body))
        if self._corrupt and isinstance(response, BatchReadResponse):
            bodies = tuple(_flip_last_byte(body) for body in response.bodies)
            response = dataclasses.replace(response, bodies=bodies)
        if not self._future.done() and not self._conn.dropped(self._future):
            self._future.set_result(response)

    def respond_add(
        self, status: StatusCode, ledger_id: int, entry_id: int, txn_id: int, size: int
    ) -> None:
        self.respond(AddResponse(status, ledger_id, entry_id, txn_id), size)

    def log_client_error(self, message: str, *args: object) -> None:
        _log.info(message, *args)

    def log_internal_error(self, message: str, *args: object) -> None:
        _log.error(message, *args, exc_info=True)


def _flip_last_byte(body: bytes | bytearray | memoryview) -> bytes:
    flipped = bytearray(body)
    if flipped:
        flipped[-1] ^= 0xFF
    return bytes(flipped)


class _MemoryConnection:
    def __init__(self, bookie: MemoryBookie, protocol: Protocol) -> None:
        self._bookie = bookie
        self.protocol = protocol
        self._txn = itertools.count(1)
        self._open = True
        self._pending: set[asyncio.Future[Any]] = set()
        self._dropped: set[asyncio.Future[Any]] = set()
        self._listeners = AddListeners()

    @property
    def connected(self) -> bool:
        return self._open and not self._bookie.down

    def next_txn_id(self) -> int:
        return next(self._txn)

    def dropped(self, future: asyncio.Future[Any]) -> bool:
        return future in self._dropped

    @property
    def in_flight(self) -> int:
        """Requests sent on this connection and not answered (nor cancelled) yet."""
        return len(self._pending)

    def send(self, request: Request) -> asyncio.Future[Any]:
        if not self.connected:
            raise BookieUnavailableError(f"bookie {self._bookie.bookie_id} is down")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._pending.add(future)
        future.add_done_callback(self._pending.discard)
        bookie = self._bookie
        bookie.requests += 1
        fault = bookie.faults.get(type(request)) or bookie.faults.get(None)
        if fault is not None and fault.skip > 0:
            fault.skip -= 1
            fault = None
        if fault is None:
            self._serve(request, future)
            return future
        fault.applied += 1
        if fault.drop:
            self._dropped.add(future)
            if fault.serve_dropped:
                self._serve(request, future)
        elif fault.delay_s:
            loop.call_later(fault.delay_s, self._serve_faulty, request, future, fault)
        else:
            self._serve_faulty(request, future, fault)
        return future

    # The writer's add lane, through the same faults and handlers as ``send``.
    def listen_adds(
        self,
        ledger_id: int,
        on_add: Callable[[list[tuple[StatusCode, int, int]]], None],
        on_lost: Callable[[BaseException], None],
        on_run: Callable[[int, int], None] | None = None,
    ) -> None:
        """Answers come one by one here (``on_run`` is never called)."""
        self._listeners.listen(ledger_id, on_add, on_lost)

    def forget_adds(self, ledger_id: int) -> None:
        self._listeners.forget(ledger_id)

    def send_add(self, ledger_id: int, entry_id: int, master_key: bytes, data: bytes) -> None:
        """``data`` from ``encode_add``: decoded again, so that the v2 frame is checked too."""
        if self.protocol is Protocol.V2:
            request = v2.decode_request(data[4:])
        else:
            request = AddRequest(ledger_id, entry_id, master_key, data)
        future = self.send(request)
        future.add_done_callback(functools.partial(self._deliver_add, ledger_id, entry_id))

    def send_adds(
        self, ledger_id: int, entry_ids: Sequence[int], master_key: bytes, datas: list[bytes]
    ) -> None:
        for entry_id, data in zip(entry_ids, datas, strict=True):
            self.send_add(ledger_id, entry_id, master_key, data)

    def _deliver_add(self, ledger_id: int, entry_id: int, future: asyncio.Future[Any]) -> None:
        if future.cancelled() or future.exception() is not None:
            return  # fail_all reports the lost connection to the lost listeners
        self._listeners.answer(future.result().status, ledger_id, entry_id)

    #: in memory the socket never backs up
    writable = True

    async def wait_writable(self) -> None:
        return None

    def _serve_faulty(self, request: Request, future: asyncio.Future[Any], fault: Fault) -> None:
        if future.done():
            return
        if fault.error is not None:
            future.set_result(error_response(request, fault.error))
        else:
            self._serve(request, future, fault.corrupt)

    def _serve(self, request: Request, future: asyncio.Future[Any], corrupt: bool = False) -> None:
        handlers = self._bookie.handlers
        if handlers is None or self._bookie.down:
            future.set_exception(BookieUnavailableError(f"bookie {self._bookie.bookie_id} is down"))
            return
        handlers.dispatch(_Responder(self, future, corrupt), request, 0)

    def fail_all(self) -> None:
        self._open = False
        error = BookieUnavailableError(f"bookie {self._bookie.bookie_id}: connection lost")
        for future in list(self._pending):
            if not future.done():
                future.set_exception(error)
        self._listeners.lost(error)

    async def aclose(self) -> None:
        self.fail_all()


class _MemoryTransport:
    def __init__(self, cluster: MemoryCluster) -> None:
        self._cluster = cluster

    async def connect(self, bookie_id: str, protocol: Protocol) -> _MemoryConnection:
        bookie = self._cluster.bookie(bookie_id)
        if bookie.connect_delay_s:
            await asyncio.sleep(bookie.connect_delay_s)
        if bookie.down or bookie.handlers is None:
            raise BookieUnavailableError(f"bookie {bookie_id} is down")
        conn = _MemoryConnection(bookie, protocol)
        bookie.connections.append(conn)
        return conn


class MemoryCluster:
    """``async with MemoryCluster(3) as cluster: bk = await cluster.client()``.

    ``bookie_options`` are extra :class:`BookieConfig` fields for every bookie (for example
    ``{"batch_read_bytes_max": 1000}``), ``storage_options`` extra :class:`StorageConfig`
    fields (for example ``{"journal_max_group_wait_ms": 200.0}``).
    """

    def __init__(
        self,
        bookies: int = 3,
        name: str | None = None,
        bookie_options: Mapping[str, Any] | None = None,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.name = name or f"cluster-{uuid.uuid4().hex[:8]}-{next(_counter)}"
        self.uri = f"memory://{self.name}/ledgers"
        self.bookies = [
            MemoryBookie(f"bookie-{i}:3181", MemoryFileSystem()) for i in range(bookies)
        ]
        self.bookie_options = dict(bookie_options or {})
        self.storage_options = dict(storage_options or {})
        self.metadata: ClusterMetadata | None = None
        self._clients: list[BookKeeper] = []
        #: The clients' clock: the loop's time (virtual on a ``VirtualTimeLoop``).
        self.clock = LoopClock()
        self._forget_probe: Callable[[], None] | None = None

    def bookie(self, bookie_id: str) -> MemoryBookie:
        for bookie in self.bookies:
            if bookie.bookie_id == bookie_id:
                return bookie
        raise BookieUnavailableError(f"no bookie {bookie_id} in this cluster")

    def journals_busy(self) -> bool:
        """A bookie's journal thread still has adds to make durable and answer."""
        return any(b.storage is not None and not b.storage.journal_idle for b in self.bookies)

    async def __aenter__(self) -> MemoryCluster:
        loop = asyncio.get_running_loop()
        if isinstance(loop, VirtualTimeLoop):  # time must not jump while a journal works
            self._forget_probe = loop.add_busy_probe(self.journals_busy)
        self.metadata = await ClusterMetadata.open(self.uri)
        await self.metadata.format()
        for bookie in self.bookies:
            await self.start_bookie(bookie)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        for client in self._clients:
            await client.close()
        for bookie in self.bookies:
            await self.stop_bookie(bookie)
        if self.metadata is not None:
            await self.metadata.aclose()
        if self._forget_probe is not None:
            self._forget_probe()
            self._forget_probe = None

    async def start_bookie(self, bookie: MemoryBookie) -> None:
        assert self.metadata is not None
        data_dir = bookie.data_dir
        config = BookieConfig(data_dir=data_dir, bookie_id=bookie.bookie_id, **self.bookie_options)
        handlers_box: list[RequestHandlers] = []

        def on_durable(tokens: GroupTokens, error: BaseException | None) -> None:
            handlers_box[0].on_durable_threadsafe(tokens, error)

        bookie.storage = await asyncio.to_thread(
            Storage.open,
            StorageConfig(data_dir=data_dir, **self.storage_options),
            bookie.fs,
            on_durable,
        )
        bookie.handlers = RequestHandlers(config, bookie.storage, BookieState())
        handlers_box.append(bookie.handlers)
        bookie.down = False
        host, _, port = bookie.bookie_id.rpartition(":")
        bookie.registration = BookieRegistration(
            self.metadata.registry,
            self.metadata.store,
            bookie.bookie_id,  # type: ignore[arg-type]
            BookieServiceInfo.for_bookie(host, int(port)),
            False,
        )
        await bookie.registration.start()

    async def stop_bookie(self, bookie: MemoryBookie, *, crash: bool = False) -> None:
        """Take a bookie down: unregister, fail its connections, close (or crash) storage."""
        bookie.down = True
        if bookie.registration is not None:
            await bookie.registration.aclose()
            bookie.registration = None
        for conn in bookie.connections:
            conn.fail_all()
        bookie.connections.clear()
        bookie.handlers = None
        if bookie.storage is not None:
            storage, bookie.storage = bookie.storage, None
            if crash:
                await asyncio.to_thread(storage.abort)
                bookie.fs = bookie.fs.crash()
            else:
                await asyncio.to_thread(storage.close)

    async def crash(self, index: int, *, restart: bool = True) -> None:
        bookie = self.bookies[index]
        await self.stop_bookie(bookie, crash=True)
        if restart:
            await self.start_bookie(bookie)

    def fault(self, index: int, kind: type[Any] | None = None, **fault: Any) -> Fault:
        """Install a fault on bookie ``index`` for requests of type ``kind`` (None: all)."""
        hook = Fault(**fault)
        self.bookies[index].faults[kind] = hook
        return hook

    def requests_in_flight(self) -> int:
        """Requests sent to any bookie and not answered (nor cancelled) yet."""
        return sum(c.in_flight for b in self.bookies for c in b.connections)

    def heal(self, index: int) -> None:
        self.bookies[index].faults.clear()

    async def client(self, config: ClientConfig | None = None) -> BookKeeper:
        assert self.metadata is not None
        cluster = await ClusterMetadata.open(self.uri)
        bk = BookKeeper(
            config=config, cluster=cluster, transport=_MemoryTransport(self), clock=self.clock
        )
        bk._owns_cluster = True
        await bk.start()
        self._clients.append(bk)
        return bk
