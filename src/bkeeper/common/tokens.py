"""Tokens of the ``BKeeperToken`` plugin (:mod:`bkeeper.common.auth`): the secrets that sign
them, making, reading and verifying them. Pure: no files, no clock but the one asked for.

Format (ASCII): ``v1.<base64url(JSON {"sub": ..., "exp": unix seconds})>.<base64url(
HMAC-SHA256(secret, "v1." + claims part))>``. Verifying checks the signature against every
secret admitted (constant time, no early exit), then the expiry (with a skew of grace).
Secrets and tokens are never logged nor put in errors or ``repr``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from dataclasses import dataclass

from bkeeper.common.clock import default_clock
from bkeeper.common.errors import AuthenticationError, ConfigError

__all__ = [
    "SECRETS_MAX",
    "TOKEN_BYTES_MAX",
    "TOKEN_SECRET_BYTES_MIN",
    "TokenClaims",
    "TokenSecrets",
    "check_secret",
    "make_token",
    "parse_token_secrets",
    "peek_claims",
    "system_now_s",
    "verify_token",
]

#: A token secret shorter than this is refused (HMAC-SHA256's block is 64 bytes; 32 random
#: bytes are well beyond guessing).
TOKEN_SECRET_BYTES_MIN = 32
#: A bookie admits tokens signed by at most this many secrets: the old and the new one of a
#: rotation.
SECRETS_MAX = 2
#: Tokens (and AUTH payloads the token plugin reads) longer than this are refused unread.
TOKEN_BYTES_MAX = 4096
_TOKEN_VERSION = "v1"


def check_secret(name: str, secret: bytes) -> None:
    """``ConfigError`` naming ``name`` unless ``secret`` is bytes, at least
    :data:`TOKEN_SECRET_BYTES_MIN` of them."""
    if not isinstance(secret, bytes) or len(secret) < TOKEN_SECRET_BYTES_MIN:
        raise ConfigError(f"{name}: must be at least {TOKEN_SECRET_BYTES_MIN} bytes")


# -- secrets -------------------------------------------------------------------------------
class TokenSecrets:
    """The secrets a bookie admits tokens signed by (1 to :data:`SECRETS_MAX`, each at least
    :data:`TOKEN_SECRET_BYTES_MIN` bytes), oldest first; :attr:`newest` signs new tokens.
    Immutable; its ``repr`` (and a ``dataclasses.asdict`` dump of a config holding it, which
    copies it whole) shows only how many there are."""

    __slots__ = ("_secrets",)

    def __init__(self, *secrets: bytes) -> None:
        if not 1 <= len(secrets) <= SECRETS_MAX:
            raise ConfigError(f"auth.token_secret: 1 to {SECRETS_MAX} secrets, got {len(secrets)}")
        for secret in secrets:
            check_secret("auth.token_secret", secret)
        self._secrets = tuple(secrets)

    @property
    def secrets(self) -> tuple[bytes, ...]:
        return self._secrets

    @property
    def newest(self) -> bytes:
        return self._secrets[-1]

    def __len__(self) -> int:
        return len(self._secrets)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TokenSecrets) and self._secrets == other._secrets

    def __hash__(self) -> int:
        return hash(self._secrets)

    def __repr__(self) -> str:
        return f"TokenSecrets(<{len(self._secrets)} hidden>)"

    __str__ = __repr__

    def __deepcopy__(self, memo: object) -> TokenSecrets:
        return self  # immutable


def parse_token_secrets(data: bytes, source: str) -> TokenSecrets:
    """The secrets of a secret file's content: one a line (``\\n`` or ``\\r\\n``; newlines at
    the end are ignored), oldest first, at most :data:`SECRETS_MAX`. ``ConfigError`` naming
    ``source`` and the line number of what is wrong, never the content."""
    data = data.rstrip(b"\r\n")
    if not data:
        raise ConfigError(f"{source}: empty")
    secrets = []
    for number, line in enumerate(data.split(b"\n"), 1):
        secret = line.removesuffix(b"\r")
        if not secret.strip():
            raise ConfigError(f"{source} line {number}: empty")
        if number > SECRETS_MAX:
            raise ConfigError(
                f"{source} line {number}: more than {SECRETS_MAX} secrets (a bookie takes the "
                "old and the new one of a rotation): drop the old one first"
            )
        if len(secret) < TOKEN_SECRET_BYTES_MIN:
            raise ConfigError(
                f"{source} line {number}: a secret must be at least {TOKEN_SECRET_BYTES_MIN} "
                f"bytes, this one has {len(secret)}"
            )
        secrets.append(secret)
    return TokenSecrets(*secrets)


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


def system_now_s() -> float:
    """Seconds since the Unix epoch, from the system clock."""
    return default_clock().wall_ms() / 1000


def make_token(secret: bytes, subject: str, ttl_s: int, now_s: float | None = None) -> str:
    """A token for ``subject`` valid ``ttl_s`` seconds from now, signed with ``secret``."""
    check_secret("secret", secret)
    if not subject or not subject.isprintable():
        raise ConfigError(f"subject: must be a non-empty printable string, got {subject!r}")
    if not isinstance(ttl_s, int) or ttl_s <= 0:
        raise ConfigError(f"ttl_s: must be a positive integer, got {ttl_s!r}")
    now = system_now_s() if now_s is None else now_s
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


def verify_token(
    secret: bytes | TokenSecrets, token: bytes, now_s: float, skew_s: int = 0
) -> TokenClaims:
    """The claims of a valid ``token`` (signed by ``secret``, or by any of the secrets of a
    :class:`TokenSecrets`); :class:`AuthenticationError` saying what is wrong (never echoing
    the token)."""
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
    signed_part = f"{version}.{claims_part}"
    candidates = secret.secrets if isinstance(secret, TokenSecrets) else (secret,)
    # Every secret is tried (no early exit): the time taken does not say which one matched.
    matched = False
    for candidate in candidates:
        matched |= hmac.compare_digest(signature, _sign(candidate, signed_part))
    if not matched:
        raise AuthenticationError("bad token signature (not signed with this cluster's secret)")
    parsed = _parse_claims(claims_part)
    if parsed is None:
        raise AuthenticationError("malformed token claims")
    subject, expires = parsed.subject, parsed.expires_at_s
    if now_s > expires + skew_s:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(expires))
        raise AuthenticationError(f"token of {subject!r} expired at {stamp}")
    return TokenClaims(subject, expires)
