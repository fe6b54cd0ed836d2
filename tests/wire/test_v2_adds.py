"""The bookie's batch lane for v2 adds: scanning a chunk of frames, packing many answers."""

from __future__ import annotations

import struct

import pytest

from bkeeper.wire import v2
from bkeeper.wire.codes import StatusCode
from bkeeper.wire.messages import AddRequest, ReadRequest
from bkeeper.wire.v2_adds import add_response_frames, scan_add_requests

KEY = b"k" * 20


def body(ledger_id: int, entry_id: int, lac: int = -1, payload: bytes = b"data") -> bytes:
    return struct.pack(">qqqq", ledger_id, entry_id, lac, len(payload)) + payload


def add(ledger_id: int, entry_id: int, **flags: bool) -> bytes:
    request = AddRequest(ledger_id, entry_id, KEY, body(ledger_id, entry_id, entry_id - 1), **flags)
    return v2.encode_request_frame(request)


def scan(buffer: bytes, offset: int = 0, count: int = 1000, size: int = 1 << 30):
    lists: tuple[list, list, list, list, list] = ([], [], [], [], [])
    stop, added, total = scan_add_requests(buffer, offset, 5 << 20, count, size, *lists)
    return stop, added, total, lists


def test_collects_plain_adds_up_to_the_first_other_frame() -> None:
    adds = b"".join(add(7, e) for e in range(3))
    read = v2.encode_request_frame(ReadRequest(7, 0))
    buffer = adds + read + add(7, 3)
    stop, added, total, (ledgers, entries, lacs, keys, bodies) = scan(buffer)
    assert (stop, added, total) == (len(adds), 3, len(adds) - 12)
    assert (ledgers, entries, lacs, keys) == ([7, 7, 7], [0, 1, 2], [-1, 0, 1], [KEY] * 3)
    assert bodies == [body(7, e, e - 1) for e in range(3)]
    assert all(type(b) is bytes for b in bodies)
    # From past the read, the next add.
    assert scan(buffer, len(adds) + len(read))[:2] == (len(buffer), 1)


@pytest.mark.parametrize(
    "other",
    [
        add(7, 9, recovery=True),  # flags: the general path decides
        add(7, 9)[:-1],  # incomplete
        struct.pack(">iI", 4 + 20 + 16, v2.header(1)) + KEY + struct.pack(">qq", 7, 9),  # short
        struct.pack(">i", -5) + add(7, 9)[4:],  # a bad length
    ],
)
def test_stops_at_anything_but_a_complete_plain_add(other: bytes) -> None:
    first = add(7, 8)
    stop, added, _, _ = scan(first + other)
    assert (stop, added) == (len(first), 1)


def test_stops_at_the_limits() -> None:
    buffer = b"".join(add(7, e) for e in range(5))
    frame = len(add(7, 0)) - 4
    assert scan(buffer, count=2)[:3] == (2 * (frame + 4), 2, 2 * frame)
    assert scan(buffer, size=frame + 1)[:2] == (2 * (frame + 4), 2)
    assert scan(buffer, count=0)[:2] == (0, 0)


def test_answers_are_the_single_answers_joined() -> None:
    ledgers, entries = [7, 7, 8], [0, 1, 5]
    for status in (StatusCode.EOK, StatusCode.EFENCED):
        pairs = zip(ledgers, entries, strict=True)
        expected = b"".join(v2.add_response_frame(status, led, e) for led, e in pairs)
        assert add_response_frames(status, ledgers, entries) == expected
    assert add_response_frames(StatusCode.EOK, [], []) == b""


def test_decoder_hands_its_buffer_over_and_keeps_the_tail() -> None:
    from bkeeper.common.errors import ProtocolError
    from bkeeper.wire.framing import FrameDecoder

    decoder = FrameDecoder(1000)
    frame = add(7, 0)
    decoder.receive_data(frame[:10])
    assert decoder.frames() == []
    buffer = decoder.take_all(frame[10:] + frame[:3])
    assert buffer == frame + frame[:3]
    assert decoder.partial_bytes == 0 and decoder.buffered_bytes == 0
    decoder.keep_tail(buffer, len(frame))
    assert decoder.partial_bytes == 3
    decoder.receive_data(frame[3:])
    assert [bytes(f) for f in decoder.frames()] == [frame[4:]]
    with pytest.raises(ProtocolError, match="exceeds the limit"):
        decoder.keep_tail(struct.pack(">i", 5000), 0)
    with pytest.raises(ProtocolError):
        decoder.take_all(b"")  # poisoned
