"""Frames over the limit (issue 36): the decoder keeps their head and drops the rest unread;
the v2 and v3 codecs answer the request from that head."""

from __future__ import annotations

import random

import pytest

from bkeeper.common.errors import ProtocolError
from bkeeper.wire import v2, v3
from bkeeper.wire.codes import OperationType, StatusCode
from bkeeper.wire.framing import OVERSIZED_HEAD_BYTES, FrameDecoder, OversizedFrame
from bkeeper.wire.messages import (
    AddRequest,
    AddResponse,
    ErrorResponse,
    ReadRequest,
    WriteLacRequest,
)

LIMIT = 1_000
SKIP_MAX = 100_000
KEY = bytes(range(20))


def frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


def v2_add(ledger_id: int, entry_id: int, body_bytes: int) -> bytes:
    body = ledger_id.to_bytes(8, "big") + entry_id.to_bytes(8, "big") + bytes(body_bytes)
    return v2.encode_request_frame(AddRequest(ledger_id, entry_id, KEY, body))


def drain(decoder: FrameDecoder, chunks: list[bytes]) -> tuple[list[object], int]:
    """Feed ``chunks``; every frame and oversized head in order, and the most bytes the
    decoder held after a chunk beyond that chunk itself."""
    out: list[object] = []
    held_max = 0
    for chunk in chunks:
        decoder.receive_data(chunk)
        while True:
            out.extend(bytes(f) for f in decoder.frames())
            held_max = max(held_max, decoder.buffered_bytes)
            if decoder.oversized is None:
                break
            out.append(decoder.oversized)
            decoder.oversized = None
    return out, held_max


def cut(stream: bytes, rng: random.Random, most: int) -> list[bytes]:
    chunks, at = [], 0
    while at < len(stream):
        size = rng.randint(1, most)
        chunks.append(stream[at : at + size])
        at += size
    return chunks


BIG = v2_add(7, 3, 50_000)
STREAM = frame(b"\x02first") + BIG + frame(b"\x02second") + BIG + frame(b"\x02third")
EXPECTED = [
    b"\x02first",
    OversizedFrame(len(BIG) - 4, BIG[4 : 4 + OVERSIZED_HEAD_BYTES]),
    b"\x02second",
    OversizedFrame(len(BIG) - 4, BIG[4 : 4 + OVERSIZED_HEAD_BYTES]),
    b"\x02third",
]


@pytest.mark.parametrize("most", [1, 7, 100, 4096, 70_000, len(STREAM)])
def test_an_oversized_frame_is_skipped_in_order_and_never_buffered(most: int) -> None:
    rng = random.Random(most)
    for _ in range(3):
        chunks = cut(STREAM, rng, most)
        decoder = FrameDecoder(LIMIT, SKIP_MAX)
        got, held_max = drain(decoder, chunks)
        assert got == EXPECTED
        # At most a whole frame under the limit, or an oversized frame's head, plus a chunk.
        assert held_max <= LIMIT + 4 + min(most, len(STREAM))
        assert decoder.buffered_bytes == 0 and decoder.skipping_bytes == 0


def test_frames_after_an_oversized_one_wait_until_it_is_cleared() -> None:
    decoder = FrameDecoder(LIMIT, SKIP_MAX)
    decoder.receive_data(STREAM)
    assert [bytes(f) for f in decoder.frames()] == [b"\x02first"]
    assert decoder.oversized is not None
    assert decoder.frames() == []  # not cleared: nothing more
    decoder.oversized = None
    assert [bytes(f) for f in decoder.frames()] == [b"\x02second"]


def test_the_head_is_awaited_then_the_body_dropped_as_it_comes() -> None:
    decoder = FrameDecoder(LIMIT, SKIP_MAX)
    decoder.receive_data(BIG[:30])
    assert decoder.frames() == [] and decoder.oversized is None
    decoder.receive_data(BIG[30:5_000])
    assert decoder.frames() == [] and decoder.oversized is not None
    assert decoder.buffered_bytes == 0
    assert decoder.skipping_bytes == len(BIG) - 5_000


def test_without_skipping_or_over_the_skip_limit_the_length_is_an_error() -> None:
    with pytest.raises(ProtocolError, match="exceeds the limit of 1000 bytes"):
        FrameDecoder(LIMIT).receive_data(BIG[:4])
    decoder = FrameDecoder(LIMIT, 40_000)
    with pytest.raises(ProtocolError, match=f"frame length {len(BIG) - 4} exceeds"):
        decoder.receive_data(BIG[:4])
    with pytest.raises(ProtocolError):  # poisoned
        decoder.frames()
    with pytest.raises(ProtocolError, match="not positive"):
        FrameDecoder(LIMIT, SKIP_MAX).receive_data(b"\xff\xff\xff\xff")


@pytest.mark.parametrize(
    "start",
    [b"x", b"\x02\x02", b"\x00\x01", b"\xff" * 64],
    ids=["junk", "a v2 READ", "a legacy v2 header", "a whole head of junk"],
)
def test_a_head_that_cannot_name_an_answerable_request_is_an_error_at_once(
    start: bytes,
) -> None:
    decoder = FrameDecoder(LIMIT, SKIP_MAX)
    decoder.receive_data((50_000).to_bytes(4, "big"))
    assert decoder.frames() == []  # nothing to tell yet
    decoder.receive_data(start)
    with pytest.raises(ProtocolError, match="exceeds the limit of 1000 bytes"):
        decoder.frames()


def walk(decoder: FrameDecoder, data: bytes) -> list[object]:
    """What the bookie's v2 batch lane does: take everything, walk whole frames, give the
    tail back; an oversized frame that ``keep_tail`` finds is answered, the walk goes on."""
    out: list[object] = []
    while True:
        buffer = decoder.take_all(data)
        offset = 0
        while len(buffer) - offset >= 4:
            size = int.from_bytes(buffer[offset : offset + 4], "big", signed=True)
            if not 0 < size <= LIMIT or offset + 4 + size > len(buffer):
                break
            out.append(buffer[offset + 4 : offset + 4 + size])
            offset += 4 + size
        decoder.keep_tail(buffer, offset)
        if decoder.oversized is None:
            return out
        out.append(decoder.oversized)
        decoder.oversized = None
        data = b""


@pytest.mark.parametrize("most", [1, 13, 3000, len(STREAM)])
def test_take_all_and_keep_tail_skip_oversized_frames_too(most: int) -> None:
    decoder = FrameDecoder(LIMIT, SKIP_MAX)
    got: list[object] = []
    for chunk in cut(STREAM, random.Random(most), most):
        got.extend(walk(decoder, chunk))
        assert decoder.buffered_bytes <= LIMIT + 4
    assert got == EXPECTED


# -- answers from the head ------------------------------------------------------------------
def test_v2_answers_an_oversized_add_with_its_ids() -> None:
    answer = v2.oversized_answer_frame(BIG[4 : 4 + OVERSIZED_HEAD_BYTES], StatusCode.EBADREQ)
    assert answer is not None
    assert v2.decode_response(answer[4:]) == AddResponse(StatusCode.EBADREQ, 7, 3)


def test_v2_does_not_answer_what_is_not_an_add() -> None:
    read = v2.encode_request_frame(ReadRequest(7, 3))[4:]
    assert v2.oversized_answer_frame(read + bytes(40), StatusCode.EBADREQ) is None
    assert v2.oversized_answer_frame(BIG[4:30], StatusCode.EBADREQ) is None  # too short
    assert v2.oversized_answer_frame(b"\xff" * 64, StatusCode.EBADREQ) is None


@pytest.mark.parametrize(
    ("ledger_id", "entry_id", "txn_id"),
    [(7, 3, 1), (2**63 - 1, 2**62, 2**64 - 1), (-1, -0x1000, 0)],
)
def test_v3_answers_an_oversized_add_with_its_txn_and_ids(
    ledger_id: int, entry_id: int, txn_id: int
) -> None:
    request = AddRequest(ledger_id, entry_id, KEY, bytes(6 << 20), recovery=True, txn_id=txn_id)
    head = v3.encode_request(request)[:OVERSIZED_HEAD_BYTES]
    answer = v3.oversized_answer_frame(head, StatusCode.EBADREQ)
    assert answer is not None
    response = v3.decode_response(answer[4:])
    assert response == AddResponse(StatusCode.EBADREQ, ledger_id, entry_id, txn_id)


def test_v3_answers_another_oversized_request_by_its_operation() -> None:
    request = WriteLacRequest(5, 9, KEY, bytes(6 << 20), txn_id=77)
    head = v3.encode_request(request)[:OVERSIZED_HEAD_BYTES]
    answer = v3.oversized_answer_frame(head, StatusCode.EBADREQ)
    assert answer is not None
    response = v3.decode_response(answer[4:])
    assert isinstance(response, ErrorResponse)
    assert (response.operation, response.status, response.txn_id) == (
        OperationType.WRITE_LAC,
        StatusCode.EBADREQ,
        77,
    )


@pytest.mark.parametrize(
    "head",
    [b"\x0a\x7f" + bytes(62), b"\x0a\x02\x08\x03" + bytes(60), b"\x0b" * 64, b"\x0a"],
    ids=["header longer than the head", "header without txn id", "not a header", "truncated"],
)
def test_v3_does_not_answer_a_head_without_a_header(head: bytes) -> None:
    assert v3.oversized_answer_frame(head, StatusCode.EBADREQ) is None


def test_the_v3_add_overhead_bound_holds() -> None:
    worst = AddRequest(
        -1, -1, KEY, b"", recovery=True, high_priority=True, write_flags=-1, txn_id=2**64 - 1
    )
    empty = len(v3.encode_request(worst))
    # The body's and the AddRequest's lengths grow from 1-byte to at most 5-byte varints.
    assert empty + 2 * 4 <= v3.ADD_REQUEST_OVERHEAD_BYTES_MAX
