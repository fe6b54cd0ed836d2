"""The bookie's admin HTTP server: a route table served over HTTP/1.1 on asyncio.

What it serves is a :class:`Routes` table, ``(method, path) -> handler``, each handler an
``async`` function from :class:`~bkeeper.server.http_codec.HttpRequest` to
:class:`~bkeeper.server.http_codec.HttpResponse`; the bookie's endpoints are in
:mod:`bkeeper.server.admin_routes`, and more are added with :meth:`Routes.add`. One request
per connection (``Connection: close``).

Limits (:class:`AdminHttpConfig`): at most ``connections_max`` connections at once (one past
it is answered 503 and closed); the request line and headers at most ``head_bytes_max``
bytes and ``headers_max`` lines (431), the body at most ``body_bytes_max`` (413); a request
not complete ``request_timeout_ms`` after the connection opened is answered 408 and closed;
an answer the client has not taken ``response_timeout_ms`` after it was written is dropped
with the connection. A request runs to its end even if its client leaves (a GC pass is not
cut short by a closed terminal), so requests under way are bounded too: at most
``connections_max`` (503 past it). Every refusal is a JSON body
``{"error": ..., "status": ...}`` naming the problem (unknown path 404, a method the path
does not serve 405 with ``Allow``), logged in one rate-limited line. A handler that fails
answers 500 with its error (and logs its traceback); the bookie stays up whatever a client
sends.
"""

from __future__ import annotations

import asyncio
import errno
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import cast

from bkeeper.common.errors import AdminRequestError, BKeeperError, ConfigError
from bkeeper.common.tasks import TaskOwner
from bkeeper.common.validate import check_port, check_positive_ints
from bkeeper.server.http_codec import (
    HttpRequest,
    HttpResponse,
    RequestReader,
    encode_response,
    error_response,
)
from bkeeper.server.ratelimit import RateLimitedLog

__all__ = ["AdminHttpConfig", "AdminHttpServer", "Handler", "Routes"]

log = logging.getLogger(__name__)

#: One route's work: the request in, the answer out.
Handler = Callable[[HttpRequest], Awaitable[HttpResponse]]

#: Lines about refused requests: at most this many a second, in bursts of this many.
REFUSED_LOG_LINES_PER_S = 5
REFUSED_LOG_BURST = 20


@dataclass(frozen=True)
class AdminHttpConfig:
    """Where the admin server listens (port 0: any free port) and its limits."""

    host: str
    port: int
    connections_max: int = 64
    head_bytes_max: int = 16 * 1024
    headers_max: int = 64
    body_bytes_max: int = 64 * 1024
    request_timeout_ms: int = 10_000
    response_timeout_ms: int = 10_000

    def __post_init__(self) -> None:
        check_port("http_port", self.port)
        check_positive_ints(
            self,
            "connections_max",
            "head_bytes_max",
            "headers_max",
            "body_bytes_max",
            "request_timeout_ms",
            "response_timeout_ms",
        )


class Routes:
    """The route table: handlers by path, then by method."""

    def __init__(self) -> None:
        self._table: dict[str, dict[str, Handler]] = {}

    def add(self, method: str, path: str, handler: Handler) -> None:
        methods = self._table.setdefault(path, {})
        if method in methods:
            raise ValueError(f"{method} {path}: a route is there already")
        methods[method] = handler

    def paths(self) -> list[str]:
        return sorted(self._table)

    def methods(self, path: str) -> list[str]:
        return sorted(self._table.get(path, {}))

    def resolve(self, method: str, path: str) -> Handler:
        """The handler of ``method path``; 404 for a path not served, 405 for a method not
        served there."""
        methods = self._table.get(path)
        if methods is None:
            raise AdminRequestError(404, f"no such path: {path}")
        handler = methods.get(method)
        if handler is None:
            raise AdminRequestError(
                405, f"{method} is not served on {path}; use {', '.join(sorted(methods))}"
            )
        return handler


class AdminHttpServer:
    """``await bind()`` (the port is then known), ``await start()``, ``await aclose()``."""

    def __init__(self, config: AdminHttpConfig, routes: Routes) -> None:
        self.config = config
        self.routes = routes
        self.port = config.port
        self._server: asyncio.Server | None = None
        self._connections: set[_AdminConnection] = set()
        self._tasks = TaskOwner("admin http", tasks_max=config.connections_max)
        self.refused = RateLimitedLog(
            log, REFUSED_LOG_LINES_PER_S, REFUSED_LOG_BURST, what="lines about admin requests"
        )

    @property
    def connections(self) -> int:
        return len(self._connections)

    async def bind(self) -> int:
        """Listen (not serving yet); the port. ``ConfigError`` naming the address and the
        ``http_port`` option when it cannot."""
        config = self.config
        where = f"{config.host}:{config.port} (http_port, the admin HTTP server)"
        try:
            self._server = await asyncio.get_running_loop().create_server(
                lambda: _AdminConnection(self),
                config.host,
                config.port,
                reuse_address=True,
                start_serving=False,
            )
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise ConfigError(
                    f"cannot listen on {where}: the port is in use by another process"
                ) from exc
            raise ConfigError(f"cannot listen on {where}: {exc}") from exc
        sockets = self._server.sockets
        if sockets:
            self.port = sockets[0].getsockname()[1]
        return self.port

    async def start(self) -> None:
        if self._server is None:
            await self.bind()
        assert self._server is not None
        await self._server.start_serving()

    async def aclose(self) -> None:
        """Stop listening, drop every connection and cancel the requests under way."""
        if self._server is not None:
            self._server.close()
        for conn in list(self._connections):
            conn.abort()
        await self._tasks.aclose()
        if self._server is not None:
            server, self._server = self._server, None
            await server.wait_closed()

    # -- used by the connections ---------------------------------------------------------
    def admit(self, conn: _AdminConnection) -> bool:
        if len(self._connections) >= self.config.connections_max:
            return False
        self._connections.add(conn)
        return True

    def forget(self, conn: _AdminConnection) -> None:
        self._connections.discard(conn)

    def serve(self, conn: _AdminConnection, request: HttpRequest) -> None:
        self._tasks.spawn(self._answer(conn, request), f"{request.method} {request.path}")

    async def _answer(self, conn: _AdminConnection, request: HttpRequest) -> None:
        try:
            handler = self.routes.resolve(request.method, request.path)
            response = await handler(request)
        except AdminRequestError as exc:
            response = self.refusal(conn.peer, exc, request)
        except Exception as exc:
            log.exception("admin %s %s failed", request.method, request.path)
            response = error_response(500, f"{type(exc).__name__}: {exc}")
        conn.respond(response)

    def refusal(
        self, peer: str, error: AdminRequestError, request: HttpRequest | None = None
    ) -> HttpResponse:
        """The answer to a refused request, logged (rate-limited)."""
        what = f"{request.method} {request.path}" if request is not None else "a request"
        self.refused.info(
            "admin http: %s from %s refused (%d): %s", what, peer, error.status, error
        )
        headers: tuple[tuple[str, str], ...] = ()
        if error.status == 405 and request is not None:
            headers = (("Allow", ", ".join(self.routes.methods(request.path))),)
        response = error_response(error.status, str(error))
        return HttpResponse(response.status, response.body, response.content_type, headers)


class _AdminConnection(asyncio.Protocol):
    """One client: read one request within the time and size limits, answer it, close."""

    def __init__(self, server: AdminHttpServer) -> None:
        config = server.config
        self._server = server
        self._reader = RequestReader(
            head_bytes_max=config.head_bytes_max,
            body_bytes_max=config.body_bytes_max,
            headers_max=config.headers_max,
        )
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._done = False  # a request was read (or refused): nothing more is read
        self.peer = "?"

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        config = self._server.config
        if not self._server.admit(self):
            self._done = True
            self.respond(
                self._server.refusal(
                    self.peer,
                    AdminRequestError(
                        503,
                        f"{config.connections_max} admin connections open already "
                        "(connections_max)",
                    ),
                )
            )
            return
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(config.request_timeout_ms / 1000, self._too_slow)

    def data_received(self, data: bytes) -> None:
        if self._done:
            return
        self._reader.receive_data(data)
        try:
            request = self._reader.next_request()
        except AdminRequestError as exc:
            self._finish_reading()
            self.respond(self._server.refusal(self.peer, exc))
            return
        if request is not None:
            self._finish_reading()
            try:
                self._server.serve(self, request)
            except BKeeperError:  # connections_max requests still under way, or closed
                running = self._server.config.connections_max
                error = AdminRequestError(503, f"{running} admin requests are under way already")
                self.respond(self._server.refusal(self.peer, error, request))

    def eof_received(self) -> bool | None:
        if self._done:
            return True  # the client closed its side after its request: the answer may follow
        self._finish_reading()  # it gave up before its request was whole
        self.abort()
        return None

    def _finish_reading(self) -> None:
        self._done = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _too_slow(self) -> None:
        self._timer = None
        if self._done:
            return
        self._done = True
        timeout = self._server.config.request_timeout_ms
        error = AdminRequestError(
            408, f"the request was not complete within {timeout} ms (request_timeout_ms)"
        )
        self.respond(self._server.refusal(self.peer, error))

    def respond(self, response: HttpResponse) -> None:
        """Write the answer and close; a client that does not take it in time is dropped."""
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        transport.write(encode_response(response))
        transport.close()
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(self._server.config.response_timeout_ms / 1000, self.abort)

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self._done = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._server.forget(self)
