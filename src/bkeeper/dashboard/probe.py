"""Asking a bookie's admin HTTP server how it is: state, disk, and its ``/metrics`` text.

Every request has the dashboard's ``bookie_request_timeout_ms``; a ``/metrics`` answer is
read up to ``metrics_bytes_max`` bytes. What fails is kept as one line naming it (shown on
the page next to the bookie), never dropped: a bookie without metrics (404: metrics off, or a
bookie from before them) says so in ``metrics_error``.

On a secured cluster the session (:func:`bookie_session`) sends the dashboard's token as
``Authorization: Bearer <token>`` with every request and speaks TLS (the client TLS config's
CA, certificate and hostname check) to a bookie that registered an ``https`` endpoint. A
refusal (401/403) or a failed handshake says what is missing and which option supplies it;
no line ever holds the token.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TypeVar

import aiohttp

from bkeeper.common.auth import TOKEN_PLUGIN, ClientAuthConfig
from bkeeper.common.errors import ProtocolError
from bkeeper.common.tls import TlsClientConfig, describe_tls_error

__all__ = ["BookieProbe", "bookie_session", "probe_bookie"]

T = TypeVar("T")

STATE_PATH = "/api/v1/bookie/state"
INFO_PATH = "/api/v1/bookie/info"
METRICS_PATH = "/metrics"


@dataclass(frozen=True)
class BookieProbe:
    http_error: str | None = None  # the admin server did not answer as it should
    read_only: bool | None = None
    free_bytes: int | None = None
    total_bytes: int | None = None
    metrics_text: str | None = None
    metrics_error: str | None = None


def bookie_session(
    tls: TlsClientConfig | None, auth: ClientAuthConfig | None
) -> aiohttp.ClientSession:
    """The HTTP session the dashboard asks bookies with: their ``https`` endpoints checked
    against ``tls`` (the system's CAs without it), the token of ``auth`` on every request.
    ``ConfigError`` if a TLS file cannot be loaded."""
    headers = {}
    if auth is not None and auth.plugin == TOKEN_PLUGIN:
        headers["Authorization"] = f"Bearer {auth.token}"
    context = (tls or TlsClientConfig()).context()
    return aiohttp.ClientSession(headers=headers, connector=aiohttp.TCPConnector(ssl=context))


def _refused(session: aiohttp.ClientSession, url: str, status: int) -> ProtocolError:
    """A non-200 answer; for 401/403, what the bookie wants."""
    if status not in (401, 403):
        return ProtocolError(f"GET {url}: HTTP {status}")
    if "Authorization" in session.headers:
        why = "the bookie refused the dashboard's token (expired, or not signed by its secret?)"
    else:
        why = (
            "the bookie requires a token: start the dashboard with --auth-token-file "
            "(or BKEEPER_AUTH_TOKEN_FILE)"
        )
    return ProtocolError(f"GET {url}: HTTP {status}: {why}")


async def _get(
    session: aiohttp.ClientSession, url: str, timeout_s: float, bytes_max: int
) -> tuple[int, bytes]:
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with session.get(url, timeout=timeout, allow_redirects=False) as response:
        body = bytearray()
        async for chunk in response.content.iter_chunked(64 * 1024):
            body += chunk
            if len(body) > bytes_max:
                raise ProtocolError(f"GET {url}: answer larger than {bytes_max} bytes")
        return response.status, bytes(body)


async def _get_json(
    session: aiohttp.ClientSession, url: str, timeout_s: float, bytes_max: int
) -> dict[str, object]:
    status, body = await _get(session, url, timeout_s, bytes_max)
    if status != 200:
        raise _refused(session, url, status)
    try:
        value = json.loads(body)
    except ValueError as exc:
        raise ProtocolError(f"GET {url}: not JSON ({exc})") from exc
    if not isinstance(value, dict):
        raise ProtocolError(f"GET {url}: not a JSON object")
    return value


def _describe(url: str, exc: BaseException) -> str:
    if isinstance(exc, ProtocolError):  # says what the answer was
        return str(exc)
    if isinstance(exc, TimeoutError):
        return f"{url}: no answer in time"
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        reason = describe_tls_error(exc.certificate_error)
        return f"{url}: TLS: {reason} (the bookies' CA: --client-tls-ca or BKEEPER_TLS_CA)"
    if isinstance(exc, aiohttp.ClientSSLError):
        return f"{url}: TLS: {describe_tls_error(exc.os_error)}"
    return f"{url}: {type(exc).__name__}: {exc}".rstrip(": ")


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


async def _metrics(
    session: aiohttp.ClientSession, url: str, timeout_s: float, bytes_max: int
) -> str:
    status, body = await _get(session, url, timeout_s, bytes_max)
    if status == 404:
        raise ProtocolError("no metrics (the bookie serves no /metrics)")
    if status != 200:
        raise _refused(session, url, status)
    return body.decode("utf-8", errors="replace")


async def _attempt(url: str, request: Awaitable[T]) -> tuple[T | None, str | None]:
    """The request's value, or the line saying why there is none."""
    try:
        return await request, None
    except (aiohttp.ClientError, TimeoutError, ProtocolError) as exc:
        return None, _describe(url, exc)


async def probe_bookie(
    session: aiohttp.ClientSession, base_url: str, timeout_s: float, metrics_bytes_max: int
) -> BookieProbe:
    """State and disk from the bookie's admin server at ``base_url``, and its metrics: the
    three requests at once, each failing on its own."""
    small = 64 * 1024
    metrics_url = base_url + METRICS_PATH
    (state, state_error), (info, info_error), (text, metrics_error) = await asyncio.gather(
        _attempt(base_url, _get_json(session, base_url + STATE_PATH, timeout_s, small)),
        _attempt(base_url, _get_json(session, base_url + INFO_PATH, timeout_s, small)),
        _attempt(metrics_url, _metrics(session, metrics_url, timeout_s, metrics_bytes_max)),
    )
    read_only = None if state is None else state.get("readOnly")
    return BookieProbe(
        http_error=state_error or info_error,
        read_only=read_only if isinstance(read_only, bool) else None,
        free_bytes=None if info is None else _int_or_none(info.get("freeSpace")),
        total_bytes=None if info is None else _int_or_none(info.get("totalSpace")),
        metrics_text=text,
        metrics_error=metrics_error,
    )
