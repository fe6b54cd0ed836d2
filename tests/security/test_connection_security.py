"""The bookie connection's admission, in process over a fake transport: without security
the v2 add lane is the handlers' own (nothing checked per add); with auth, adds are refused
EUA until a successful AUTH, then go straight to the handlers."""

from __future__ import annotations

import asyncio
from typing import Any

from bkeeper.common.auth import TOKEN_PLUGIN, ServerAuthConfig, make_token
from bkeeper.server.config import BookieConfig
from bkeeper.server.connection import BookieConnection
from bkeeper.server.connections import ConnectionTable
from bkeeper.server.security import BookieSecurity
from bkeeper.wire import v2
from bkeeper.wire.codes import StatusCode
from bkeeper.wire.digest import DigestManager, DigestType
from bkeeper.wire.messages import AddRequest, AddResponse, AuthMessage, AuthRequest, AuthResponse

SECRET = b"k" * 40


class Transport:
    def __init__(self) -> None:
        self.written = bytearray()

    def get_extra_info(self, name: str) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else None

    def write(self, data: bytes) -> None:
        self.written += data

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...

    def abort(self) -> None: ...

    def close(self) -> None: ...


def frames(data: bytes) -> list[bytes]:
    out, offset = [], 0
    while offset < len(data):
        size = int.from_bytes(data[offset : offset + 4], "big")
        out.append(data[offset + 4 : offset + 4 + size])
        offset += 4 + size
    return out


def make(security: BookieSecurity | None) -> tuple[BookieConnection, Transport, list[int], Any]:
    config = BookieConfig(data_dir="-")
    added: list[int] = []

    def add(conn: BookieConnection, batch: Any) -> None:
        added.extend(batch.entry_ids)
        conn.respond_adds(
            StatusCode.EOK, batch.ledger_ids, batch.entry_ids, batch.requests, batch.request_bytes
        )

    def dispatch(conn: BookieConnection, request: Any, size: int) -> None:
        raise AssertionError(f"handlers got {request}")

    conn = BookieConnection(config, ConnectionTable(config), dispatch, add, security)
    transport = Transport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    return conn, transport, added, add


def add_frame(entry: int) -> bytes:
    body = DigestManager(1, DigestType.CRC32, b"").encode_entry(entry, entry - 1, 1, b"x")
    return v2.encode_request_frame(AddRequest(1, entry, bytes(20), body))


async def test_without_security_the_add_lane_is_the_handlers_own() -> None:
    conn, _, added, add = make(None)
    assert conn._add is add and conn.security is None
    conn.data_received(add_frame(0))
    assert added == [0]


async def test_with_auth_adds_are_refused_until_authenticated() -> None:
    config = BookieConfig(data_dir="-", auth=ServerAuthConfig(TOKEN_PLUGIN, SECRET))
    security = BookieSecurity.from_config(config)
    assert security is not None
    conn, transport, added, add = make(security)
    conn.data_received(add_frame(0) + add_frame(1))
    await asyncio.sleep(0)  # the flush
    answers = [v2.decode_response(f) for f in frames(bytes(transport.written))]
    assert answers == [AddResponse(StatusCode.EUA, 1, 0), AddResponse(StatusCode.EUA, 1, 1)]
    assert added == [] and conn.security is not None and conn.security.refusals == 2
    transport.written.clear()
    token = make_token(SECRET, "writer", 60).encode()
    conn.data_received(v2.encode_request_frame(AuthRequest(AuthMessage(TOKEN_PLUGIN, token))))
    await asyncio.sleep(0)
    (answer,) = [v2.decode_response(f) for f in frames(bytes(transport.written))]
    assert answer == AuthResponse(StatusCode.EOK, AuthMessage(TOKEN_PLUGIN, b""))
    assert conn._add is add and conn.security.identity == "writer"
    conn.data_received(add_frame(2))
    assert added == [2]
