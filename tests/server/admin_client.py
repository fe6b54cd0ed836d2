"""A raw HTTP client for the admin server tests: exact bytes out, the whole answer back."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

#: Generous: a loaded CI machine may be slow; no test asserts an upper bound on time.
ANSWER_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def error(self) -> str:
        value = self.json()
        assert value["status"] == self.status, value
        return str(value["error"])


def parse_answer(raw: bytes) -> Answer:
    if not raw:
        raise ConnectionError("the server closed without an answer")
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    assert int(headers["content-length"]) == len(body), raw
    return Answer(status, headers, body)


async def exchange(port: int, raw: bytes, *, half_close: bool = False) -> Answer:
    """Send ``raw`` to the server and read its answer up to the end of the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(raw)
        await writer.drain()
        if half_close:
            writer.write_eof()
        async with asyncio.timeout(ANSWER_TIMEOUT_S):
            return parse_answer(await reader.read())
    finally:
        writer.close()


def request_bytes(method: str, path: str, body: bytes | None = None, **headers: str) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: bookie", "Connection: close"]
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b"")


async def call(port: int, method: str, path: str, body: object = None) -> Answer:
    """``method path`` with ``body`` as JSON (bytes as they are; None: no body)."""
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    return await exchange(port, request_bytes(method, path, data))
