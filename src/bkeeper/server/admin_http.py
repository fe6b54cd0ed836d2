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
import contextlib
import errno
import json
import logging
import ssl
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import cast

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from bkeeper.common.errors import AdminRequestError, AuthenticationError, ConfigError
from bkeeper.common.tls import describe_tls_error
from bkeeper.common.validate import check_port, check_positive_ints
from bkeeper.server.admin_request import error_response
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
        self._handshakes: set[_TlsConnection] = set()

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
            return _TlsConnection(self, self.config.ssl_context)
        return server()

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


class _TlsConnection(asyncio.Protocol):
    """An HTTPS connection: TLS run here on memory BIOs (as asyncio's own SSL transport does:
    the same on uvloop and asyncio's loop, no bytes lost between accept and handshake), then
    aiohttp's protocol on :class:`_TlsTransport`. The handshake must end within
    ``tls_handshake_timeout_ms``; a failed one (plain HTTP sent to the port, a client
    certificate refused, ...) is one rate-limited line (peer and reason), and the connection is
    closed. Until its handshake ends the connection counts against ``connections_max``."""

    def __init__(self, server: AdminHttpServer, context: ssl.SSLContext) -> None:
        self._server = server
        self._context = context
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self.ssl_object = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self.raw: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._inner: asyncio.Protocol | None = None
        self._received = 0
        self._failed = False
        self._peer = "?"

    # -- the TCP connection's events ---------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        self._peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.raw = cast(asyncio.Transport, transport)
        self._server._handshakes.add(self)
        timeout_ms = self._server.config.tls_handshake_timeout_ms
        self._timer = asyncio.get_running_loop().call_later(
            timeout_ms / 1000, self._fail, f"no TLS handshake within {timeout_ms} ms"
        )

    def data_received(self, data: bytes) -> None:
        if self._failed:
            return
        self._received += len(data)
        self._incoming.write(data)
        if self._inner is None and not self._handshake():
            return
        self._decrypt()

    def eof_received(self) -> bool | None:
        if self._inner is None:
            return None  # close
        return self._inner.eof_received()

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._done_handshaking()
        if self._inner is not None:
            self._inner.connection_lost(exc)
        elif self._received and not self._failed:
            self.log("closed during the TLS handshake")

    # -- TLS -------------------------------------------------------------------------------
    def _handshake(self) -> bool:
        """Go on with the handshake; whether it is done (aiohttp's protocol then attached)."""
        try:
            self.ssl_object.do_handshake()
        except ssl.SSLWantReadError:
            self.flush()
            return False
        except (ssl.SSLError, OSError) as exc:
            self.flush()  # the alert, if any
            reason = describe_tls_error(exc)
            if "http request" in reason:
                reason += " (plain HTTP sent to the HTTPS admin port: use https://)"
            self._fail(reason)
            return False
        self.flush()
        self._done_handshaking()
        web_server = self._server._web
        if web_server is None:  # closing
            self.abort()
            return False
        inner = self._inner = web_server()
        transport = _TlsTransport(self)
        transport.set_protocol(inner)
        inner.connection_made(transport)
        return True

    def _decrypt(self) -> None:
        inner = self._inner
        while inner is not None and self.raw is not None and not self.raw.is_closing():
            try:
                chunk = self.ssl_object.read(TLS_READ_BYTES)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:  # the client's close_notify
                if not inner.eof_received():
                    self.raw.close()
                break
            except (ssl.SSLError, OSError) as exc:
                self._failed = True
                self.log(f"broke TLS: {describe_tls_error(exc)}")
                self.abort()
                break
            if not chunk:
                break
            inner.data_received(chunk)
        self.flush()

    def flush(self) -> None:
        """Send what TLS has written."""
        data = self._outgoing.read()
        if data and self.raw is not None and not self.raw.is_closing():
            self.raw.write(data)

    def _fail(self, reason: str) -> None:
        self._failed = True
        self.log(f"failed the TLS handshake: {reason}")
        self._done_handshaking()
        if self.raw is not None:
            self.raw.close()

    def log(self, what: str) -> None:
        self._server.refused.info("admin https: a connection from %s %s", self._peer, what)

    def _done_handshaking(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._server._handshakes.discard(self)

    def abort(self) -> None:
        self._done_handshaking()
        if self.raw is not None:
            self.raw.abort()


#: Plaintext read from TLS at once, at most.
TLS_READ_BYTES = 64 * 1024


class _TlsTransport(asyncio.Transport):
    """What aiohttp's protocol writes to and reads about: a :class:`_TlsConnection`."""

    def __init__(self, conn: _TlsConnection) -> None:
        super().__init__()
        self._conn = conn
        assert conn.raw is not None
        self._raw = conn.raw
        self._closing = False
        self._protocol: asyncio.BaseProtocol | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.is_closing():
            return
        view = memoryview(data)
        try:
            while view:
                written = self._conn.ssl_object.write(view)
                view = view[written:]
        except (ssl.SSLError, OSError) as exc:  # TLS closed or broken under the answer
            self._conn.log(f"broke TLS: {describe_tls_error(exc)}")
            self.abort()
            return
        self._conn.flush()

    def writelines(self, list_of_data: Iterable[bytes | bytearray | memoryview]) -> None:
        for data in list_of_data:
            self.write(data)

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        if not self._raw.is_closing():
            # close_notify; the client's is not awaited
            with contextlib.suppress(ssl.SSLError, OSError):
                self._conn.ssl_object.unwrap()
            self._conn.flush()
        self._raw.close()

    def abort(self) -> None:
        self._closing = True
        self._raw.abort()

    def is_closing(self) -> bool:
        return self._closing or self._raw.is_closing()

    def get_extra_info(self, name: str, default: object = None) -> object:
        ssl_object = self._conn.ssl_object
        if name == "ssl_object":
            return ssl_object
        if name == "sslcontext":
            return ssl_object.context
        if name == "peercert":
            return ssl_object.getpeercert()
        if name == "cipher":
            return ssl_object.cipher()
        if name == "compression":
            return ssl_object.compression()
        return self._raw.get_extra_info(name, default)

    def pause_reading(self) -> None:
        self._raw.pause_reading()

    def resume_reading(self) -> None:
        self._raw.resume_reading()

    def is_reading(self) -> bool:
        return self._raw.is_reading()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._raw.set_write_buffer_limits(high, low)

    def get_write_buffer_size(self) -> int:
        return self._raw.get_write_buffer_size()

    def can_write_eof(self) -> bool:
        return False

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        assert self._protocol is not None
        return self._protocol
