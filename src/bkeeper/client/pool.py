"""Connections from the client to bookies, by bookie id, over a pluggable transport.

The real transport resolves a bookie id to an address through the registration the bookie
published (``BookieServiceInfo``), falling back to reading the id as ``host:port``, and opens
a :class:`~bkeeper.client.bookie_client.BookieClient`, refusing first (with one line saying
what is missing) when the registration says the bookie requires credentials the client lacks
(``bkeeper.client.handshake.check_credentials``). ``bkeeper.testing`` plugs in an
in-memory transport. One connection per (bookie, protocol); a dropped connection is replaced
on next use.

Connecting is one attempt at a time per (bookie, protocol); callers that waited while an
attempt failed share its failure instead of each trying again in turn (a bookie that is down
costs one attempt per wave of requests, not one per request: readers of a ledger with a dead
replica ask it for every entry it holds). A caller arriving after the failure tries again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any
from typing import Protocol as TypingProtocol

from bkeeper.client.bookie_client import WRITE_BUFFER_BYTES_MAX, BookieClient
from bkeeper.client.handshake import ClientSecurity, check_credentials
from bkeeper.common.errors import BookieUnavailableError, ClientClosedError
from bkeeper.common.limits import MAX_FRAME_BYTES_DEFAULT
from bkeeper.meta.bookie_info import Endpoint
from bkeeper.wire.codes import Protocol, StatusCode
from bkeeper.wire.correlate import PENDING_REQUESTS_MAX
from bkeeper.wire.messages import Request

__all__ = ["BookiePool", "Connection", "TcpTransport", "Transport"]


class Connection(TypingProtocol):
    @property
    def connected(self) -> bool: ...

    def send(self, request: Request) -> asyncio.Future[Any]: ...

    def next_txn_id(self) -> int: ...

    def listen_adds(
        self,
        ledger_id: int,
        on_add: Callable[[list[tuple[StatusCode, int, int]]], None],
        on_lost: Callable[[BaseException], None],
        on_run: Callable[[int, int], None] | None = None,
    ) -> None: ...

    def forget_adds(self, ledger_id: int) -> None: ...

    def send_add(self, ledger_id: int, entry_id: int, master_key: bytes, data: bytes) -> None: ...

    def send_adds(
        self, ledger_id: int, entry_ids: Sequence[int], master_key: bytes, datas: list[bytes]
    ) -> None: ...

    @property
    def writable(self) -> bool: ...

    async def wait_writable(self) -> None: ...

    async def aclose(self) -> None: ...


class Transport(TypingProtocol):
    async def connect(self, bookie_id: str, protocol: Protocol) -> Connection: ...


#: bookie id -> its registered ``bookie-rpc`` endpoint (what it requires, too), or only its
#: ``(host, port)``
Resolver = Callable[[str], Awaitable[Endpoint | tuple[str, int]]]


class TcpTransport:
    """Connects over TCP to the address ``resolve(bookie_id)`` returns, with START_TLS and
    AUTH first when ``security`` asks for them (``bkeeper.client.handshake``)."""

    def __init__(
        self,
        resolve: Resolver,
        connect_timeout_s: float,
        requests_pending_max: int = PENDING_REQUESTS_MAX,
        write_buffer_bytes_max: int = WRITE_BUFFER_BYTES_MAX,
        security: ClientSecurity | None = None,
        max_frame_bytes: int = MAX_FRAME_BYTES_DEFAULT,
    ) -> None:
        self._security = security
        self._max_frame_bytes = max_frame_bytes
        self._resolve = resolve
        self._timeout_s = connect_timeout_s
        self._pending_max = requests_pending_max
        self._write_buffer_bytes_max = write_buffer_bytes_max

    async def connect(self, bookie_id: str, protocol: Protocol) -> Connection:
        resolved = await self._resolve(bookie_id)
        endpoint: Endpoint | None = None
        if isinstance(resolved, Endpoint):
            endpoint, host, port = resolved, resolved.host, resolved.port
        else:
            host, port = resolved
        check_credentials(f"{host}:{port}", endpoint, self._security)
        return await BookieClient.connect(
            host,
            port,
            protocol,
            timeout_s=self._timeout_s,
            pending_max=self._pending_max,
            write_buffer_bytes_max=self._write_buffer_bytes_max,
            security=self._security,
            max_frame_bytes=self._max_frame_bytes,
        )


class BookiePool:
    """Cached connections to bookies."""

    def __init__(self, transport: Transport, default_protocol: Protocol) -> None:
        self._transport = transport
        self.default_protocol = default_protocol
        self._connections: dict[tuple[str, Protocol], Connection] = {}
        self._locks: dict[tuple[str, Protocol], asyncio.Lock] = {}
        #: per (bookie, protocol): connection attempts that failed so far, and the last error
        self._failures: dict[tuple[str, Protocol], tuple[int, BookieUnavailableError]] = {}
        self._closed = False

    def connection_nowait(
        self, bookie_id: str, protocol: Protocol | None = None
    ) -> Connection | None:
        """A live cached connection, or None."""
        conn = self._connections.get((bookie_id, protocol or self.default_protocol))
        return conn if conn is not None and conn.connected else None

    async def connection(self, bookie_id: str, protocol: Protocol | None = None) -> Connection:
        """A live connection to ``bookie_id``; :class:`BookieUnavailableError` if none."""
        if self._closed:
            raise ClientClosedError("the client is closed")
        key = (bookie_id, protocol or self.default_protocol)
        conn = self._connections.get(key)
        if conn is not None and conn.connected:
            return conn
        lock = self._locks.setdefault(key, asyncio.Lock())
        failed_before, _ = self._failures.get(key, (0, None))
        async with lock:
            conn = self._connections.get(key)
            if conn is not None and conn.connected:
                return conn
            failed, error = self._failures.get(key, (0, None))
            if error is not None and failed > failed_before:
                raise BookieUnavailableError(str(error))  # an attempt failed while we waited
            try:
                conn = await self._transport.connect(*key)
            except BookieUnavailableError as exc:
                self._failures[key] = (failed + 1, exc)
                raise
            except (OSError, TimeoutError) as exc:
                error = BookieUnavailableError(f"bookie {bookie_id}: {exc}")
                self._failures[key] = (failed + 1, error)
                raise error from exc
            self._connections[key] = conn
            return conn

    async def send(self, bookie_id: str, request: Request, protocol: Protocol | None = None) -> Any:
        """Send one request and await its response."""
        conn = await self.connection(bookie_id, protocol)
        return await conn.send(request)

    async def aclose(self) -> None:
        self._closed = True
        connections = list(self._connections.values())
        self._connections.clear()
        for conn in connections:
            await conn.aclose()
