"""A frame over the bookie's ``max_frame_bytes``: the request it starts is answered
EBADREQ from its first bytes, the rest is dropped as it arrives (never buffered), and the
connection goes on; what cannot be answered so still closes the connection.

First in process over a fake transport (bytes in, answers out), then over TCP to a bookie.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from bkeeper.common.limits import MAX_FRAME_BYTES_DEFAULT, OVERSIZED_FRAME_SKIP_BYTES_MAX
from bkeeper.server.config import BookieConfig
from bkeeper.server.connection import BookieConnection
from bkeeper.server.connections import ConnectionTable
from bkeeper.server.responder import AddBatchAnswer
from bkeeper.wire import v2, v3
from bkeeper.wire.codes import StatusCode
from bkeeper.wire.digest import DigestManager, DigestType, master_key
from bkeeper.wire.framing import FrameDecoder
from bkeeper.wire.messages import AddRequest, AddResponse, ReadRequest, ReadResponse

MIB = 1024 * 1024
KEY = master_key(b"pw")
CHUNK = 65_536


class Transport:
    def __init__(self) -> None:
        self.written = bytearray()
        self.aborted = False

    def get_extra_info(self, name: str) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else None

    def write(self, data: bytes) -> None:
        self.written += data

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...

    def abort(self) -> None:
        self.aborted = True

    def close(self) -> None: ...


def body(ledger_id: int, entry_id: int, payload: bytes) -> bytes:
    manager = DigestManager(ledger_id, DigestType.CRC32C, b"pw")
    return manager.encode_entry(entry_id, entry_id - 1, len(payload), payload)


def add(ledger_id: int, entry_id: int, payload: bytes = b"small", txn_id: int = 0) -> bytes:
    entry = body(ledger_id, entry_id, payload)
    request = AddRequest(ledger_id, entry_id, KEY, entry, txn_id=txn_id)
    return (v3 if txn_id else v2).encode_request_frame(request)


class Bookie:
    """A bookie connection over a fake transport whose handlers answer every add EOK."""

    def __init__(self) -> None:
        self.config = BookieConfig(data_dir="-")
        self.table = ConnectionTable(self.config)
        self.transport = Transport()
        self.conn = BookieConnection(self.config, self.table, self.dispatch, self.add_batch)
        self.conn.connection_made(self.transport)  # type: ignore[arg-type]
        self.partial_max = 0

    def dispatch(self, conn: BookieConnection, request: Any, size: int) -> None:
        assert isinstance(request, AddRequest), request
        conn.respond(
            AddResponse(StatusCode.EOK, request.ledger_id, request.entry_id, request.txn_id),
            size,
        )

    def add_batch(self, conn: BookieConnection, batch: AddBatchAnswer) -> None:
        batch.parts = 1  # as if its one journal made it durable at once
        batch.durable(StatusCode.EOK, None)

    def feed(self, data: bytes, chunk: int = CHUNK) -> None:
        for at in range(0, len(data), chunk):
            self.conn.data_received(data[at : at + chunk])
            self.partial_max = max(self.partial_max, self.conn.partial_bytes)

    async def answers(self, decode: Any) -> list[Any]:
        await asyncio.sleep(0)  # the flush
        decoder = FrameDecoder()
        decoder.receive_data(bytes(self.transport.written))
        self.transport.written.clear()
        return [decode(frame) for frame in decoder.frames()]


def v2_answers(*ids_and_status: tuple[int, StatusCode]) -> list[AddResponse]:
    return [AddResponse(status, 1, entry) for entry, status in ids_and_status]


OK, BAD = StatusCode.EOK, StatusCode.EBADREQ


@pytest.mark.parametrize("chunk", [CHUNK, 7 * MIB], ids=["64 KiB chunks", "one chunk"])
async def test_a_6_mib_v2_add_is_answered_ebadreq_and_the_connection_goes_on(chunk: int) -> None:
    bookie = Bookie()
    stream = add(1, 0) + add(1, 1, bytes(6 * MIB)) + add(1, 2) + add(1, 3)
    bookie.feed(stream, chunk)
    assert await bookie.answers(v2.decode_response) == v2_answers(
        (0, OK), (1, BAD), (2, OK), (3, OK)
    )
    assert not bookie.conn.closed and not bookie.transport.aborted
    assert bookie.partial_max < 200  # the 6 MiB were never held
    assert bookie.table.oversized_frames.value == 1
    assert (bookie.conn.requests_in_flight, bookie.conn.bytes_in_flight) == (0, 0)
    bookie.feed(add(1, 4))  # and later on
    assert await bookie.answers(v2.decode_response) == v2_answers((4, OK))


async def test_an_oversized_first_frame_chooses_the_protocol() -> None:
    bookie = Bookie()
    bookie.feed(add(1, 0, bytes(6 * MIB)) + add(1, 1) + add(1, 2))
    assert await bookie.answers(v2.decode_response) == v2_answers((0, BAD), (1, OK), (2, OK))
    assert not bookie.conn.closed


async def test_a_6_mib_v3_add_is_answered_with_its_txn_id() -> None:
    bookie = Bookie()
    stream = add(1, 0, txn_id=10) + add(1, 1, bytes(6 * MIB), txn_id=11) + add(1, 2, txn_id=12)
    bookie.feed(stream)
    answers = await bookie.answers(v3.decode_response)
    assert sorted(answers, key=lambda answer: answer.txn_id) == [
        AddResponse(OK, 1, 0, 10),
        AddResponse(BAD, 1, 1, 11),
        AddResponse(OK, 1, 2, 12),
    ]
    assert not bookie.conn.closed and bookie.table.oversized_frames.value == 1


def oversized_read() -> bytes:
    read = v2.encode_request_frame(ReadRequest(1, 0))[4:]
    return (6 * MIB).to_bytes(4, "big") + read + bytes(64)


async def test_an_oversized_frame_that_names_no_add_closes_a_v2_connection() -> None:
    bookie = Bookie()
    bookie.feed(add(1, 0) + oversized_read())
    assert bookie.conn.closed and bookie.transport.aborted
    assert bookie.table.oversized_frames.value == 0


async def test_a_frame_over_the_skip_limit_closes_at_its_length() -> None:
    bookie = Bookie()
    bookie.feed(add(1, 0) + (OVERSIZED_FRAME_SKIP_BYTES_MAX + 1).to_bytes(4, "big"))
    assert bookie.conn.closed and bookie.transport.aborted


async def test_a_frame_at_the_limit_is_served() -> None:
    bookie = Bookie()
    largest = MAX_FRAME_BYTES_DEFAULT - len(add(1, 0, b"")) + 4
    frame = add(1, 0, bytes(largest))
    assert len(frame) - 4 == MAX_FRAME_BYTES_DEFAULT
    bookie.feed(frame + add(1, 1))
    assert await bookie.answers(v2.decode_response) == v2_answers((0, OK), (1, OK))


# -- over TCP ---------------------------------------------------------------------------------
async def read_answers(reader: asyncio.StreamReader, count: int, decode: Any) -> list[Any]:
    decoder, out = FrameDecoder(), []
    while len(out) < count:
        chunk = await asyncio.wait_for(reader.read(65_536), 30)
        assert chunk, "the bookie closed the connection"
        decoder.receive_data(chunk)
        out.extend(decode(frame) for frame in decoder.frames())
    return out


@pytest.mark.parametrize("txn", [0, 1], ids=["v2", "v3"])
async def test_a_bookie_answers_a_6_mib_add_over_a_raw_socket_and_serves_on(
    start_bookie: Any, txn: int
) -> None:
    bookie = await start_bookie()
    decode = v3.decode_response if txn else v2.decode_response
    reader, writer = await asyncio.open_connection("127.0.0.1", bookie.port)
    try:
        writer.write(add(5, 0, b"first", txn_id=txn and 1))
        writer.write(add(5, 1, bytes(6 * MIB), txn_id=txn and 2))
        writer.write(add(5, 1, b"second", txn_id=txn and 3))
        await writer.drain()
        answers = await read_answers(reader, 3, decode)  # the refusal need not wait: any order
        assert sorted((a.entry_id, a.status) for a in answers) == [(0, OK), (1, OK), (1, BAD)]
        read = ReadRequest(5, 1, txn_id=txn and 4)
        writer.write(v3.encode_request_frame(read) if txn else v2.encode_request_frame(read))
        await writer.drain()
        (answer,) = await read_answers(reader, 1, decode)
        assert isinstance(answer, ReadResponse) and answer.status is OK
        assert bytes(answer.body or b"") == body(5, 1, b"second")
    finally:
        writer.close()
    assert bookie.metrics is not None
    family = bookie.metrics.family("bkeeper_bookie_oversized_frames_total")
    assert [value for _, value in family.values()] == [1]
