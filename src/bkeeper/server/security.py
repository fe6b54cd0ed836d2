"""The bookie's side of TLS (START_TLS) and authentication (AUTH), per connection.

:class:`BookieSecurity` is built once per bookie from its ``tls`` and ``auth`` settings
(``None`` when both are off: connections then never look at it, and the v2 add lane is
exactly what it is without security). A connection of a bookie with security keeps a
:class:`ConnectionSecurity` and routes its requests through :meth:`ConnectionSecurity.dispatch`
until it is *admitted*; from then on its v2 adds go straight to the handlers again.

Rules (a connection is admitted once both hold):

- **Authenticated**: with an auth plugin, after an AUTH exchange the plugin accepted (the
  connection then carries the plugin's ``identity``); without one, at once.
- **Encrypted**, when TLS is ``required``: after START_TLS and a completed handshake.

Until then every request but START_TLS and AUTH is answered EUA (v2 adds too), and the first
refusal on a connection logs one (rate-limited) line. AUTH on a TLS-only bookie before TLS is
refused the same way (credentials are not taken in the clear). Credentials refused by the
plugin: EUA (v3) and the connection is closed, with one line naming the peer and what was
wrong (never the credentials); an AUTH for another plugin: EBADVERSION with this bookie's
plugin name (as Apache BookKeeper answers it), and the connection is closed.

START_TLS (v3 only, as in BookKeeper): answered EBADREQ when the bookie has no TLS, when TLS
is already on, or while other requests are in flight; else answered EOK in the clear, and the
connection then runs the TLS handshake (``loop.start_tls``, bounded by the TLS handshake
timeout). Frames after START_TLS and before the handshake ends break the protocol and close the
connection. After the handshake the next frame chooses the protocol again (a Java client on
v2 sends START_TLS in v3 and then speaks v2), and a failed handshake closes the connection
with one line (peer and reason).

Token secret rotation (docs/security.md, "Rotating the token secret"): with a token secret
file (``ServerAuthConfig.token_secret_file``) a :class:`TokenSecretReloader` looks, when a
connection (or an admin HTTP request) authenticates and at most every
``token_secret_refresh_ms``, whether the file changed (its inode, size, modification or change
time) and if so reads it again: its secrets are then the ones tokens are checked against, and
the bookie logs ``token secrets reloaded: N`` (a count, never a secret). A file that became
unreadable or invalid keeps the secrets in use and logs one line saying why (not again until it
changes again). Connections admitted before keep their admission. :meth:`BookieSecurity.run`
also looks every ``token_secret_refresh_ms`` (when the bookie runs it), so that an idle bookie
reloads, and logs it, without waiting for a connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bkeeper.common.auth import (
    ServerAuthConfig,
    ServerAuthProvider,
    ServerAuthSession,
    TokenServerProvider,
    read_token_secret_file,
    server_provider,
)
from bkeeper.common.clock import Clock, default_clock
from bkeeper.common.errors import AuthenticationError, ConfigError
from bkeeper.common.tasks import within
from bkeeper.common.tls import describe_tls_error
from bkeeper.server.handlers import error_response
from bkeeper.wire import v3
from bkeeper.wire.codes import Protocol, StatusCode
from bkeeper.wire.messages import (
    AuthMessage,
    AuthRequest,
    AuthResponse,
    Request,
    StartTlsRequest,
    StartTlsResponse,
)

if TYPE_CHECKING:
    from bkeeper.server.config import BookieConfig
    from bkeeper.server.connection import BookieConnection

__all__ = ["BookieSecurity", "ConnectionSecurity", "TokenSecretReloader"]

log = logging.getLogger(__name__)


#: What tells a changed file from the same: inode, size, modification and change times (ns).
_FileStamp = tuple[int, int, int, int]


def _stamp(info: os.stat_result) -> _FileStamp:
    return (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


class TokenSecretReloader:
    """Keeps a token provider's secrets those of its secret file (module doc): call
    :meth:`maybe_reload` before authenticating; it looks at the file at most every
    ``refresh_s`` (by ``clock``) and reads it only when it changed."""

    def __init__(
        self,
        provider: TokenServerProvider,
        path: str,
        refresh_s: float,
        clock: Clock | None = None,
    ) -> None:
        self._provider = provider
        self._path = path
        self.refresh_s = refresh_s
        self._clock: Clock = clock if clock is not None else default_clock()
        self._stamp: _FileStamp | None = None
        self._problem = ""
        self._next_check_s = self._clock.monotonic() + refresh_s
        # The file as it is now (stat, then read: a change after the stat is seen at the
        # first check); if it cannot be read now, the secrets the bookie was started with.
        try:
            stamp = _stamp(os.stat(path))
            provider.secrets = read_token_secret_file(path)
            self._stamp = stamp
        except (OSError, ConfigError):
            pass

    def maybe_reload(self) -> None:
        now = self._clock.monotonic()
        if now < self._next_check_s:
            return
        self._next_check_s = now + self.refresh_s
        try:
            stamp: _FileStamp | None = _stamp(os.stat(self._path))
        except OSError as exc:
            stamp = None
            problem = f"token secret file {self._path}: {exc.strerror or exc}"
        else:
            if stamp == self._stamp:
                return
            try:
                secrets = read_token_secret_file(self._path)
            except ConfigError as exc:
                problem = str(exc)
            else:
                self._stamp, self._problem = stamp, ""
                self._provider.secrets = secrets
                log.info("token secrets reloaded: %d (from %s)", len(secrets), self._path)
                return
        self._stamp = stamp
        if problem != self._problem:  # one line per problem, not one per check
            self._problem = problem
            log.warning(
                "token secrets not reloaded, keeping the %d in use: %s",
                len(self._provider.secrets),
                problem,
            )


@dataclass(frozen=True)
class BookieSecurity:
    """What a bookie's connections need of its TLS and auth settings (built once)."""

    ssl_context: ssl.SSLContext | None
    tls_required: bool
    tls_handshake_timeout_s: float
    auth: ServerAuthProvider | None
    #: With a token secret file: keeps ``auth``'s secrets the file's (module doc).
    secret_reloader: TokenSecretReloader | None = None

    @classmethod
    def from_config(cls, config: BookieConfig, clock: Clock | None = None) -> BookieSecurity | None:
        """None when neither TLS nor auth is on; ``ConfigError`` if a TLS file won't load.
        ``clock`` times the token secret file's reloads."""
        auth = server_provider(config.auth)
        if config.tls is None and auth is None:
            return None
        tls = config.tls
        return cls(
            ssl_context=None if tls is None else tls.context(),
            tls_required=tls is not None and tls.required,
            tls_handshake_timeout_s=10.0 if tls is None else tls.handshake_timeout_ms / 1000.0,
            auth=auth,
            secret_reloader=_reloader(config.auth, auth, clock),
        )

    def refresh_credentials(self) -> None:
        """Before an authentication: pick up a changed token secret file (module doc)."""
        if self.secret_reloader is not None:
            self.secret_reloader.maybe_reload()

    async def run(self, stopping: asyncio.Event) -> None:
        """Look at the token secret file every refresh interval until ``stopping`` is set,
        so that an idle bookie reloads (and logs it) too; returns at once without one."""
        reloader = self.secret_reloader
        if reloader is None:
            return
        failed = False
        while not stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await within(stopping.wait(), reloader.refresh_s)
            if stopping.is_set():
                return
            try:
                reloader.maybe_reload()
            except Exception:  # a bug here must not stop the bookie: say so (once), go on
                if not failed:
                    log.exception("token secret refresh failed; keeping the secrets in use")
                failed = True

    @property
    def authenticate(self) -> Callable[[bytes], str] | None:
        """Credentials -> identity through the auth plugin (one message; the admin HTTP
        API's bearer tokens); None without authentication."""
        auth = self.auth
        if auth is None:
            return None
        refresh = self.refresh_credentials

        def check(credentials: bytes) -> str:
            refresh()
            step = auth.new_session("admin http").process(credentials)
            if step.identity is None:
                raise AuthenticationError("the credentials need more than one message")
            return step.identity

        return check


def _reloader(
    config: ServerAuthConfig | None, auth: ServerAuthProvider | None, clock: Clock | None
) -> TokenSecretReloader | None:
    if config is None or not config.token_secret_file:
        return None
    if not isinstance(auth, TokenServerProvider):
        return None
    return TokenSecretReloader(
        auth, config.token_secret_file, config.token_secret_refresh_ms / 1000.0, clock
    )


class ConnectionSecurity:
    """One connection's TLS and authentication state (module doc)."""

    def __init__(self, security: BookieSecurity, conn: BookieConnection) -> None:
        self._security = security
        self._conn = conn
        self.tls_active = False
        self.upgrading = False
        #: The identity the auth plugin accepted (None: not authenticated yet).
        self.identity: str | None = None if security.auth is not None else ""
        self._session: ServerAuthSession | None = None
        self._refusals = 0

    @property
    def admitted(self) -> bool:
        return self.identity is not None and (self.tls_active or not self._security.tls_required)

    @property
    def refusals(self) -> int:
        """Requests answered EUA for want of authentication (or of TLS) so far."""
        return self._refusals

    def dispatch(self, request: Request, size: int) -> bool:
        """Handle ``request`` if it is START_TLS, AUTH, or refused; False: the handlers' own."""
        conn = self._conn
        if self.upgrading:
            conn.abort("request received after START_TLS before the TLS handshake")
            return True
        kind = type(request)
        if kind is StartTlsRequest:
            assert isinstance(request, StartTlsRequest)
            self._start_tls(request, size)
            return True
        if kind is AuthRequest and self._security.auth is not None:
            assert isinstance(request, AuthRequest)
            self._auth(request, size)
            return True
        if self.admitted:
            return False
        self.refuse()
        conn.respond(error_response(request, StatusCode.EUA), size)
        return True

    def refuse(self) -> None:
        """Count (and log once per connection) a request refused before admission; the
        caller answers it EUA."""
        self._refusals += 1
        if self._refusals == 1:
            conn = self._conn
            conn.log_client_error("EUA to %s: %s", conn.peer, self.refusal_reason)

    @property
    def refusal_reason(self) -> str:
        if self._security.tls_required and not self.tls_active:
            return "request before START_TLS on a TLS-only bookie"
        return "request before a successful AUTH exchange"

    # -- AUTH ------------------------------------------------------------------------------
    def _auth(self, request: AuthRequest, size: int) -> None:
        conn = self._conn
        provider = self._security.auth
        assert provider is not None
        if self._security.tls_required and not self.tls_active:
            self.refuse()
            conn.respond(AuthResponse(StatusCode.EUA, txn_id=request.txn_id), size)
            return
        name = provider.plugin_name
        if request.auth.plugin_name != name:
            conn.respond(
                AuthResponse(StatusCode.EBADVERSION, AuthMessage(name), request.txn_id), size
            )
            conn.close_after_flush(
                f"AUTH for plugin {request.auth.plugin_name[:64]!r}, this bookie uses {name!r}"
            )
            return
        if self._session is None:
            self._security.refresh_credentials()
            self._session = provider.new_session(conn.peer)
        try:
            step = self._session.process(bytes(request.auth.payload))
        except AuthenticationError as exc:
            if conn.protocol is not Protocol.V2:  # a v2 AUTH answer has no status: none
                conn.respond(AuthResponse(StatusCode.EUA, AuthMessage(name), request.txn_id), size)
            conn.close_after_flush(f"authentication refused: {exc}")
            return
        if step.identity is not None:
            self.identity = step.identity
            log.debug("connection %s authenticated as %r", conn.peer, step.identity)
        conn.respond(
            AuthResponse(StatusCode.EOK, AuthMessage(name, step.reply), request.txn_id), size
        )
        if self.admitted:
            conn.admitted()

    # -- START_TLS -------------------------------------------------------------------------
    def _start_tls(self, request: StartTlsRequest, size: int) -> None:
        conn = self._conn
        context = self._security.ssl_context
        problem = ""
        if context is None:
            problem = "START_TLS to a bookie without TLS"
        elif self.tls_active:
            problem = "START_TLS on a connection already encrypted"
        elif conn.requests_in_flight > 1 or conn.queued_responses:
            problem = "START_TLS with other requests in flight"
        if problem:
            conn.log_client_error("EBADREQ to %s: %s", conn.peer, problem)
            conn.respond(StartTlsResponse(StatusCode.EBADREQ, request.txn_id), size)
            return
        assert context is not None
        # Answered in the clear (always v3, whatever the connection spoke), then the handshake.
        frame = v3.encode_response_frame(StartTlsResponse(StatusCode.EOK, request.txn_id))
        conn.write_now(frame, size)
        self.upgrading = True
        conn.spawn_upgrade(self._upgrade(context))

    async def _upgrade(self, context: ssl.SSLContext) -> None:
        conn = self._conn
        try:
            await conn.upgrade_transport(context, self._security.tls_handshake_timeout_s)
        except (OSError, ssl.SSLError, TimeoutError, EOFError) as exc:
            conn.abort(f"TLS handshake failed: {describe_tls_error(exc)}")
            return
        except Exception as exc:  # a bookie bug: say so (rate-limited), keep serving others
            conn.log_internal_error("TLS upgrade of %s failed", conn.peer)
            conn.abort(f"TLS upgrade failed: {exc!r}")
            return
        self.upgrading = False
        self.tls_active = True
        log.debug("connection %s: TLS on (%s)", conn.peer, conn.tls_version)
        if self.admitted:
            conn.admitted()
