"""The bookie's admin HTTP server, on aiohttp: a route table, limits, JSON errors.

Routes are added with :meth:`AdminHttpServer.add_route` (``method, path, handler``, each
handler an ``async`` function from :class:`aiohttp.web.Request` to
:class:`aiohttp.web.StreamResponse`) before :meth:`~AdminHttpServer.start`; the bookie's own
endpoints are in :mod:`bkeeper.server.admin_routes`, the cluster's in :mod:`bkeeper.admin`,
``/metrics`` in :mod:`bkeeper.server.metrics`. Helpers for handlers (JSON answers, query and
body fields checked with a 400 naming the field) are in :mod:`bkeeper.server.admin_request`.

Security (docs/security.md, "Admin HTTP"):

- With ``authenticate`` (a bookie with authentication on) every request but those of
  :data:`OPEN_ROUTES` (and ``GET /metrics`` with ``metrics_open``) needs
  ``Authorization: Bearer <token>`` with credentials the bookie's auth plugin accepts: 401
  without, 403 with refused ones (the answer says why, never the token), GET included, and an
  unknown path too (nothing is answered to a client without credentials but the open routes).
  No open route answers ledger data or ledger metadata.
- Mutating requests (PUT, POST, DELETE) on a path that serves them are refused with 403 unless
  the server was started with ``writes_enabled`` (the bookie's ``http_admin_writes``,
  ``--http-admin-writes``); the answer names the option. No GET changes anything.
- With ``ssl_context`` (a bookie with TLS: its certificate, and client certificates required
  when it requires them) the server speaks HTTPS only: each connection runs the TLS handshake
  (at most ``tls_handshake_timeout_ms``) before aiohttp sees it; a failed one (plain HTTP sent
  to it, a client certificate refused) closes the connection with one rate-limited line.

Limits (:class:`AdminHttpConfig`): at most ``connections_max`` connections at once (one past
it is answered 503 and closed); request line and header fields at most ``head_bytes_max``
bytes and ``headers_max`` headers (aiohttp answers 400); a body at most ``body_bytes_max``
(413, from its ``Content-Length`` before any of it is read); a connection without a whole
request head ``request_timeout_ms`` after it opened is closed, a body not whole by then is
answered 408; a handler not done ``handler_timeout_ms`` after the request came is answered
503 (a route may take no limit: a GC pass runs to its end, even if its client leaves).
Every refusal is a JSON body ``{"error": ..., "status": ...}`` naming the problem (unknown
path 404, a method the path does not serve 405 with ``Allow``), logged in one rate-limited
line. A handler that fails answers 500 with its error (and logs its traceback); the bookie
stays up whatever a client sends.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import cast

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from bkeeper.common.errors import AdminRequestError, AuthenticationError, ConfigError
from bkeeper.common.validate import check_port, check_positive_ints
from bkeeper.server.admin_request import error_response
from bkeeper.server.admin_tls import TlsConnection
from bkeeper.server.metrics import METRICS_PATH
from bkeeper.server.ratelimit import RateLimitedLog

__all__ = [
    "METRICS_ROUTE",
    "MUTATING_METHODS",
    "OPEN_ROUTES",
    "AdminHttpConfig",
    "AdminHttpServer",
    "Handler",
]

log = logging.getLogger(__name__)

#: One route's work: the request in, the answer out.
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: The routes served without credentials when the bookie has authentication on: liveness and
#: readiness (what a process supervisor or a load balancer probes, without a token). Neither
#: answers ledger data, ledger metadata or the configuration. docs/security.md lists them.
OPEN_ROUTES: frozenset[tuple[str, str]] = frozenset(
    {("GET", "/heartbeat"), ("GET", "/api/v1/bookie/is_ready")}
)
#: Open too when the server is started with ``metrics_open`` (the bookie's
#: ``http_metrics_open``, ``--http-metrics-open``: Prometheus scrapes without a token).
METRICS_ROUTE = ("GET", METRICS_PATH)
#: Methods that change something: refused (403) unless writes are enabled.
MUTATING_METHODS = frozenset({"PUT", "POST", "DELETE", "PATCH"})
#: The option that enables them, as the 403 names it.
WRITES_OPTION = "http_admin_writes (--http-admin-writes)"
#: Lines about refused requests: at most this many a second, in bursts of this many.
REFUSED_LOG_LINES_PER_S = 5
REFUSED_LOG_BURST = 20
#: On close, requests under way get this long to finish before they are cancelled.
SHUTDOWN_WAIT_S = 1.0
#: After answering a request whose body it did not read (413, 408), the server reads what
#: the client still sends for at most this long (so that it can read the answer), then closes
#: (aiohttp's default: 10 s of a connection held for nothing).
LINGER_S = 1.0
#: A route registered with this time limit has none.
NO_TIME_LIMIT: None = None


@dataclass(frozen=True)
class AdminHttpConfig:
    """Where the admin server listens (port 0: any free port), whether it takes mutating
    requests, and its limits."""

    host: str
    port: int
    writes_enabled: bool = False
    connections_max: int = 64
    head_bytes_max: int = 16 * 1024
    headers_max: int = 64
    body_bytes_max: int = 64 * 1024
    request_timeout_ms: int = 10_000
    handler_timeout_ms: int = 60_000
    #: Credentials (the bearer token) -> identity, or ``AuthenticationError``; None: no
    #: authentication asked of any request.
    authenticate: Callable[[bytes], str] | None = field(default=None, repr=False, compare=False)
    #: ``GET /metrics`` without credentials even with ``authenticate``.
    metrics_open: bool = False
    #: HTTPS with this (server-side) context; None: plain HTTP.
    ssl_context: ssl.SSLContext | None = field(default=None, repr=False, compare=False)
    tls_handshake_timeout_ms: int = 10_000

    def __post_init__(self) -> None:
        check_port("http_port", self.port)
        check_positive_ints(
            self,
            "tls_handshake_timeout_ms",
            "connections_max",
            "head_bytes_max",
            "headers_max",
            "body_bytes_max",
            "request_timeout_ms",
            "handler_timeout_ms",
        )


@dataclass(frozen=True)
class _Route:
    handler: Handler
    timeout_s: float | None


class AdminHttpServer:
    """``add_route(...)``, ``await bind()`` (the port is then known), ``await start()``,
    ``await aclose()``."""

    def __init__(self, config: AdminHttpConfig) -> None:
        self.config = config
        self.port = config.port
        self._routes: dict[tuple[str, str], _Route] = {}
        self._listener: asyncio.Server | None = None
        self._runner: web.AppRunner | None = None
        self._web: web.Server | None = None
        self.refused = RateLimitedLog(
            log, REFUSED_LOG_LINES_PER_S, REFUSED_LOG_BURST, what="lines about admin requests"
        )
        #: TLS handshakes under way (they count against ``connections_max``).
        self._handshakes: set[TlsConnection] = set()

    def add_route(
        self,
        method: str,
        path: str,
        handler: Handler,
        *,
        timeout_ms: int | None = 0,
    ) -> None:
        """Serve ``method path`` with ``handler``; before :meth:`start`. ``timeout_ms``: the
        handler's time limit (0, the default: ``handler_timeout_ms``; ``None``: none)."""
        if self._runner is not None:
            raise RuntimeError(f"{method} {path}: routes are added before the server starts")
        key = (method.upper(), path)
        if key in self._routes:
            raise ValueError(f"{method} {path}: a route is there already")
        if timeout_ms is None:
            timeout_s: float | None = None
        elif isinstance(timeout_ms, int) and timeout_ms >= 0:
            timeout_s = (timeout_ms or self.config.handler_timeout_ms) / 1000
        else:
            raise ValueError(f"timeout_ms: a number of ms >= 0 or None, got {timeout_ms!r}")
        self._routes[key] = _Route(handler, timeout_s)

    def routes(self) -> list[tuple[str, str]]:
        """Every ``(method, path)`` served, sorted."""
        return sorted(self._routes)

    def open_routes(self) -> frozenset[tuple[str, str]]:
        """The routes answered without credentials when ``authenticate`` is set (served or
        not): :data:`OPEN_ROUTES`, and :data:`METRICS_ROUTE` with ``metrics_open``."""
        return OPEN_ROUTES | {METRICS_ROUTE} if self.config.metrics_open else OPEN_ROUTES

    @property
    def scheme(self) -> str:
        """``https`` with TLS, else ``http``."""
        return "http" if self.config.ssl_context is None else "https"

    def paths(self) -> list[str]:
        return sorted({path for _, path in self._routes})

    def methods(self, path: str) -> list[str]:
        return sorted(method for method, p in self._routes if p == path)

    @property
    def connections(self) -> int:
        return 0 if self._web is None else len(self._web.connections)

    async def bind(self) -> int:
        """Listen (not serving yet); the port. ``ConfigError`` naming the address and the
        ``http_port`` option when it cannot."""
        config = self.config
        where = f"{config.host}:{config.port} (http_port, the admin HTTP server)"
        try:
            self._listener = await asyncio.get_running_loop().create_server(
                self._new_connection,
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
        sockets = self._listener.sockets
        if sockets:
            self.port = sockets[0].getsockname()[1]
        return self.port

    async def start(self) -> None:
        """Serve the routes added (binding first if :meth:`bind` was not called)."""
        if self._listener is None:
            await self.bind()
        assert self._listener is not None
        config = self.config
        app = web.Application(middlewares=[self._guard], client_max_size=config.body_bytes_max)
        for (method, path), route in self._routes.items():
            app.router.add_route(method, path, _time_limited(method, path, route))
        runner = web.AppRunner(
            app,
            handle_signals=False,
            access_log=None,
            shutdown_timeout=SHUTDOWN_WAIT_S,
            keepalive_timeout=config.request_timeout_ms / 1000,
            max_line_size=config.head_bytes_max,
            max_field_size=config.head_bytes_max,
            max_headers=config.headers_max,
            logger=_ProtocolLog(self.refused),
            lingering_time=LINGER_S,
        )
        await runner.setup()
        self._runner, self._web = runner, runner.server
        await self._listener.start_serving()

    async def aclose(self) -> None:
        """Stop listening, close every connection; requests under way get
        ``SHUTDOWN_WAIT_S`` to finish, then are cancelled."""
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        for handshake in list(self._handshakes):
            handshake.abort()
        runner = self._runner
        if runner is not None:
            await runner.cleanup()
            self._web = None
        if listener is not None:
            await listener.wait_closed()

    # -- connections -------------------------------------------------------------------
    def _new_connection(self) -> asyncio.BaseProtocol:
        server = self._web
        limit = self.config.connections_max
        if server is None:  # closed meanwhile
            return _Refusal(self, 503, "the admin server is closing")
        if len(server.connections) + len(self._handshakes) >= limit:
            message = f"{limit} admin connections open already (connections_max)"
            if self.config.ssl_context is not None:
                return _Refusal(self, 503, message, answer=False)  # no handshake: no answer
            return _Refusal(self, 503, message)
        if self.config.ssl_context is not None:
            return TlsConnection(
                self.config.ssl_context,
                self.config.tls_handshake_timeout_ms,
                self._handshakes,
                self._web_protocol,
                self.refused,
            )
        return server()

    def _web_protocol(self) -> asyncio.Protocol | None:
        """The HTTP protocol of a new connection (its TLS handshake done); None: closing."""
        return None if self._web is None else cast(asyncio.Protocol, self._web())

    # -- every request ------------------------------------------------------------------
    @web.middleware
    async def _guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await self._answer(request, handler)
        except AdminRequestError as exc:
            return self._refusal(request, exc)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            return self._refusal(request, AdminRequestError(exc.status, exc.text or exc.reason))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("admin %s %s failed", request.method, request.path)
            return error_response(500, f"{type(exc).__name__}: {exc}")

    async def _answer(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        method, path = request.method, request.path
        missing = request.match_info.http_exception
        authenticate = self.config.authenticate
        if authenticate is not None and not self._is_open(request):
            self._authenticate(request, authenticate)
        if isinstance(missing, web.HTTPMethodNotAllowed):
            allowed = ", ".join(sorted(missing.allowed_methods))
            raise _MethodNotAllowedError(
                f"{method} is not served on {path}; use {allowed}", allowed
            )
        if missing is not None:
            raise AdminRequestError(404, f"no such path: {path}")
        if method in MUTATING_METHODS and not self.config.writes_enabled:
            raise AdminRequestError(
                403,
                f"{method} {path} changes the bookie or the cluster: the admin server takes "
                f"no such request unless started with {WRITES_OPTION}",
            )
        await self._read_body(request)
        return await handler(request)

    def _is_open(self, request: web.Request) -> bool:
        """Whether the route ``request`` matched (as routed, not as spelled) is open."""
        if request.match_info.http_exception is not None:
            return False
        route = request.match_info.route
        return (route.method, route.resource.canonical if route.resource else "") in (
            self.open_routes()
        )

    def _authenticate(self, request: web.Request, authenticate: Callable[[bytes], str]) -> None:
        scheme, _, credentials = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not credentials.strip():
            raise AdminRequestError(
                401,
                f"{request.method} {request.path} needs an authenticated identity: send "
                "'Authorization: Bearer <token>' with a token this bookie admits (the "
                "bkeeper shell commands send the one of --auth-token-file or "
                "BKEEPER_AUTH_TOKEN_FILE)",
            )
        try:
            identity = authenticate(credentials.strip().encode("ascii", "replace"))
        except AuthenticationError as exc:
            raise AdminRequestError(403, f"credentials refused: {exc}") from exc
        level = logging.INFO if request.method in MUTATING_METHODS else logging.DEBUG
        log.log(level, "admin %s %s by %r", request.method, request.path, identity)

    async def _read_body(self, request: web.Request) -> None:
        """Take the whole body now (handlers then read it from memory), within the limits."""
        limit = self.config.body_bytes_max
        length = request.content_length
        if length is not None and length > limit:
            raise AdminRequestError(
                413, f"a body of {length} bytes, more than {limit} (body_bytes_max)"
            )
        if not request.body_exists:
            return
        timeout_ms = self.config.request_timeout_ms
        scope = asyncio.timeout(timeout_ms / 1000)
        try:
            async with scope:
                await request.read()
        except TimeoutError:
            if not scope.expired():
                raise
            raise AdminRequestError(
                408, f"the body was not complete within {timeout_ms} ms (request_timeout_ms)"
            ) from None
        except web.HTTPRequestEntityTooLarge:
            raise AdminRequestError(
                413, f"a body of more than {limit} bytes (body_bytes_max)"
            ) from None

    def _refusal(self, request: web.Request, error: AdminRequestError) -> web.Response:
        """The answer to a refused request, logged (rate-limited)."""
        peer = request.remote or "?"
        self.refused.info(
            "admin http: %s %s from %s refused (%d): %s",
            request.method,
            request.path,
            peer,
            error.status,
            error,
        )
        response = error_response(error.status, str(error))
        if isinstance(error, _MethodNotAllowedError):
            response.headers["Allow"] = error.allowed
        if error.status in (408, 413):
            # The body was not read (whole): the connection cannot carry another request.
            # Closing it answers the client at once instead of after request_timeout_ms.
            response.force_close()
        return response


class _ProtocolLog:
    """What aiohttp logs about a request it could not parse (a traceback each, at ERROR):
    one rate-limited line naming the problem instead, the client having been answered 400.
    Anything else it logs (a failure of its own) keeps its traceback."""

    def __init__(self, lines: RateLimitedLog) -> None:
        self._lines = lines

    def exception(self, message: str, *args: object, exc_info: object = None, **_: object) -> None:
        if isinstance(exc_info, HttpProcessingError):
            problem = " ".join(str(exc_info).split())
            self._lines.warning("admin http: " + message + " refused: %s", *args, problem)
            return
        log.error("admin http: " + message, *args, exc_info=exc_info)  # type: ignore[arg-type]

    def debug(self, message: str, *args: object, **kwargs: object) -> None:
        log.debug("admin http: " + message, *args)


def _time_limited(method: str, path: str, route: _Route) -> Handler:
    """``route``'s handler within its time limit (503 past it)."""
    handler, timeout_s = route.handler, route.timeout_s
    if timeout_s is None:
        return handler
    limit_ms = round(timeout_s * 1000)

    async def limited(request: web.Request) -> web.StreamResponse:
        scope = asyncio.timeout(timeout_s)
        try:
            async with scope:
                return await handler(request)
        except TimeoutError:
            if not scope.expired():
                raise  # the handler's own
            raise AdminRequestError(
                503, f"{method} {path} did not finish within {limit_ms} ms (handler_timeout_ms)"
            ) from None

    return limited


class _MethodNotAllowedError(AdminRequestError):
    """405, with the methods the path serves (the ``Allow`` header)."""

    def __init__(self, message: str, allowed: str) -> None:
        super().__init__(405, message)
        self.allowed = allowed


class _Refusal(asyncio.Protocol):
    """A connection refused before aiohttp sees it: one JSON answer (unless ``answer`` is
    false: an HTTPS connection, refused before its handshake), then closed."""

    def __init__(
        self, server: AdminHttpServer, status: int, message: str, *, answer: bool = True
    ) -> None:
        self._server = server
        self._status = status
        self._message = message
        self._answer = answer

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        where = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self._server.refused.info(
            "admin http: a connection from %s refused (%d): %s",
            where,
            self._status,
            self._message,
        )
        if not self._answer:
            transport.close()
            return
        body = json.dumps({"error": self._message, "status": self._status}).encode() + b"\n"
        head = (
            f"HTTP/1.1 {self._status} {HTTPStatus(self._status).phrase}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n"
        )
        writer = cast(asyncio.WriteTransport, transport)  # uvloop's is not a subclass
        writer.write(head.encode("ascii") + body)
        writer.close()
