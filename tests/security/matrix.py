"""What the matrix test (tests/security/test_matrix.py) walks, derived from the code: one
request of every kind of ``bkeeper.wire`` (v3 by ``OperationType``, v2 by ``V2OpCode``), the
routes of the bookie's admin app and of the dashboard's, and the doors docs/security.md lists
("## The matrix: every door without credentials"); and the raw exchanges that send them."""

from __future__ import annotations

import asyncio
import contextlib
import http.client as httpclient
import re
import ssl
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bkeeper.wire import v2, v3
from bkeeper.wire.codes import OperationType, Protocol, StatusCode, V2OpCode
from bkeeper.wire.digest import DigestManager, DigestType, master_key
from bkeeper.wire.messages import (
    AddRequest,
    AuthMessage,
    AuthRequest,
    BatchReadRequest,
    ForceLedgerRequest,
    GetBookieInfoRequest,
    GetListOfEntriesRequest,
    ReadLacRequest,
    ReadRequest,
    Request,
    Response,
    StartTlsRequest,
    UnknownRequest,
    WriteLacRequest,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "security.md"
MATRIX_HEADING = "## The matrix: every door without credentials"
TOKEN_PLUGIN = "BKeeperToken"
#: One exchange (connect, START_TLS, the request, its answer) at most this long.
EXCHANGE_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class Target:
    """The ledger the walk aims at: written with credentials before, by ``password``."""

    ledger_id: int
    next_entry_id: int
    password: bytes
    digest: DigestType


# -- the bookie port ---------------------------------------------------------------------------
def _add(t: Target, recovery: bool = False) -> AddRequest:
    manager = DigestManager(t.ledger_id, t.digest, t.password)
    body = manager.encode_entry(t.next_entry_id, t.next_entry_id - 1, 9, b"intruder!")
    key = master_key(t.password)
    return AddRequest(t.ledger_id, t.next_entry_id, key, body, recovery=recovery, txn_id=7)


def _write_lac(t: Target) -> WriteLacRequest:
    manager = DigestManager(t.ledger_id, t.digest, t.password)
    body = manager.encode_lac(t.next_entry_id)
    return WriteLacRequest(t.ledger_id, t.next_entry_id, master_key(t.password), body, txn_id=7)


def _v3_unknown(operation: OperationType) -> Callable[[Target], Request]:
    """A kind the v3 codec has no message for (the bookie reads it as unknown)."""
    return lambda t: UnknownRequest(int(operation), 7, t.ledger_id, 0)


def _v2_unknown(opcode: V2OpCode) -> Callable[[Target], Request]:
    """A v2 kind the codec has no message for: its frame has the ledger and entry ids."""
    return lambda t: UnknownRequest(int(opcode), 0, t.ledger_id, 0)


def _auth(_: Target) -> AuthRequest:
    return AuthRequest(AuthMessage(TOKEN_PLUGIN, b""), txn_id=7)


#: Each v3 operation, and the requests of that kind sent (well-formed, for the target ledger;
#: the ones that change a ledger carry its real master key).
V3_REQUESTS: dict[OperationType, list[Callable[[Target], Request]]] = {
    OperationType.READ_ENTRY: [
        lambda t: ReadRequest(t.ledger_id, 0, txn_id=7),
        lambda t: ReadRequest(t.ledger_id, -1, True, master_key(t.password), txn_id=7),
        lambda t: ReadRequest(t.ledger_id, t.next_entry_id - 1, piggyback=True, txn_id=7),
    ],
    OperationType.ADD_ENTRY: [_add, lambda t: _add(t, recovery=True)],
    OperationType.RANGE_READ_ENTRY: [_v3_unknown(OperationType.RANGE_READ_ENTRY)],
    OperationType.RANGE_ADD_ENTRY: [_v3_unknown(OperationType.RANGE_ADD_ENTRY)],
    OperationType.AUTH: [_auth],
    OperationType.WRITE_LAC: [_write_lac],
    OperationType.READ_LAC: [lambda t: ReadLacRequest(t.ledger_id, txn_id=7)],
    OperationType.GET_BOOKIE_INFO: [lambda t: GetBookieInfoRequest(3, txn_id=7)],
    OperationType.START_TLS: [lambda t: StartTlsRequest(txn_id=7)],
    OperationType.FORCE_LEDGER: [lambda t: ForceLedgerRequest(t.ledger_id, txn_id=7)],
    OperationType.GET_LIST_OF_ENTRIES_OF_LEDGER: [
        lambda t: GetListOfEntriesRequest(t.ledger_id, txn_id=7)
    ],
    OperationType.BATCH_READ_ENTRY: [_v3_unknown(OperationType.BATCH_READ_ENTRY)],
}

#: The same for each v2 opcode.
V2_REQUESTS: dict[V2OpCode, list[Callable[[Target], Request]]] = {
    V2OpCode.ADD_ENTRY: [_add, lambda t: _add(t, recovery=True)],
    V2OpCode.READ_ENTRY: [
        lambda t: ReadRequest(t.ledger_id, 0),
        lambda t: ReadRequest(t.ledger_id, -1, True, master_key(t.password)),
    ],
    V2OpCode.AUTH: [_auth],
    V2OpCode.READ_LAC: [_v2_unknown(V2OpCode.READ_LAC)],
    V2OpCode.WRITE_LAC: [_v2_unknown(V2OpCode.WRITE_LAC)],
    V2OpCode.GET_BOOKIE_INFO: [_v2_unknown(V2OpCode.GET_BOOKIE_INFO)],
    V2OpCode.BATCH_READ_ENTRY: [
        lambda t: BatchReadRequest(t.ledger_id, 0, 100, 1 << 20, 5),
        lambda t: BatchReadRequest(t.ledger_id, 0, 100, 1 << 20, 6, True, master_key(t.password)),
    ],
}


@dataclass(frozen=True)
class Answer:
    """What the bookie sent back to one request: the response (None: the connection closed
    first), every byte received after the request, and (v2 AUTH, whose answer has no status)
    the answer to a READ sent next on the same connection."""

    response: Response | None
    raw: bytes
    then: Answer | None = None

    @property
    def status(self) -> StatusCode | None:
        return None if self.response is None else self.response.status


def encode(protocol: Protocol, request: Request) -> bytes:
    if protocol is Protocol.V3:
        return v3.encode_request_frame(request)
    return v2.encode_request_frame(request)


async def _read_frame(reader: asyncio.StreamReader) -> bytes | None:
    """One length-prefixed frame, with its prefix; None when the connection closes first."""
    try:
        head = await reader.readexactly(4)
        (size,) = struct.unpack(">I", head)
        return head + await reader.readexactly(size)
    except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
        return None


async def _answer(reader: asyncio.StreamReader, protocol: Protocol) -> Answer:
    frame = await _read_frame(reader)
    if frame is None:
        return Answer(None, b"")
    decode = v3.decode_response if protocol is Protocol.V3 else v2.decode_response
    return Answer(decode(frame[4:]), frame)


async def exchange(
    port: int,
    protocol: Protocol,
    request: Request,
    tls: ssl.SSLContext | None,
    follow_up: Request | None = None,
    token: str | None = None,
) -> Answer:
    """Connect to 127.0.0.1:``port``; with ``tls`` run START_TLS and the handshake first, and
    with ``token`` (credentials: after TLS) the AUTH exchange; send ``request`` and read its
    answer, then ``follow_up``'s."""
    async with asyncio.timeout(EXCHANGE_TIMEOUT_S):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            if tls is not None:
                writer.write(v3.encode_request_frame(StartTlsRequest(txn_id=1)))
                started = await _answer(reader, Protocol.V3)
                assert started.status is StatusCode.EOK, started
                await writer.start_tls(tls, server_hostname="127.0.0.1")
            if token is not None:
                auth = AuthMessage(TOKEN_PLUGIN, token.encode("ascii"))
                writer.write(encode(protocol, AuthRequest(auth, txn_id=2)))
                admitted = await _answer(reader, protocol)
                assert admitted.status is StatusCode.EOK, admitted
            writer.write(encode(protocol, request))
            answer = await _answer(reader, protocol)
            if follow_up is not None and answer.response is not None:
                writer.write(encode(protocol, follow_up))
                answer = Answer(answer.response, answer.raw, await _answer(reader, protocol))
            return answer
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, ssl.SSLError):
                await writer.wait_closed()


# -- HTTP ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class HttpAnswer:
    """Status (None: no HTTP answer, the connection refused or closed) and body."""

    status: int | None
    body: bytes
    error: str = ""
    headers: tuple[tuple[str, str], ...] = ()

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)


def http(
    port: int,
    method: str,
    path: str,
    *,
    tls: ssl.SSLContext | None = None,
    headers: dict[str, str] | None = None,
    body: bytes | None = None,
) -> HttpAnswer:
    """One request to 127.0.0.1:``port`` over HTTPS (``tls``) or plain HTTP."""
    connection: httpclient.HTTPConnection
    if tls is None:
        connection = httpclient.HTTPConnection("127.0.0.1", port, timeout=30)
    else:
        connection = httpclient.HTTPSConnection("127.0.0.1", port, timeout=30, context=tls)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        answer = connection.getresponse()
        return HttpAnswer(answer.status, answer.read(), headers=tuple(answer.getheaders()))
    except (OSError, httpclient.HTTPException) as exc:
        return HttpAnswer(None, b"", f"{type(exc).__name__}: {exc}")
    finally:
        connection.close()


# -- the doc's table -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Door:
    """One row of the matrix: the door (first cell, unquoted) and its cells."""

    section: str
    door: str
    cells: tuple[str, ...]

    @property
    def open(self) -> bool:
        """The doc says it answers without credentials (its cell opens with **open**)."""
        return self.cells[0].startswith("**open**")


_ROW = re.compile(r"^\|\s*(?P<door>[^|]+?)\s*\|(?P<rest>.*)\|\s*$")


def matrix_doors(text: str) -> list[Door]:
    """The rows of every table under the matrix heading, by ``###`` section."""
    start = text.index(MATRIX_HEADING)
    end = text.find("\n## ", start + len(MATRIX_HEADING))
    section = ""
    doors: list[Door] = []
    for line in text[start : None if end < 0 else end].splitlines():
        if line.startswith("### "):
            section = line[4:].strip()
            continue
        found = _ROW.match(line)
        if found is None or set(found["door"]) <= set("-: ") or found["door"] == "door":
            continue
        cells = tuple(cell.strip() for cell in found["rest"].split("|"))
        doors.append(Door(section, found["door"].replace("`", ""), cells))
    return doors


def doors_of(doors: list[Door], section_prefix: str) -> list[Door]:
    return [d for d in doors if d.section.startswith(section_prefix)]
