"""Authentication plugins of the bookie protocol (BookKeeper's AUTH exchange), both sides.

The exchange (``AuthMessage {authPluginName, payload}``, v2 opcode 3 or v3 AUTH op 5) runs on
a new connection before any other request (after START_TLS when TLS is on). The client sends
its plugin's first payload; the bookie's plugin answers each message with a payload of its
own; the client's plugin reads each answer and says whether to send another message or that
it is done. The bookie marks the connection authenticated, with an identity, when its plugin
accepts; until then it answers every request but START_TLS and AUTH with EUA.

Interfaces (a plugin implements one side or both; :data:`SERVER_PLUGINS` and
:data:`CLIENT_PLUGINS` map plugin names to factories taking the side's config: a new plugin is
one entry in each, and its name in ``ServerAuthConfig.plugin`` / ``ClientAuthConfig.plugin``):

- server: :class:`ServerAuthProvider` (one per bookie) makes a :class:`ServerAuthSession`
  per connection; ``session.process(payload)`` returns an :class:`AuthStep` (the reply, and
  the identity once authenticated) or raises :class:`AuthenticationError` (credentials
  refused: the bookie answers EUA and closes the connection).
- client: :class:`ClientAuthProvider` makes a :class:`ClientAuthSession` per connection:
  ``first()`` is the first payload, ``answer(reply)`` the next payload or None when done.

Plugins shipped:

- :data:`AUTH_DISABLED_PLUGIN` ("AuthDisabledPlugin"): BookKeeper's default. A client with it
  sends no AUTH message (its connections count as authenticated on a bookie without auth);
  a bookie with it accepts every connection at once.
- :data:`TOKEN_PLUGIN` ("BKeeperToken"): a token signed with HMAC-SHA256 by a secret the
  bookies hold; it names a subject (the identity) and an expiry. Format (ASCII):
  ``v1.<base64url(JSON {"sub": ..., "exp": unix seconds})>.<base64url(HMAC-SHA256(secret,
  "v1." + claims part))>``. The bookie checks the signature (constant time), the expiry
  (with ``clock_skew_s`` of grace) and the subject (``allowed_subjects``, when given), and
  answers with an empty payload. Secrets and tokens are never logged: their fields are left
  out of ``repr`` and errors name only what was wrong ("expired at ...", "bad signature").
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from bkeeper.common.errors import AuthenticationError, ConfigError

__all__ = [
    "AUTH_DISABLED_PLUGIN",
    "CLIENT_PLUGINS",
    "SERVER_PLUGINS",
    "TOKEN_PLUGIN",
    "TOKEN_SECRET_BYTES_MIN",
    "AuthStep",
    "ClientAuthConfig",
    "ClientAuthProvider",
    "ClientAuthSession",
    "ServerAuthConfig",
    "ServerAuthProvider",
    "ServerAuthSession",
    "TokenClaims",
    "client_provider",
    "make_token",
    "peek_claims",
    "server_provider",
    "verify_token",
]

AUTH_DISABLED_PLUGIN = "AuthDisabledPlugin"
TOKEN_PLUGIN = "BKeeperToken"
#: A token secret shorter than this is refused (HMAC-SHA256's block is 64 bytes; 32 random
#: bytes are well beyond guessing).
TOKEN_SECRET_BYTES_MIN = 32
#: Tokens (and AUTH payloads the token plugin reads) longer than this are refused unread.
TOKEN_BYTES_MAX = 4096
_TOKEN_VERSION = "v1"


@dataclass(frozen=True)
class AuthStep:
    """A bookie plugin's answer to one AUTH message: ``reply`` goes back to the client; the
    connection is authenticated as ``identity`` when it is not None."""

    reply: bytes
    identity: str | None = None


class ServerAuthSession(Protocol):
    def process(self, payload: bytes) -> AuthStep:
        """The answer to the client's message; :class:`AuthenticationError` to refuse."""
        ...


class ServerAuthProvider(Protocol):
    @property
    def plugin_name(self) -> str: ...

    def new_session(self, peer: str) -> ServerAuthSession: ...


class ClientAuthSession(Protocol):
    def first(self) -> bytes:
        """The payload of the first AUTH message."""
        ...

    def answer(self, payload: bytes) -> bytes | None:
        """The next payload after the bookie's ``payload``, or None: authenticated."""
        ...


class ClientAuthProvider(Protocol):
    @property
    def plugin_name(self) -> str: ...

    def new_session(self, address: str) -> ClientAuthSession: ...


# -- configuration -----------------------------------------------------------------------
@dataclass(frozen=True)
class ServerAuthConfig:
    """A bookie's authentication. ``plugin``: a name in :data:`SERVER_PLUGINS`.
    For the token plugin: ``token_secret`` (at least :data:`TOKEN_SECRET_BYTES_MIN` bytes),
    ``allowed_subjects`` (empty: any subject the secret signed), ``clock_skew_s``."""

    plugin: str = TOKEN_PLUGIN
    token_secret: bytes = field(default=b"", repr=False)
    allowed_subjects: frozenset[str] = frozenset()
    clock_skew_s: int = 30

    def __post_init__(self) -> None:
        if self.plugin not in SERVER_PLUGINS:
            raise ConfigError(
                f"auth.plugin: {self.plugin!r} is not one of {', '.join(sorted(SERVER_PLUGINS))}"
            )
        if self.plugin == TOKEN_PLUGIN:
            _check_secret("auth.token_secret", self.token_secret)
        if not isinstance(self.clock_skew_s, int) or self.clock_skew_s < 0:
            raise ConfigError(
                f"auth.clock_skew_s: must be an integer >= 0, got {self.clock_skew_s!r}"
            )


@dataclass(frozen=True)
class ClientAuthConfig:
    """A client's authentication: ``plugin`` (a name in :data:`CLIENT_PLUGINS`) and, for
    the token plugin, the ``token`` (as :func:`make_token` made it)."""

    plugin: str = TOKEN_PLUGIN
    token: str = field(default="", repr=False)

    def __post_init__(self) -> None:
        if self.plugin not in CLIENT_PLUGINS:
            raise ConfigError(
                f"client_auth.plugin: {self.plugin!r} is not one of "
                f"{', '.join(sorted(CLIENT_PLUGINS))}"
            )
        if self.plugin == TOKEN_PLUGIN:
            if not self.token:
                raise ConfigError("client_auth.token: the token plugin needs a token")
            if len(self.token) > TOKEN_BYTES_MAX or not self.token.isascii():
                raise ConfigError("client_auth.token: not a token (too long or not ASCII)")


def _check_secret(name: str, secret: bytes) -> None:
    if not isinstance(secret, bytes) or len(secret) < TOKEN_SECRET_BYTES_MIN:
        raise ConfigError(f"{name}: must be at least {TOKEN_SECRET_BYTES_MIN} bytes")


# -- tokens --------------------------------------------------------------------------------
@dataclass(frozen=True)
class TokenClaims:
    subject: str
    expires_at_s: int


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _sign(secret: bytes, signed_part: str) -> bytes:
    return hmac.new(secret, signed_part.encode("ascii"), hashlib.sha256).digest()


def make_token(secret: bytes, subject: str, ttl_s: int, now_s: float | None = None) -> str:
    """A token for ``subject`` valid ``ttl_s`` seconds from now, signed with ``secret``."""
    _check_secret("secret", secret)
    if not subject or not subject.isprintable():
        raise ConfigError(f"subject: must be a non-empty printable string, got {subject!r}")
    if not isinstance(ttl_s, int) or ttl_s <= 0:
        raise ConfigError(f"ttl_s: must be a positive integer, got {ttl_s!r}")
    now = time.time() if now_s is None else now_s
    claims = {"sub": subject, "exp": int(now) + ttl_s}
    signed_part = f"{_TOKEN_VERSION}.{_b64(json.dumps(claims, sort_keys=True).encode())}"
    return f"{signed_part}.{_b64(_sign(secret, signed_part))}"


def _parse_claims(claims_part: str) -> TokenClaims | None:
    try:
        claims = json.loads(_unb64(claims_part))
        subject, expires = claims["sub"], claims["exp"]
    except (ValueError, KeyError, TypeError, binascii.Error):
        return None
    if not isinstance(subject, str) or not subject or type(expires) is not int:
        return None
    return TokenClaims(subject, expires)


def peek_claims(token: bytes | str) -> TokenClaims | None:
    """The claims of ``token`` WITHOUT checking its signature, or None when it is not a
    well-formed v1 token. For a client to say "your token expired at ..." before it connects;
    never a ground to trust the token (only a bookie holding the secret can)."""
    if isinstance(token, str):
        if not token.isascii():
            return None
        token = token.encode("ascii")
    if len(token) > TOKEN_BYTES_MAX:
        return None
    try:
        version, claims_part, signature_part = token.decode("ascii").split(".")
        _unb64(signature_part)
    except (UnicodeDecodeError, ValueError, binascii.Error):
        return None
    if version != _TOKEN_VERSION or not signature_part:
        return None
    return _parse_claims(claims_part)


def verify_token(secret: bytes, token: bytes, now_s: float, skew_s: int = 0) -> TokenClaims:
    """The claims of a valid ``token``; :class:`AuthenticationError` saying what is wrong
    (never echoing the token)."""
    if len(token) > TOKEN_BYTES_MAX:
        raise AuthenticationError(f"token longer than {TOKEN_BYTES_MAX} bytes")
    try:
        text = token.decode("ascii")
        version, claims_part, signature_part = text.split(".")
        signature = _unb64(signature_part)
    except (UnicodeDecodeError, ValueError, binascii.Error) as exc:
        raise AuthenticationError("malformed token") from exc
    if version != _TOKEN_VERSION:
        raise AuthenticationError(f"token version {version[:8]!r} is not {_TOKEN_VERSION!r}")
    if not hmac.compare_digest(signature, _sign(secret, f"{version}.{claims_part}")):
        raise AuthenticationError("bad token signature (not signed with this cluster's secret)")
    parsed = _parse_claims(claims_part)
    if parsed is None:
        raise AuthenticationError("malformed token claims")
    subject, expires = parsed.subject, parsed.expires_at_s
    if now_s > expires + skew_s:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(expires))
        raise AuthenticationError(f"token of {subject!r} expired at {stamp}")
    return TokenClaims(subject, expires)


# -- plugins -------------------------------------------------------------------------------
class _DisabledServerSession:
    def process(self, payload: bytes) -> AuthStep:
        return AuthStep(b"", identity="")


class DisabledServerProvider:
    plugin_name = AUTH_DISABLED_PLUGIN

    def new_session(self, peer: str) -> ServerAuthSession:
        return _DisabledServerSession()


class _TokenServerSession:
    def __init__(self, provider: TokenServerProvider) -> None:
        self._provider = provider

    def process(self, payload: bytes) -> AuthStep:
        p = self._provider
        claims = verify_token(p.config.token_secret, payload, p.clock(), p.config.clock_skew_s)
        allowed = p.config.allowed_subjects
        if allowed and claims.subject not in allowed:
            raise AuthenticationError(f"subject {claims.subject!r} is not allowed on this bookie")
        return AuthStep(b"", identity=claims.subject)


class TokenServerProvider:
    plugin_name = TOKEN_PLUGIN

    def __init__(self, config: ServerAuthConfig, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.clock = clock

    def new_session(self, peer: str) -> ServerAuthSession:
        return _TokenServerSession(self)


class _TokenClientSession:
    def __init__(self, token: str) -> None:
        self._token = token

    def first(self) -> bytes:
        return self._token.encode("ascii")

    def answer(self, payload: bytes) -> bytes | None:
        return None  # one round: the bookie's answer (EOK) means accepted


class TokenClientProvider:
    plugin_name = TOKEN_PLUGIN

    def __init__(self, config: ClientAuthConfig) -> None:
        self._token = config.token

    def __repr__(self) -> str:
        return "TokenClientProvider(token=<hidden>)"

    def new_session(self, address: str) -> ClientAuthSession:
        return _TokenClientSession(self._token)


SERVER_PLUGINS: dict[str, Callable[[ServerAuthConfig], ServerAuthProvider]] = {
    AUTH_DISABLED_PLUGIN: lambda config: DisabledServerProvider(),
    TOKEN_PLUGIN: TokenServerProvider,
}
#: A client provider of None sends no AUTH message (the disabled plugin).
CLIENT_PLUGINS: dict[str, Callable[[ClientAuthConfig], ClientAuthProvider | None]] = {
    AUTH_DISABLED_PLUGIN: lambda config: None,
    TOKEN_PLUGIN: TokenClientProvider,
}


def server_provider(config: ServerAuthConfig | None) -> ServerAuthProvider | None:
    """The bookie's provider; None: authentication is off (every connection authenticated,
    AUTH answered with the disabled plugin's name)."""
    if config is None or config.plugin == AUTH_DISABLED_PLUGIN:
        return None
    return SERVER_PLUGINS[config.plugin](config)


def client_provider(config: ClientAuthConfig | None) -> ClientAuthProvider | None:
    """The client's provider; None: the disabled plugin (no AUTH message sent)."""
    if config is None:
        return None
    return CLIENT_PLUGINS[config.plugin](config)
