"""The v2 fast lanes a writer uses: ADD frames built in one copy, and the response stream."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bkeeper.common.errors import ProtocolError
from bkeeper.wire import v2, v2_stream
from bkeeper.wire.batch_frames import FramedBatchReadResponse, split_bodies
from bkeeper.wire.codes import StatusCode, V2Flag
from bkeeper.wire.digest import DigestManager, DigestType, master_key
from bkeeper.wire.messages import AddRequest, AddResponse, BatchReadResponse, ReadResponse

from .strategies import V2_REQUESTS, V2_RESPONSES, add_request_v2

KEY = master_key(b"pw")


@given(st.binary(max_size=2000), st.integers(0, 2**40), st.sampled_from(list(DigestType)))
def test_add_frame_equals_the_generic_encoding(payload, entry_id, digest_type):
    digest = DigestManager(7, digest_type, b"pw")
    header, mac = digest.entry_parts(entry_id, entry_id - 1, 99, payload)
    frame = v2.add_request_frame(KEY, (header, mac, payload), len(header) + len(mac) + len(payload))
    body = digest.encode_entry(entry_id, entry_id - 1, 99, payload)
    assert frame == v2.encode_request_frame(AddRequest(7, entry_id, KEY, body))
    assert frame[v2.ADD_FRAME_PREFIX_BYTES :] == body
    with pytest.raises(ProtocolError):
        v2.add_request_frame(b"short", (body,), len(body))


def _expected(response):
    if isinstance(response, AddResponse):
        return (response.status, response.ledger_id, response.entry_id)
    return response


@given(st.lists(V2_RESPONSES, max_size=20), st.lists(st.integers(1, 64), max_size=30))
def test_response_stream_in_any_chunks(responses, cuts):
    data = b"".join(v2.encode_response_frame(r) for r in responses)
    stream = v2_stream.ResponseStream(1 << 20)
    adds, others = [], []
    position = 0
    for cut in [*cuts, len(data)]:
        got_adds, got_others = stream.feed(data[position : position + cut])
        adds += got_adds
        others += got_others
        position += cut
    expected = [_expected(r) for r in responses]
    assert len(adds) + len(others) == len(responses)
    # each list keeps arrival order; ADD answers come as (status, ledger, entry) triples
    assert adds == [want for want in expected if isinstance(want, tuple)]
    rest = [r for r in responses if not isinstance(_expected(r), tuple)]
    for got, response in zip(others, rest, strict=True):
        want = _expected(response)
        if isinstance(want, ReadResponse):
            assert isinstance(got, ReadResponse)
            assert (got.status, got.ledger_id, got.entry_id) == (
                want.status,
                want.ledger_id,
                want.entry_id,
            )
            assert (bytes(got.body) if got.body is not None else None) == (
                bytes(want.body) if want.body is not None else None
            )
        elif isinstance(want, BatchReadResponse):  # bodies left in the frame
            assert isinstance(got, FramedBatchReadResponse) and got.frame is not None
            fields = (got.status, got.ledger_id, got.start_entry_id, got.request_id)
            assert fields == (want.status, want.ledger_id, want.start_entry_id, want.request_id)
            assert [bytes(b) for b in split_bodies(got.frame)] == [bytes(b) for b in want.bodies]
        else:
            assert type(got) is type(want)
            assert got == want


def test_add_response_errors_map_to_status_codes():
    frame = v2.encode_response_frame(AddResponse(StatusCode.EFENCED, 3, 4))
    assert v2_stream.ResponseStream(100).feed(frame) == ([(StatusCode.EFENCED, 3, 4)], [])


@pytest.mark.parametrize("length", [0, -5, 101])
def test_response_stream_refuses_bad_lengths(length):
    with pytest.raises(ProtocolError, match="frame length"):
        v2_stream.ResponseStream(100).feed(length.to_bytes(4, "big", signed=True) + b"\0" * 8)


@given(add_request_v2())
def test_peek_add_request_returns_what_the_encoder_wrote(request):
    frame = v2.encode_request_frame(request)
    payload = memoryview(frame)[4:]
    peeked = v2.peek_add_request(payload)
    assert peeked is not None
    flags, ledger_id, entry_id, key, body = peeked
    assert (ledger_id, entry_id, bytes(key), bytes(body)) == (
        request.ledger_id,
        request.entry_id,
        request.master_key,
        request.body,
    )
    assert bool(flags & V2Flag.RECOVERY_ADD) == request.recovery
    assert bool(flags & V2Flag.HIGH_PRIORITY) == request.high_priority
    assert key.obj is frame and body.obj is frame  # views of the frame, not copies
    decoded = v2.decode_request(payload)  # the slow lane agrees field by field
    assert isinstance(decoded, AddRequest)
    assert (decoded.recovery, decoded.high_priority) == (request.recovery, request.high_priority)


@given(V2_REQUESTS.filter(lambda r: not isinstance(r, AddRequest)))
def test_peek_add_request_passes_over_other_requests(request):
    assert v2.peek_add_request(memoryview(v2.encode_request_frame(request))[4:]) is None


@given(add_request_v2(), st.integers(0, 4 + 20 + 15))
def test_peek_add_request_passes_over_a_cut_add(request, length):
    frame = memoryview(v2.encode_request_frame(request))[4 : 4 + length]
    assert v2.peek_add_request(frame) is None
    with pytest.raises(ProtocolError):
        v2.decode_request(frame)  # which then says what is wrong with it
