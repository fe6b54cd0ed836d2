"""Helpers for admin HTTP handlers: JSON answers, and query and body fields checked.

Anything a client got wrong raises :class:`~bkeeper.common.errors.AdminRequestError` with
400 and a message naming the field; the server (:mod:`bkeeper.server.admin_http`) answers
it as ``{"error": ..., "status": 400}``. The body has been read by the server already (within
its size and time limits), so :func:`json_object` reads it from memory.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from bkeeper.common.errors import AdminRequestError

__all__ = [
    "error_response",
    "json_object",
    "json_response",
    "query_bool",
    "query_int",
    "query_str",
    "text_response",
]

_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})


def json_response(value: object, status: int = 200) -> web.Response:
    """``value`` as a JSON body (indented, a newline at the end: people read it too), the
    keys of every object in order: ids (ledger, entry) as numbers, 9 before 10, then names."""
    body = json.dumps(_ordered(value), indent=2) + "\n"
    return web.Response(status=status, body=body.encode(), content_type="application/json")


def _key_order(key: str) -> tuple[int, int, str]:
    return (0, int(key), "") if key.isdecimal() else (1, 0, key)


def _ordered(value: object) -> object:
    """``value`` with the keys of its objects sorted by :func:`_key_order`."""
    if isinstance(value, dict):
        return {k: _ordered(value[k]) for k in sorted(value, key=lambda k: _key_order(str(k)))}
    if isinstance(value, list | tuple):
        return [_ordered(item) for item in value]
    return value


def error_response(status: int, message: str) -> web.Response:
    """``{"error": message, "status": status}``."""
    return json_response({"error": message, "status": status}, status)


def text_response(text: str, status: int = 200) -> web.Response:
    return web.Response(status=status, text=text, content_type="text/plain")


async def json_object(request: web.Request) -> dict[str, Any]:
    """The body as a JSON object; an empty body is ``{}``. 400 naming what is wrong."""
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise AdminRequestError(400, "the body is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise AdminRequestError(400, f"the body is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise AdminRequestError(400, f"the body must be a JSON object, got {type(value).__name__}")
    return value


def _one(request: web.Request, name: str) -> str | None:
    values = request.query.getall(name, [])
    if len(values) > 1:
        raise AdminRequestError(
            400, f"{name}: given {len(values)} times in the query, once at most"
        )
    return values[0] if values else None


def query_str(request: web.Request, name: str, default: str | None = None) -> str:
    """The query parameter ``name``; 400 naming it when absent and no default is given."""
    value = _one(request, name)
    if value is None:
        if default is None:
            raise AdminRequestError(400, f"{name}: a query parameter this endpoint needs")
        return default
    return value


def query_int(
    request: web.Request,
    name: str,
    default: int | None = None,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
) -> int:
    """The integer query parameter ``name`` within ``minimum..maximum``; 400 naming it."""
    text = _one(request, name)
    if text is None:
        if default is None:
            raise AdminRequestError(400, f"{name}: a query parameter this endpoint needs")
        return default
    try:
        value = int(text, 10)
    except ValueError:
        raise AdminRequestError(400, f"{name}: must be an integer, got {text[:40]!r}") from None
    if minimum is not None and value < minimum:
        raise AdminRequestError(400, f"{name}: must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise AdminRequestError(400, f"{name}: must be at most {maximum}, got {value}")
    return value


def query_bool(request: web.Request, name: str, default: bool) -> bool:
    """The boolean query parameter ``name`` (true/false, 1/0, yes/no, on/off); 400 naming it."""
    text = _one(request, name)
    if text is None:
        return default
    if text.lower() in _TRUE:
        return True
    if text.lower() in _FALSE:
        return False
    raise AdminRequestError(400, f"{name}: must be true or false, got {text[:40]!r}")
