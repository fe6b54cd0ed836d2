"""HTTP/1.1 requests and responses for the bookie's admin server, sans-IO.

:class:`RequestReader` takes bytes as they arrive (``receive_data``) and gives back a whole
:class:`HttpRequest` once its head and body are in (``next_request``; ``None``: need more
data). It holds at most ``head_bytes_max`` bytes of request line and headers (431 past that),
at most ``headers_max`` header lines (431) and a body of at most ``body_bytes_max`` bytes,
refused from its ``Content-Length`` before any of it is read (413). Anything it cannot read
raises :class:`~bkeeper.common.errors.AdminRequestError` with the status to answer and a
message naming the problem: a malformed request line or header (400), an HTTP version other
than 1.0 and 1.1 (505), a ``Transfer-Encoding`` (501: bodies come with ``Content-Length``).
Only the origin form of targets (``/path?query``) is served. :func:`encode_response` writes a
:class:`HttpResponse` with ``Content-Length`` and ``Connection: close``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from types import MappingProxyType
from typing import Any
from urllib.parse import parse_qsl, unquote

from bkeeper.common.errors import AdminRequestError

__all__ = [
    "HttpRequest",
    "HttpResponse",
    "RequestReader",
    "encode_response",
    "error_response",
    "json_response",
]

#: Query parameters taken from one target at most.
QUERY_FIELDS_MAX = 64

_END_OF_HEAD = re.compile(rb"\r?\n\r?\n")
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_VERSION = re.compile(r"HTTP/(\d)\.(\d)")
_JSON = "application/json"


@dataclass(frozen=True)
class HttpRequest:
    """One request: ``path`` percent-decoded, ``query`` by name (the last of a repeated name),
    ``headers`` by lower-case name (repeated ones joined with ``", "``)."""

    method: str
    path: str
    query: Mapping[str, str] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""

    def json_object(self) -> dict[str, Any]:
        """The body as a JSON object; an empty body is ``{}``. 400 naming what is wrong."""
        if not self.body.strip():
            return {}
        try:
            value = json.loads(self.body.decode("utf-8"))
        except UnicodeDecodeError:
            raise AdminRequestError(400, "the body is not UTF-8 text") from None
        except json.JSONDecodeError as exc:
            raise AdminRequestError(400, f"the body is not JSON: {exc}") from None
        if not isinstance(value, dict):
            raise AdminRequestError(
                400, f"the body must be a JSON object, got {type(value).__name__}"
            )
        return value


@dataclass(frozen=True)
class HttpResponse:
    status: int
    body: bytes = b""
    content_type: str = _JSON
    headers: tuple[tuple[str, str], ...] = ()


def json_response(value: object, status: int = 200) -> HttpResponse:
    """``value`` as a JSON body (indented, a newline at the end: it is read by people too)."""
    body = json.dumps(value, indent=2, sort_keys=True) + "\n"
    return HttpResponse(status, body.encode())


def error_response(status: int, message: str) -> HttpResponse:
    """``{"error": message, "status": status}``."""
    return json_response({"error": message, "status": status}, status)


def encode_response(response: HttpResponse) -> bytes:
    """The bytes of ``response``; the connection closes after it."""
    try:
        reason = HTTPStatus(response.status).phrase
    except ValueError:
        reason = "Unknown"
    lines = [
        f"HTTP/1.1 {response.status} {reason}",
        f"Content-Type: {response.content_type}",
        f"Content-Length: {len(response.body)}",
        "Connection: close",
        *(f"{name}: {value}" for name, value in response.headers),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + response.body


@dataclass
class _Head:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body_bytes: int


class RequestReader:
    """Bytes in, whole requests out, within the limits given (see the module docstring)."""

    def __init__(self, *, head_bytes_max: int, body_bytes_max: int, headers_max: int) -> None:
        self._head_bytes_max = head_bytes_max
        self._body_bytes_max = body_bytes_max
        self._headers_max = headers_max
        self._buffer = bytearray()
        self._head: _Head | None = None

    @property
    def buffered_bytes(self) -> int:
        return len(self._buffer)

    def receive_data(self, data: bytes) -> None:
        self._buffer += data

    def next_request(self) -> HttpRequest | None:
        """The next whole request, or ``None`` until more bytes arrive."""
        if self._head is None:
            end = _END_OF_HEAD.search(self._buffer, 0, self._head_bytes_max + 4)
            if end is None:
                if len(self._buffer) > self._head_bytes_max:
                    raise AdminRequestError(
                        431,
                        f"request line and headers exceed {self._head_bytes_max} bytes "
                        "(head_bytes_max)",
                    )
                return None
            if end.start() > self._head_bytes_max:
                raise AdminRequestError(
                    431,
                    f"request line and headers exceed {self._head_bytes_max} bytes "
                    "(head_bytes_max)",
                )
            raw = bytes(self._buffer[: end.start()])
            del self._buffer[: end.end()]
            self._head = self._parse_head(raw)
        head = self._head
        if len(self._buffer) < head.body_bytes:
            return None
        body = bytes(self._buffer[: head.body_bytes])
        del self._buffer[: head.body_bytes]
        self._head = None
        return HttpRequest(
            head.method,
            head.path,
            MappingProxyType(head.query),
            MappingProxyType(head.headers),
            body,
        )

    def _parse_head(self, raw: bytes) -> _Head:
        try:
            text = raw.decode("ascii")
        except UnicodeDecodeError:
            raise AdminRequestError(400, "the request head is not ASCII text") from None
        lines = re.split(r"\r?\n", text)
        method, path, query = _request_line(lines[0])
        headers = self._headers(lines[1:])
        if "transfer-encoding" in headers:
            raise AdminRequestError(
                501, "Transfer-Encoding is not supported: send the body with Content-Length"
            )
        return _Head(method, path, query, headers, self._body_bytes(headers))

    def _headers(self, lines: list[str]) -> dict[str, str]:
        if len(lines) > self._headers_max:
            raise AdminRequestError(
                431, f"{len(lines)} header lines, more than {self._headers_max} (headers_max)"
            )
        headers: dict[str, str] = {}
        for line in lines:
            name, colon, value = line.partition(":")
            if not colon or not _TOKEN.fullmatch(name):
                raise AdminRequestError(400, f"malformed header line {line[:80]!r}")
            key, value = name.lower(), value.strip(" \t")
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        return headers

    def _body_bytes(self, headers: dict[str, str]) -> int:
        text = headers.get("content-length")
        if text is None:
            return 0
        values = {part.strip() for part in text.split(",")}
        if len(values) != 1 or not next(iter(values)).isdigit():
            raise AdminRequestError(400, f"Content-Length {text[:40]!r} is not a byte count")
        length = int(values.pop())
        if length > self._body_bytes_max:
            raise AdminRequestError(
                413, f"a body of {length} bytes, more than {self._body_bytes_max} (body_bytes_max)"
            )
        return length


def _request_line(line: str) -> tuple[str, str, dict[str, str]]:
    parts = line.split(" ")
    if len(parts) != 3 or not _TOKEN.fullmatch(parts[0]):
        raise AdminRequestError(400, f"malformed request line {line[:80]!r}")
    method, target, version = parts
    matched = _VERSION.fullmatch(version)
    if matched is None:
        raise AdminRequestError(400, f"malformed request line {line[:80]!r}")
    if matched.group(1) != "1":
        raise AdminRequestError(505, f"{version} is not served: HTTP/1.1 or HTTP/1.0")
    if not target.startswith("/"):
        raise AdminRequestError(400, f"target {target[:80]!r} is not a path starting with /")
    raw_path, _, raw_query = target.partition("?")
    try:
        query = dict(parse_qsl(raw_query, keep_blank_values=True, max_num_fields=QUERY_FIELDS_MAX))
    except ValueError:
        raise AdminRequestError(
            400, f"more than {QUERY_FIELDS_MAX} query parameters (QUERY_FIELDS_MAX)"
        ) from None
    return method, unquote(raw_path), query
