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

Secret rotation: a bookie admits tokens signed by any of at most :data:`SECRETS_MAX` secrets
(:class:`TokenSecrets`, the old and the new during a rotation); a secret file holds one secret
a line, the newest last (:func:`parse_token_secrets`, :func:`read_token_secret_file`), and
tokens are made with the newest. The bookie re-reads its file when it changes
(``bkeeper.server.security``). docs/security.md, "Rotating the token secret".
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from bkeeper.common.clock import default_clock
from bkeeper.common.errors import AuthenticationError, ConfigError
from bkeeper.common.tokens import (
    SECRETS_MAX,
    TOKEN_BYTES_MAX,
    TOKEN_SECRET_BYTES_MIN,
    TokenClaims,
    TokenSecrets,
    check_secret,
    make_token,
    parse_token_secrets,
    peek_claims,
    system_now_s,
    verify_token,
)

__all__ = [
    "AUTH_DISABLED_PLUGIN",
    "CLIENT_PLUGINS",
    "PRIVATE_FILE_BYTES_MAX",
    "SECRETS_MAX",
    "SERVER_PLUGINS",
    "TOKEN_PLUGIN",
    "TOKEN_SECRET_BYTES_MIN",
    "TOKEN_SECRET_REFRESH_MS_DEFAULT",
    "AuthStep",
    "ClientAuthConfig",
    "ClientAuthProvider",
    "ClientAuthSession",
    "ServerAuthConfig",
    "ServerAuthProvider",
    "ServerAuthSession",
    "TokenClaims",
    "TokenSecrets",
    "client_provider",
    "make_token",
    "parse_token_secrets",
    "peek_claims",
    "read_private_file",
    "read_token_file",
    "read_token_secret_file",
    "server_provider",
    "verify_token",
]

AUTH_DISABLED_PLUGIN = "AuthDisabledPlugin"
TOKEN_PLUGIN = "BKeeperToken"
#: How often (at most) a bookie looks whether its token secret file changed.
TOKEN_SECRET_REFRESH_MS_DEFAULT = 5_000

_log = logging.getLogger(__name__)
#: A secret or token file larger than this is refused unread.
PRIVATE_FILE_BYTES_MAX = 64 * 1024


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


def read_private_file(path: str, what: str) -> bytes:
    """The content of a secret or token file; ``ConfigError`` (naming ``what`` and ``path``,
    never the content) if it cannot be read, is larger than :data:`PRIVATE_FILE_BYTES_MAX`,
    or is readable by group or others."""
    try:
        with open(path, "rb") as file:
            info = os.fstat(file.fileno())
            if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
                raise ConfigError(
                    f"{what} {path}: readable by others (mode {stat.S_IMODE(info.st_mode):o}); "
                    "chmod 600 it"
                )
            if info.st_size > PRIVATE_FILE_BYTES_MAX:
                raise ConfigError(f"{what} {path}: larger than {PRIVATE_FILE_BYTES_MAX} bytes")
            data = file.read(PRIVATE_FILE_BYTES_MAX + 1)
    except OSError as exc:
        raise ConfigError(f"{what} {path}: {exc.strerror or exc}") from exc
    if len(data) > PRIVATE_FILE_BYTES_MAX:
        raise ConfigError(f"{what} {path}: larger than {PRIVATE_FILE_BYTES_MAX} bytes")
    return data


def read_token_secret_file(path: str, what: str = "token secret file") -> TokenSecrets:
    """The secrets of a token secret file (:func:`read_private_file`,
    :func:`parse_token_secrets`)."""
    return parse_token_secrets(read_private_file(path, what), f"{what} {path}")


def read_token_file(path: str, what: str) -> ClientAuthConfig:
    """A client's token authentication from its token file (:func:`read_private_file`;
    trailing newline dropped); ``ConfigError`` naming ``what`` and ``path``, never the
    content, when it is empty or holds no token."""
    data = read_private_file(path, what).rstrip(b"\r\n")
    if not data:
        raise ConfigError(f"{what} {path}: empty")
    try:
        return ClientAuthConfig(TOKEN_PLUGIN, data.decode("ascii"), source=path)
    except (UnicodeDecodeError, ConfigError):
        raise ConfigError(f"{what} {path}: does not hold a token") from None


# -- configuration -----------------------------------------------------------------------
@dataclass(frozen=True)
class ServerAuthConfig:
    """A bookie's authentication. ``plugin``: a name in :data:`SERVER_PLUGINS`.

    For the token plugin: ``token_secret``, the secrets tokens may be signed by (a
    :class:`TokenSecrets`, or one secret of at least :data:`TOKEN_SECRET_BYTES_MIN` bytes,
    made a :class:`TokenSecrets` of one); ``allowed_subjects`` (empty: any subject a secret
    signed); ``clock_skew_s``. With ``token_secret_file`` (the file ``token_secret`` was read
    from) the bookie looks whether the file changed at most every ``token_secret_refresh_ms``
    (when a connection authenticates) and then admits the secrets it now holds (an invalid
    file keeps the secrets in use; ``bkeeper.server.security``)."""

    plugin: str = TOKEN_PLUGIN
    token_secret: TokenSecrets | bytes = field(default=b"", repr=False)
    allowed_subjects: frozenset[str] = frozenset()
    clock_skew_s: int = 30
    token_secret_file: str = ""
    token_secret_refresh_ms: int = TOKEN_SECRET_REFRESH_MS_DEFAULT

    def __post_init__(self) -> None:
        if self.plugin not in SERVER_PLUGINS:
            raise ConfigError(
                f"auth.plugin: {self.plugin!r} is not one of {', '.join(sorted(SERVER_PLUGINS))}"
            )
        if self.plugin == TOKEN_PLUGIN and not isinstance(self.token_secret, TokenSecrets):
            check_secret("auth.token_secret", self.token_secret)
            object.__setattr__(self, "token_secret", TokenSecrets(self.token_secret))
        if not isinstance(self.clock_skew_s, int) or self.clock_skew_s < 0:
            raise ConfigError(
                f"auth.clock_skew_s: must be an integer >= 0, got {self.clock_skew_s!r}"
            )
        refresh = self.token_secret_refresh_ms
        if not isinstance(refresh, int) or isinstance(refresh, bool) or refresh <= 0:
            raise ConfigError(
                f"auth.token_secret_refresh_ms: must be a positive integer, got {refresh!r}"
            )

    @property
    def secrets(self) -> TokenSecrets:
        """The token plugin's secrets (``ConfigError`` on a config of another plugin)."""
        if not isinstance(self.token_secret, TokenSecrets):
            raise ConfigError(f"auth.token_secret: none with the plugin {self.plugin!r}")
        return self.token_secret


@dataclass(frozen=True)
class ClientAuthConfig:
    """A client's authentication: ``plugin`` (a name in :data:`CLIENT_PLUGINS`) and, for
    the token plugin, the ``token`` (as :func:`make_token` made it)."""

    plugin: str = TOKEN_PLUGIN
    token: str = field(default="", repr=False)
    #: Where the token came from (its file), for errors ("the token in FILE expired ...").
    source: str = field(default="", compare=False)

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
        claims = verify_token(p.secrets, payload, p.clock(), p.config.clock_skew_s)
        allowed = p.config.allowed_subjects
        if allowed and claims.subject not in allowed:
            raise AuthenticationError(f"subject {claims.subject!r} is not allowed on this bookie")
        return AuthStep(b"", identity=claims.subject)


class TokenServerProvider:
    plugin_name = TOKEN_PLUGIN

    def __init__(self, config: ServerAuthConfig, clock: Callable[[], float] | None = None) -> None:
        self.config = config
        #: seconds since the Unix epoch, for the tokens' expiry (the system clock's if None)
        self.clock = clock or system_now_s
        #: The secrets admitted now: ``config``'s, until the bookie reloads its secret file
        #: (``bkeeper.server.security``) and sets new ones. A session reads them when it
        #: processes a message, so connections admitted before a change stay admitted.
        self.secrets = config.secrets

    def __repr__(self) -> str:
        return f"TokenServerProvider(secrets={self.secrets!r})"

    def new_session(self, peer: str) -> ServerAuthSession:
        return _TokenServerSession(self)


class _TokenClientSession:
    def __init__(self, token: str) -> None:
        self._token = token

    def first(self) -> bytes:
        return self._token.encode("ascii")

    def answer(self, payload: bytes) -> bytes | None:
        return None  # one round: the bookie's answer (EOK) means accepted


#: A client whose token came from a file looks whether the file changed at most this often,
#: when it opens a connection (a token renewed or re-issued in a rotation is taken without a
#: restart: docs/security.md, "Rotating the token secret").
TOKEN_FILE_REFRESH_S = 5.0


def _file_stamp(path: str) -> tuple[int, int, int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


class TokenClientProvider:
    """The token plugin of a client. With a token file (``ClientAuthConfig.source``) the
    token is the file's: a changed file is read again (at most every
    :data:`TOKEN_FILE_REFRESH_S`, when a connection opens); one that cannot be read, or holds
    no token, leaves the token in use, with one log line per problem."""

    plugin_name = TOKEN_PLUGIN

    def __init__(self, config: ClientAuthConfig, clock: Callable[[], float] | None = None) -> None:
        self._token = config.token
        self._source = config.source
        #: monotonic seconds, for when to look at the token file (the system clock's if None)
        self._clock = clock or default_clock().monotonic
        self._stamp = _file_stamp(config.source) if config.source else None
        self._next_check_s = self._clock() + TOKEN_FILE_REFRESH_S
        self._problem = ""

    def __repr__(self) -> str:
        return "TokenClientProvider(token=<hidden>)"

    @property
    def token(self) -> str:
        """The token to present now (the token file's, re-read when it changed)."""
        if self._source and self._clock() >= self._next_check_s:
            self._next_check_s = self._clock() + TOKEN_FILE_REFRESH_S
            self._reload()
        return self._token

    def _reload(self) -> None:
        stamp = _file_stamp(self._source)
        if stamp is None or stamp == self._stamp:
            return
        try:
            config = read_token_file(self._source, "token file")
        except ConfigError as exc:
            if str(exc) != self._problem:
                self._problem = str(exc)
                _log.warning("token file not reloaded, keeping the token in use: %s", exc)
            return
        self._token, self._stamp, self._problem = config.token, stamp, ""
        _log.info("token reloaded from %s", self._source)

    def new_session(self, address: str) -> ClientAuthSession:
        return _TokenClientSession(self.token)


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
