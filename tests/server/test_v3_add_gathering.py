"""The v3 adds a bookie connection reads in one chunk reach the handlers as one batch
(``AddBatchAnswer.gathering``), answered one v3 response each with its own txn id; any other
request, or adds of other flags, hand over what was gathered first, so requests keep their
order. In process, over a fake transport."""

from __future__ import annotations

import asyncio
from typing import Any

from bkeeper.server.config import BookieConfig
from bkeeper.server.connection import BookieConnection
from bkeeper.server.connections import ConnectionTable
from bkeeper.server.responder import AddBatchAnswer
from bkeeper.wire import v3
from bkeeper.wire.codes import StatusCode
from bkeeper.wire.framing import FrameDecoder
from bkeeper.wire.messages import AddRequest, AddResponse, ReadRequest, ReadResponse
from tests.server.test_oversized_frames import KEY, Transport, body


def add(entry_id: int, txn_id: int, *, recovery: bool = False, ledger_id: int = 1) -> bytes:
    request = AddRequest(
        ledger_id, entry_id, KEY, body(ledger_id, entry_id, b"x"), recovery, txn_id=txn_id
    )
    return v3.encode_request_frame(request)


def read(entry_id: int, txn_id: int) -> bytes:
    return v3.encode_request_frame(ReadRequest(1, entry_id, txn_id=txn_id))


class Bookie:
    """A connection whose handlers record what reaches them, in order, and answer at once:
    a batch as if durable (EOK), a read with an empty entry."""

    def __init__(self, config: BookieConfig | None = None) -> None:
        self.config = config or BookieConfig(data_dir="-")
        self.transport = Transport()
        self.seen: list[tuple[str, Any]] = []
        self.conn = BookieConnection(
            self.config, ConnectionTable(self.config), self.dispatch, self.add
        )
        self.conn.connection_made(self.transport)  # type: ignore[arg-type]

    def dispatch(self, conn: BookieConnection, request: Any, size: int) -> None:
        self.seen.append((type(request).__name__, request.txn_id))
        if isinstance(request, AddRequest):  # (alone: the handlers' single add)
            response: Any = AddResponse(
                StatusCode.EBADREQ, request.ledger_id, request.entry_id, request.txn_id
            )
        else:
            response = ReadResponse(StatusCode.EOK, 1, request.entry_id, txn_id=request.txn_id)
        conn.respond(response, size)

    def add(self, conn: BookieConnection, batch: AddBatchAnswer) -> None:
        self.seen.append(("batch", (tuple(batch.txn_ids or ()), batch.recovery)))
        batch.parts = 1
        batch.durable(StatusCode.EOK, None)

    async def answers(self) -> list[Any]:
        await asyncio.sleep(0)  # the flush
        decoder = FrameDecoder()
        decoder.receive_data(bytes(self.transport.written))
        self.transport.written.clear()
        return [v3.decode_response(frame) for frame in decoder.frames()]


async def test_the_adds_of_a_chunk_are_one_batch_answered_with_their_txn_ids() -> None:
    bookie = Bookie()
    bookie.conn.data_received(b"".join(add(entry, 100 + entry) for entry in range(5)))
    assert bookie.seen == [("batch", ((100, 101, 102, 103, 104), False))]
    assert await bookie.answers() == [
        AddResponse(StatusCode.EOK, 1, entry, 100 + entry) for entry in range(5)
    ]
    assert (bookie.conn.requests_in_flight, bookie.conn.bytes_in_flight) == (0, 0)


async def test_another_request_or_other_flags_hand_over_what_was_gathered_first() -> None:
    bookie = Bookie()
    chunk = [add(0, 1), add(1, 2), read(1, 3), add(2, 4), add(3, 5, recovery=True), add(4, 6)]
    bookie.conn.data_received(b"".join(chunk))
    assert bookie.seen == [
        ("batch", ((1, 2), False)),
        ("ReadRequest", 3),
        ("batch", ((4,), False)),
        ("batch", ((5,), True)),
        ("batch", ((6,), False)),
    ]
    assert sorted(answer.txn_id for answer in await bookie.answers()) == [1, 2, 3, 4, 5, 6]
    assert (bookie.conn.requests_in_flight, bookie.conn.bytes_in_flight) == (0, 0)


async def test_a_chunk_ends_its_batch_and_a_frame_split_across_chunks_joins_the_next() -> None:
    bookie = Bookie()
    stream = add(0, 1) + add(1, 2) + add(2, 3)
    cut = len(add(0, 1)) + 5  # inside the second frame
    bookie.conn.data_received(stream[:cut])
    bookie.conn.data_received(stream[cut:])
    assert bookie.seen == [("batch", ((1,), False)), ("batch", ((2, 3), False))]


async def test_an_add_whose_body_names_another_entry_goes_alone_to_be_refused() -> None:
    bookie = Bookie()
    wrong = AddRequest(1, 7, KEY, body(1, 8, b"x"), txn_id=2)
    bookie.conn.data_received(add(0, 1) + v3.encode_request_frame(wrong) + add(1, 3))
    assert bookie.seen == [("batch", ((1,), False)), ("AddRequest", 2), ("batch", ((3,), False))]
    answers = {answer.txn_id: answer.status for answer in await bookie.answers()}
    assert answers == {1: StatusCode.EOK, 2: StatusCode.EBADREQ, 3: StatusCode.EOK}


async def test_adds_over_the_in_flight_limits_go_alone_to_be_refused() -> None:
    bookie = Bookie(BookieConfig(data_dir="-", connection_requests_in_flight_max=1))
    bookie.conn.data_received(b"".join(add(entry, 1 + entry) for entry in range(3)))
    # Up to twice the limit is counted (and gathered); what follows is not counted and goes
    # through the handlers, which answer it ETOOMANYREQUESTS.
    assert bookie.seen == [("batch", ((1, 2), False)), ("AddRequest", 3)]
