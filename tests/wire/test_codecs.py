"""Round trips of every message through the v2 and v3 codecs, and fuzzing of both decoders.

The fuzz tests check three things of every changed frame: no decoder raises anything but
``ProtocolError``; the frame's own decoder refuses what must be refused (a v2 packet cut inside
a fixed part or naming a version newer than 2, a v3 frame cut inside a field or before its
required fields end) and decodes what must decode to what it must (the frame unchanged to the
message encoded, a v2 frame cut or changed only in its entry body to the message with that
body, a v3 frame cut between fields after its required ones); and how many changed frames
decoded and were refused, as Hypothesis events (``pytest --hypothesis-show-statistics``), so
a run made only of refusals shows.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from itertools import accumulate
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from bkeeper.common.errors import ProtocolError
from bkeeper.wire import v2, v3
from bkeeper.wire.codes import V2_TO_STATUS, OperationType, StatusCode, V2Flag, V2OpCode
from bkeeper.wire.messages import (
    AddRequest,
    AddResponse,
    AuthMessage,
    AuthRequest,
    AuthResponse,
    BatchReadResponse,
    ReadResponse,
    UnknownRequest,
)
from bkeeper.wire.varint import decode_varint, encode_varint

from .strategies import V2_REQUESTS, V2_RESPONSES, V3_REQUESTS, V3_RESPONSES


def _normal(message: object) -> object:
    """Messages with views replaced by bytes, for comparison."""
    if hasattr(message, "__dataclass_fields__"):
        values = {}
        for name in message.__dataclass_fields__:
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


# -- fuzzing ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Mutation:
    """A changed frame: ``cut`` (``data`` is the frame's first ``at`` bytes), ``bytes`` (some
    bytes replaced, the first changed one at ``at``: ``data`` may equal the frame) or
    ``append`` (bytes added after the frame, ``at`` its length)."""

    kind: str
    data: bytes
    at: int


def _mutations(frame: bytes, rng: random.Random) -> list[_Mutation]:
    step = max(1, len(frame) // 8)
    out = [_Mutation("cut", frame[:cut], cut) for cut in range(0, len(frame), step)]
    for _ in range(20):
        data = bytearray(frame)
        for _ in range(rng.randint(1, 4)):
            if data:
                data[rng.randrange(len(data))] = rng.randrange(256)
        changed = (i for i, (a, b) in enumerate(zip(data, frame, strict=True)) if a != b)
        out.append(_Mutation("bytes", bytes(data), next(changed, len(frame))))
    junk = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
    out.append(_Mutation("append", frame + junk, len(frame)))
    return out


_DECODERS = (v2.decode_request, v2.decode_response, v3.decode_request, v3.decode_response)
_REQUEST_DECODERS = (v2.decode_request, v3.decode_request)


def _decoded(decode: Callable[[bytes], object], data: bytes) -> object | None:
    """What ``decode`` makes of ``data``; None when it refuses it with ``ProtocolError`` (the
    only exception a decoder may raise: any other fails the test)."""
    try:
        return decode(data)
    except ProtocolError:
        return None


def _own_decoder(message: object, codec: object) -> Callable[[bytes], object]:
    request = "Request" in type(message).__name__
    return codec.decode_request if request else codec.decode_response


_ENCODERS = (v2.encode_request, v2.encode_response, v3.encode_request, v3.encode_response)


def _check_every_decoder(data: bytes) -> list[object | None]:
    """What each decoder makes of ``data`` (None: refused with ``ProtocolError``); both v2
    decoders must refuse a packet shorter than its header int or naming a version newer
    than 2 (its first byte); whatever a decoder accepts is a message its codec writes again
    and reads back the same (``_check_encodes_again``)."""
    outcomes = [_decoded(decode, data) for decode in _DECODERS]
    if len(data) < 4 or data[0] > v2.CURRENT_VERSION:
        assert outcomes[:2] == [None, None], f"v2 decoded {data!r}: {outcomes[:2]}"
    for decode, encode, outcome in zip(_DECODERS, _ENCODERS, outcomes, strict=True):
        _check_encodes_again(decode, encode, outcome, data)
    return outcomes


def _check_encodes_again(
    decode: Callable[[bytes], Any], encode: Callable[[Any], bytes], message: Any, data: bytes
) -> None:
    """A decoded ``message`` (of ``data``) is one the codec can send: encoding it raises
    nothing and decodes to it again. Not an ``UnknownRequest`` (only ever answered
    EBADREQ, never sent); a recovery ADD goes out with HIGH_PRIORITY (v2's flag, v3's
    priority 1) too, as Java's client sends it, so it comes back with ``high_priority`` set
    (a v3 frame may carry a recovery ADD at priority 0: ours never sends one)."""
    if message is None or isinstance(message, UnknownRequest):
        return
    again = decode(encode(message))
    if isinstance(message, AddRequest) and message.recovery and decode in _REQUEST_DECODERS:
        message = replace(message, high_priority=True)
    assert _normal(again) == _normal(message), f"{data!r} decoded to {message}, then {again}"


def _count(kind: str, outcome: object | None) -> None:
    event(f"{kind}: {'refused' if outcome is None else 'decoded'}")


# -- v2: what a changed frame must decode to, or that it must be refused -----------------------
#: Where the entry body starts in a v2 ADD request (after header and master key; the body
#: opens with the 16 bytes of ledger id and entry id the request decodes to) and in a READ
#: response (after header, rc, ledger id and entry id); where a BATCH_READ response's
#: (length, body) pairs start (after header, rc, ledger id, start entry id, request id).
_V2_ADD_BODY_AT = 24
_V2_READ_BODY_AT = 24
_V2_BATCH_BODIES_AT = 32


def _v2_body_at(message: object) -> tuple[int, int] | None:
    """(where the entry body starts, where the fixed part ends) of a v2 frame whose entry
    body is all that follows its fixed part; None for other packets."""
    if isinstance(message, AddRequest):
        return _V2_ADD_BODY_AT, _V2_ADD_BODY_AT + 16
    if isinstance(message, ReadResponse) and message.status is StatusCode.EOK:
        return _V2_READ_BODY_AT, _V2_READ_BODY_AT
    return None


def _v2_auth_name_end(auth: AuthMessage) -> int:
    """Where a v2 AUTH packet's plugin name field ends (its payload field follows)."""
    name = auth.plugin_name.encode()
    return 4 + 1 + len(encode_varint(len(name))) + len(name)


def _v2_cut_decodes_to(message: object, frame: bytes, n: int) -> object | None:
    """What ``frame`` (v2, of ``message``) cut to ``n`` bytes must decode to with its own
    decoder; None: it must be refused. A v2 packet has no length of its own, so a cut decodes
    where the packet could have ended: a shorter entry body, fewer entries of a batch, an
    AUTH payload missing; a cut inside a fixed part (all of a READ or BATCH_READ request
    and an ADD response) is refused."""
    match message:
        case AuthRequest(auth=auth) | AuthResponse(auth=AuthMessage() as auth):
            if n == _v2_auth_name_end(auth):
                return replace(message, auth=AuthMessage(auth.plugin_name, b""))
        case BatchReadResponse(bodies=bodies):
            ends = list(accumulate((4 + len(b) for b in bodies), initial=_V2_BATCH_BODIES_AT))
            if n in ends:
                return replace(message, bodies=bodies[: ends.index(n)])
        case _ if (at := _v2_body_at(message)) is not None and n >= at[1]:
            return replace(message, body=frame[at[0] : n])
    return None


def _check_v2(message: object, frame: bytes, mutation: _Mutation) -> None:
    outcome = _decoded(_own_decoder(message, v2), mutation.data)
    _count(f"v2 {mutation.kind}", outcome)
    at = _v2_body_at(message)
    if mutation.data == frame:
        wanted: object | None = message
    elif mutation.kind == "cut":
        wanted = _v2_cut_decodes_to(message, frame, mutation.at)
    elif at is not None and mutation.at >= at[1]:  # only the entry body changed or grew
        wanted = replace(message, body=mutation.data[at[0] :])
    elif isinstance(message, AddResponse) and mutation.kind == "append":
        wanted = None  # an ADD response is 24 bytes, exactly
    else:
        return  # a fixed part changed: another message, or refused (a version newer than 2)
    assert _normal(outcome) == _normal(wanted), f"{message}: {mutation}"


@settings(max_examples=60)
@given(st.one_of(V2_REQUESTS, V2_RESPONSES), st.randoms(use_true_random=False))
def test_mutated_v2_frames_decode_or_are_refused_as_they_must(message, rng):
    _mutate_and_check(message, rng, v2, _check_v2)


def _mutate_and_check(message: Any, rng: Any, codec: Any, check: Any) -> None:
    """Every decoder on each mutation of ``message``'s frame in ``codec``, then ``check``
    (what its own decoder must make of it); the frame itself decodes to ``message``."""
    encode = codec.encode_request if "Request" in type(message).__name__ else codec.encode_response
    frame = encode(message)
    for mutation in _mutations(frame, rng):
        _check_every_decoder(mutation.data)
        check(message, frame, mutation)
    assert _normal(_own_decoder(message, codec)(frame)) == _normal(message)


# -- v3: a frame cut inside a field, or before its required fields end, is refused ---------------
def _v3_field_ends(frame: bytes) -> list[int]:
    """Where each top-level protobuf field of ``frame`` ends, in order (protobuf writes them
    in field-number order: the header (1) first, then a response's status (2))."""
    ends, pos = [], 0
    while pos < len(frame):
        key, pos = decode_varint(frame, pos)
        if key & 7 == 0:  # varint
            _, pos = decode_varint(frame, pos)
        else:
            assert key & 7 == 2, f"the codec wrote wire type {key & 7}"  # length-delimited
            size, pos = decode_varint(frame, pos)
            pos += size
        ends.append(pos)
    return ends


def _check_v3(message: object, frame: bytes, mutation: _Mutation) -> None:
    outcome = _decoded(_own_decoder(message, v3), mutation.data)
    _count(f"v3 {mutation.kind}", outcome)
    if mutation.data == frame:
        assert _normal(outcome) == _normal(message)
    if mutation.kind != "cut":
        return  # a changed field: another message, or refused; extra bytes: more fields, or refused
    request = "Request" in type(message).__name__
    ends = _v3_field_ends(frame)
    required_end = ends[0] if request else ends[1]  # the header; a response's status too
    if mutation.at not in (0, *ends) or mutation.at < required_end:
        assert outcome is None, f"{message} cut at {mutation.at} (fields end at {ends})"
        return
    # Cut between fields after the required ones: a request without its body is answered
    # EBADREQ (UnknownRequest); a response without its body is an error response.
    assert outcome is not None, f"{message} cut at {mutation.at} (fields end at {ends})"
    assert outcome.txn_id == message.txn_id
    if request:
        assert isinstance(outcome, UnknownRequest), outcome
    else:
        assert outcome.status == message.status


@settings(max_examples=60)
@given(st.one_of(V3_REQUESTS, V3_RESPONSES), st.randoms(use_true_random=False))
def test_mutated_v3_frames_decode_or_are_refused_as_they_must(message, rng):
    _mutate_and_check(message, rng, v3, _check_v3)


_DECODER_NAMES = ("v2 request", "v2 response", "v3 request", "v3 response")


@given(st.binary(max_size=200))
def test_random_bytes_decode_or_are_refused(data):
    for name, outcome in zip(_DECODER_NAMES, _check_every_decoder(data), strict=True):
        _count(f"random bytes as {name}", outcome)


#: Bytes a v2 request needs after its header int, by opcode: ledger id and entry id (READ),
#: master key and the body's ids (ADD), the batch's fields (BATCH_READ); 20 more for the
#: master key of a READ or BATCH_READ with DO_FENCING.
_V2_REQUEST_REST_BYTES = {
    V2OpCode.ADD_ENTRY: 36,
    V2OpCode.READ_ENTRY: 16,
    V2OpCode.BATCH_READ_ENTRY: 36,
}


def _sized_bytes(size_max: int) -> st.SearchStrategy[bytes]:
    """Bytes of a length drawn evenly (``st.binary`` favours short ones)."""
    return st.integers(0, size_max).flatmap(lambda n: st.binary(min_size=n, max_size=n))


#: v2 opcodes: every one known, and some that are not.
_V2_OPCODES = st.sampled_from([0, *V2OpCode, 8, 255])


@given(st.integers(1, 2), _V2_OPCODES, st.integers(0, 0xFFFF), _sized_bytes(80))
def test_v2_requests_of_random_bytes_decode_when_long_enough(version, opcode, flags, rest):
    """Behind a v2 request header, any bytes decode when there are enough of them (ADD,
    READ, BATCH_READ) or whatever they are (an operation v2 does not serve: UnknownRequest,
    for the bookie to answer EBADREQ); too few are refused."""
    outcome = _decoded(
        v2.decode_request, v2.header(opcode, flags, version).to_bytes(4, "big") + rest
    )
    if opcode == V2OpCode.AUTH:  # a protobuf AuthMessage: decodes or not by its fields
        _count("random AUTH request", outcome)
        return
    needed = _V2_REQUEST_REST_BYTES.get(opcode)  # type: ignore[call-overload]
    if needed is None:
        assert outcome == UnknownRequest(opcode, 0, *_ids(rest)), outcome
        _count("random request of an operation v2 does not serve", outcome)
        return
    fencing = flags & V2Flag.DO_FENCING and opcode != V2OpCode.ADD_ENTRY
    assert (outcome is None) == (len(rest) < needed + (20 if fencing else 0)), (len(rest), outcome)
    _count(f"random {V2OpCode(opcode).name} request", outcome)


def _ids(rest: bytes) -> tuple[int, int]:
    """The ledger id and entry id an UnknownRequest takes from the 16 bytes after its header."""
    if len(rest) < 16:
        return 0, 0
    return int.from_bytes(rest[:8], "big", signed=True), int.from_bytes(
        rest[8:16], "big", signed=True
    )


@given(st.integers(1, 2), _V2_OPCODES, st.sampled_from(sorted(V2_TO_STATUS)), _sized_bytes(40))
def test_v2_responses_of_random_bytes_decode_when_long_enough(version, opcode, rc, rest):
    """Behind a v2 response header and a known error code, any bytes decode when there are
    enough: exactly the ids (ADD), the ids and any body (READ), at least the ids (an
    operation v2 does not serve: an error response); too few (or, for ADD, too many) are
    refused."""
    data = (
        v2.header(opcode, 0, version).to_bytes(4, "big") + rc.to_bytes(4, "big", signed=True) + rest
    )
    outcome = _decoded(v2.decode_response, data)
    if opcode in (V2OpCode.AUTH, V2OpCode.BATCH_READ_ENTRY):  # decode or not by their fields
        _count(f"random {V2OpCode(opcode).name} response", outcome)
        return
    if opcode == V2OpCode.ADD_ENTRY:
        assert (outcome is None) == (len(rest) != 16), (len(rest), outcome)
    else:
        assert (outcome is None) == (len(rest) < 16), (len(rest), outcome)
    _count(f"random response, opcode {'ADD' if opcode == V2OpCode.ADD_ENTRY else 'other'}", outcome)


def test_an_auth_message_whose_plugin_name_is_not_utf8_is_refused():
    """v2 and v3 alike refuse an AUTH packet whose plugin name is not UTF-8 (the message's
    ``plugin_name`` is a ``str``; the v3 decoders once returned the bytes): with
    ``ProtocolError``, but for a v3 request, whose txn id is known, an ``UnknownRequest``
    saying why (answered EBADREQ, the connection kept)."""
    auth = AuthMessage("\u00ff", b"payload")  # UTF-8 b"\xc3\xbf", made b"\xff\xff" below
    why = "AuthMessage plugin name is not UTF-8"
    for codec, message in (
        (v2, AuthRequest(auth, 0)),
        (v2, AuthResponse(StatusCode.EOK, auth, 0)),
        (v3, AuthRequest(auth, 7)),
        (v3, AuthResponse(StatusCode.EOK, auth, 7)),
    ):
        request = isinstance(message, AuthRequest)
        frame = (codec.encode_request if request else codec.encode_response)(message)
        decode = _own_decoder(message, codec)
        assert frame.count(b"\xc3\xbf") == 1
        assert _normal(decode(frame)) == _normal(message)
        bad = frame.replace(b"\xc3\xbf", b"\xff\xff")
        if codec is v3 and request:
            assert decode(bad) == UnknownRequest(OperationType.AUTH, 7, reason=why)
        else:
            with pytest.raises(ProtocolError, match=why):
                decode(bad)


def test_v2_add_request_body_is_a_view_not_a_copy():
    frame = memoryview(v2.encode_request(AddRequest(1, 2, b"k" * 20, bytes(16) + b"payload")))
    request = v2.decode_request(frame)
    assert isinstance(request.body, memoryview)
    assert request.body.obj is frame.obj


def test_v2_read_error_response_has_no_body():
    frame = v2.encode_response(ReadResponse(StatusCode.ENOENTRY, 3, 4, b"ignored"))
    assert len(frame) == 24
    assert v2.decode_response(frame).body is None


def test_an_error_batch_read_answer_keeps_no_entries() -> None:
    """Found by the mutation fuzzer above: a v2 BATCH_READ answer with an error status and
    bytes after its header decoded with bodies, which no encoder writes back (an error answer
    carries none). Now its entries are not read."""
    data = bytes.fromhex("0207000000000001") + bytes(32)
    message = v2.decode_response(data)
    assert message.status is StatusCode.ENOLEDGER and message.bodies == ()
    assert v2.decode_response(v2.encode_response(message)) == message
