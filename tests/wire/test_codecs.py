"""Round trips of every message through the v2 and v3 codecs, and fuzzing of both decoders."""

from __future__ import annotations

import contextlib
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from bkeeper.common.errors import ProtocolError
from bkeeper.wire import v2, v3
from bkeeper.wire.messages import AddRequest, ReadResponse

from .strategies import V2_REQUESTS, V2_RESPONSES, V3_REQUESTS, V3_RESPONSES


def _normal(message: object) -> object:
    """Messages with views replaced by bytes, for comparison."""
    if hasattr(message, "__dataclass_fields__"):
        values = {}
        for name in message.__dataclass_fields__:  # type: ignore[attr-defined]
            value = getattr(message, name)
            if isinstance(value, memoryview | bytearray):
                value = bytes(value)
            elif isinstance(value, tuple):
                value = tuple(
                    bytes(v) if isinstance(v, memoryview | bytearray) else v for v in value
                )
            values[name] = value
        return (type(message).__name__, values)
    return message


@given(V2_REQUESTS)
def test_v2_requests_round_trip(request):
    frame = v2.encode_request_frame(request)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    assert _normal(v2.decode_request(frame[4:])) == _normal(request)


@given(V2_RESPONSES)
def test_v2_responses_round_trip(response):
    frame = v2.encode_response_frame(response)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    assert _normal(v2.decode_response(frame[4:])) == _normal(response)


@given(V3_REQUESTS)
def test_v3_requests_round_trip(request):
    assert _normal(v3.decode_request(v3.encode_request(request))) == _normal(request)


@given(V3_RESPONSES)
def test_v3_responses_round_trip(response):
    assert _normal(v3.decode_response(v3.encode_response(response))) == _normal(response)


def _mutations(frame: bytes, rng: random.Random) -> list[bytes]:
    out = [frame[:cut] for cut in range(0, len(frame), max(1, len(frame) // 8))]
    for _ in range(20):
        data = bytearray(frame)
        for _ in range(rng.randint(1, 4)):
            if data:
                data[rng.randrange(len(data))] = rng.randrange(256)
        out.append(bytes(data))
    out.append(frame + bytes(rng.randrange(256) for _ in range(rng.randint(1, 16))))
    return out


_DECODERS = (v2.decode_request, v2.decode_response, v3.decode_request, v3.decode_response)


@settings(max_examples=60)
@given(st.one_of(V2_REQUESTS, V2_RESPONSES), st.randoms(use_true_random=False))
def test_mutated_v2_frames_raise_only_protocol_error(message, rng):
    encode = (
        v2.encode_request
        if hasattr(message, "master_key") or "Request" in type(message).__name__
        else v2.encode_response
    )
    for data in _mutations(encode(message), rng):
        for decode in _DECODERS:
            with contextlib.suppress(ProtocolError):
                decode(data)


@settings(max_examples=60)
@given(st.one_of(V3_REQUESTS, V3_RESPONSES), st.randoms(use_true_random=False))
def test_mutated_v3_frames_raise_only_protocol_error(message, rng):
    encode = v3.encode_request if "Request" in type(message).__name__ else v3.encode_response
    for data in _mutations(encode(message), rng):
        for decode in _DECODERS:
            with contextlib.suppress(ProtocolError):
                decode(data)


@given(st.binary(max_size=200))
def test_random_bytes_raise_only_protocol_error(data):
    for decode in _DECODERS:
        with contextlib.suppress(ProtocolError):
            decode(data)


def test_v2_add_request_body_is_a_view_not_a_copy():
    frame = memoryview(v2.encode_request(AddRequest(1, 2, b"k" * 20, bytes(16) + b"payload")))
    request = v2.decode_request(frame)
    assert isinstance(request.body, memoryview)
    assert request.body.obj is frame.obj


def test_v2_read_error_response_has_no_body():
    from bkeeper.wire.codes import StatusCode

    frame = v2.encode_response(ReadResponse(StatusCode.ENOENTRY, 3, 4, b"ignored"))
    assert len(frame) == 24
    assert v2.decode_response(frame).body is None
