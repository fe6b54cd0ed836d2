"""The client's side of a new bookie connection's START_TLS and AUTH, before any request.

:func:`open_secure` connects, and when asked for:

1. **TLS**: sends a v3 ``START_TLS`` (whatever protocol the connection will speak, as Apache
   BookKeeper's client does), waits for EOK, then runs the TLS handshake
   (``loop.start_tls``, with the bookie's host as the name checked when hostname
   verification is on).
2. **AUTH**: exchanges ``AuthMessage``s (in the connection's protocol) with the client's
   auth plugin until the plugin is done, at most :data:`AUTH_ROUNDS_MAX` rounds.

It then hands the transport to the connection's protocol object (``transport.set_protocol``),
so the connection's own read path has no handshake state to check. Every frame of the
handshake is awaited with the connect timeout.

Before connecting, :func:`check_credentials` refuses what would only earn EUA, with one line
saying what is missing (``bkeeper.client.refusal``): an expired token, or a requirement the
bookie's registration publishes (TLS, a client certificate, a token) that the client lacks.

Failures, one line each: a bookie without TLS (START_TLS answered EBADREQ) or a failed TLS
handshake -> :class:`TlsError`; credentials refused (EUA, or the bookie closing the connection
during the exchange: the message tells a refused token from a TLS-only bookie that takes no
token in the clear), another plugin on the bookie (EBADVERSION or another plugin name,
``AuthDisabledPlugin`` included), an expired token or an unmet requirement ->
:class:`AuthenticationError`; no answer -> :class:`BookieUnavailableError`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from bkeeper.client.config import ClientConfig
from bkeeper.client.refusal import (
    ClientOffer,
    auth_disabled,
    auth_refused,
    auth_refused_unknown,
    expired_token,
    unmet_requirements,
)
from bkeeper.common.auth import (
    AUTH_DISABLED_PLUGIN,
    TOKEN_PLUGIN,
    ClientAuthProvider,
    TokenClientProvider,
    client_provider,
    peek_claims,
)
from bkeeper.common.clock import default_clock
from bkeeper.common.errors import (
    AuthenticationError,
    BookieUnavailableError,
    ProtocolError,
    TlsError,
)
from bkeeper.common.tasks import within
from bkeeper.common.tls import describe_tls_error
from bkeeper.meta.bookie_info import Endpoint
from bkeeper.wire import v2, v3
from bkeeper.wire.codes import Protocol, StatusCode
from bkeeper.wire.framing import FrameDecoder
from bkeeper.wire.messages import (
    AuthMessage,
    AuthRequest,
    AuthResponse,
    StartTlsRequest,
    StartTlsResponse,
)

__all__ = [
    "AUTH_ROUNDS_MAX",
    "ClientSecurity",
    "check_credentials",
    "client_security",
    "open_secure",
]

#: AUTH messages one connection sends before the exchange counts as failed.
AUTH_ROUNDS_MAX = 8
#: Frames the handshake buffers (it expects one answer at a time).
_FRAMES_MAX = 4


def _wall_s() -> float:
    """Seconds since the epoch, from the default :class:`~bkeeper.common.clock.Clock`."""
    return default_clock().wall_ms() / 1000.0


@dataclass(frozen=True)
class ClientSecurity:
    """What connections need of the client's TLS and auth settings (built once)."""

    ssl_context: ssl.SSLContext | None = None
    tls_handshake_timeout_s: float = 10.0
    auth: ClientAuthProvider | None = field(default=None, repr=False)
    #: what the client brings, for the messages of a refusal (``bkeeper.client.refusal``)
    offer: ClientOffer = field(default_factory=ClientOffer)
    #: seconds since the epoch, for a token's expiry
    clock: Callable[[], float] = field(default=_wall_s, repr=False, compare=False)

    @property
    def enabled(self) -> bool:
        return self.ssl_context is not None or self.auth is not None

    def current_offer(self) -> ClientOffer:
        """:attr:`offer` with the claims of the token presented now (a token file re-read
        since: :class:`~bkeeper.common.auth.TokenClientProvider`)."""
        auth = self.auth
        if isinstance(auth, TokenClientProvider):
            claims = peek_claims(auth.token)
            if claims != self.offer.token:
                return dataclasses.replace(self.offer, token=claims)
        return self.offer


def client_security(config: ClientConfig) -> ClientSecurity | None:
    """The connections' security of a client ``config`` (None: no TLS, no auth); a TLS file
    that cannot be loaded is a ``ConfigError``."""
    auth = client_provider(config.auth)
    if config.tls is None and auth is None:
        return None
    tls = config.tls
    token = config.auth.token if config.auth is not None else ""
    offer = ClientOffer(
        tls=tls is not None,
        client_cert=tls is not None and bool(tls.cert_file),
        auth_plugin=None if auth is None else auth.plugin_name,
        token=peek_claims(token) if auth is not None and auth.plugin_name == TOKEN_PLUGIN else None,
        # The token file's name, when the configuration says where the token came from.
        token_source="" if config.auth is None else config.auth.source,
    )
    return ClientSecurity(
        ssl_context=None if tls is None else tls.context(),
        tls_handshake_timeout_s=10.0 if tls is None else tls.handshake_timeout_ms / 1000.0,
        auth=auth,
        offer=offer,
    )


def check_credentials(
    address: str, endpoint: Endpoint | None, security: ClientSecurity | None
) -> None:
    """Before connecting to the bookie at ``address``: :class:`AuthenticationError` saying
    what is missing when the client's token has expired, or when the bookie's registered
    ``endpoint`` requires what the client lacks (it would only answer EUA)."""
    offer = ClientOffer() if security is None else security.current_offer()
    problem = None if security is None else expired_token(offer, security.clock())
    problem = problem or unmet_requirements(address, endpoint, offer)
    if problem is not None:
        raise AuthenticationError(problem)


class _Handshake(asyncio.Protocol):
    """Collects the frames answering the handshake's requests."""

    def __init__(self, max_frame_bytes: int) -> None:
        self._decoder = FrameDecoder(max_frame_bytes)
        self._frames: list[bytes] = []
        self._error: BaseException | None = None
        self._arrived = asyncio.Event()

    def data_received(self, data: bytes) -> None:
        try:
            self._decoder.receive_data(data)
            self._frames.extend(bytes(f) for f in self._decoder.frames())
        except ProtocolError as exc:
            self._error = exc
        if len(self._frames) > _FRAMES_MAX:
            self._error = ProtocolError("unexpected frames during the handshake")
        self._arrived.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self._error = self._error or exc or ConnectionResetError("connection closed")
        self._arrived.set()

    async def next_frame(self, timeout_s: float) -> bytes:
        while not self._frames:
            if self._error is not None:
                raise self._error
            self._arrived.clear()
            await within(self._arrived.wait(), timeout_s)
        return self._frames.pop(0)

    @property
    def leftover(self) -> bool:
        return bool(self._frames) or self._decoder.buffered_bytes > 0


async def open_secure(
    host: str,
    port: int,
    protocol: Protocol,
    security: ClientSecurity,
    make_protocol: Callable[[], asyncio.Protocol],
    timeout_s: float,
    max_frame_bytes: int,
) -> asyncio.Protocol:
    """Connect, run START_TLS and AUTH as ``security`` says, then hand the connection to
    ``make_protocol()`` (as if it had just connected) and return that protocol object."""
    loop = asyncio.get_running_loop()
    address = f"{host}:{port}"
    check_credentials(address, None, security)
    try:
        transport, hs = await within(
            loop.create_connection(lambda: _Handshake(max_frame_bytes), host, port), timeout_s
        )
    except (OSError, TimeoutError) as exc:
        raise BookieUnavailableError(f"cannot connect to bookie {address}: {exc}") from exc
    try:
        if security.ssl_context is not None:
            transport = await _start_tls(loop, transport, hs, host, address, security, timeout_s)
        if security.auth is not None:
            await _authenticate(transport, hs, protocol, address, security, timeout_s)
        if hs.leftover:
            raise ProtocolError(f"bookie {address}: unexpected data after the handshake")
    except BaseException:
        transport.abort()
        raise
    client = make_protocol()
    transport.set_protocol(client)
    client.connection_made(transport)
    return client


async def _answer(hs: _Handshake, address: str, timeout_s: float, what: str) -> bytes:
    try:
        return await hs.next_frame(timeout_s)
    except TimeoutError as exc:
        raise BookieUnavailableError(f"bookie {address}: no answer to {what}") from exc


async def _start_tls(
    loop: asyncio.AbstractEventLoop,
    transport: asyncio.BaseTransport,
    hs: _Handshake,
    host: str,
    address: str,
    security: ClientSecurity,
    timeout_s: float,
) -> Any:
    assert security.ssl_context is not None
    cast(asyncio.Transport, transport).write(v3.encode_request_frame(StartTlsRequest(txn_id=1)))
    try:
        frame = await _answer(hs, address, timeout_s, "START_TLS")
    except (OSError, ProtocolError) as exc:
        raise TlsError(f"bookie {address} closed the connection after START_TLS: {exc}") from exc
    try:
        response = v3.decode_response(frame)
    except ProtocolError as exc:
        raise TlsError(f"bookie {address} answered START_TLS with garbage: {exc}") from exc
    if not isinstance(response, StartTlsResponse) or response.status is not StatusCode.EOK:
        status = getattr(response, "status", None)
        name = status.name if isinstance(status, StatusCode) else type(response).__name__
        raise TlsError(f"bookie {address} refused START_TLS ({name}): is TLS on for that bookie?")
    try:
        return await loop.start_tls(
            cast(asyncio.Transport, transport),
            hs,
            security.ssl_context,
            server_hostname=host,
            ssl_handshake_timeout=security.tls_handshake_timeout_s,
        )
    except (OSError, ssl.SSLError, TimeoutError, EOFError) as exc:
        raise TlsError(
            f"TLS handshake with bookie {address} failed: {describe_tls_error(exc)}"
        ) from exc


async def _authenticate(
    transport: Any,
    hs: _Handshake,
    protocol: Protocol,
    address: str,
    security: ClientSecurity,
    timeout_s: float,
) -> None:
    provider = security.auth
    assert provider is not None
    tls_on = security.ssl_context is not None
    codec: Any = v2 if protocol is Protocol.V2 else v3
    name = provider.plugin_name
    session = provider.new_session(address)
    payload: bytes | None = session.first()
    for txn in range(1, AUTH_ROUNDS_MAX + 1):
        assert payload is not None
        transport.write(codec.encode_request_frame(AuthRequest(AuthMessage(name, payload), txn)))
        try:
            frame = await _answer(hs, address, timeout_s, "AUTH")
            response = codec.decode_response(frame)
        except (OSError, ProtocolError) as exc:
            message = auth_refused_unknown(address, security.current_offer(), tls_on=tls_on)
            raise AuthenticationError(message) from exc
        if not isinstance(response, AuthResponse):
            raise AuthenticationError(
                f"bookie {address} answered AUTH with {type(response).__name__}"
            )
        theirs = response.auth.plugin_name if response.auth is not None else ""
        if response.status is StatusCode.EUA:
            # A bookie names its plugin when its plugin refused the token; a TLS-only bookie
            # refuses AUTH in the clear unread, naming none.
            raise AuthenticationError(
                auth_refused(
                    address, security.current_offer(), tls_on=tls_on, plugin_answered=bool(theirs)
                )
            )
        if response.status is not StatusCode.EOK or (theirs and theirs != name):
            if theirs == AUTH_DISABLED_PLUGIN:
                # v2 has no status: a TLS-only bookie refusing AUTH in the clear answers so too
                maybe_tls = protocol is Protocol.V2 and not tls_on
                raise AuthenticationError(auth_disabled(address, name, maybe_tls=maybe_tls))
            raise AuthenticationError(
                f"bookie {address} uses auth plugin {theirs!r} ({response.status.name}), "
                f"this client {name!r}"
            )
        assert response.auth is not None
        payload = session.answer(bytes(response.auth.payload))
        if payload is None:
            return
    raise AuthenticationError(
        f"bookie {address}: authentication not done after {AUTH_ROUNDS_MAX} AUTH messages"
    )
