"""The client's fast lanes for many entries: ADD frames of a batch built in one pass, runs of ADD
answers recognised as a whole (``bkeeper.wire.runs``), and BATCH_READ answers verified in one
pass over their frame (``bkeeper.wire.batch_frames``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bkeeper.common.errors import DigestMismatchError, ProtocolError
from bkeeper.wire import v2, v2_stream
from bkeeper.wire.batch_frames import BODIES_AT
from bkeeper.wire.codes import StatusCode
from bkeeper.wire.digest import DigestManager, DigestType, master_key
from bkeeper.wire.messages import AddRequest, AddResponse, BatchReadResponse, ReadResponse
from bkeeper.wire.runs import RUN_ANSWERS_MIN, add_run

KEY = master_key(b"pw")
EOK = StatusCode.EOK


def answers(ledger_id: int, first: int, count: int) -> bytes:
    return b"".join(
        v2.encode_response_frame(AddResponse(EOK, ledger_id, e))
        for e in range(first, first + count)
    )


@given(
    st.lists(st.binary(max_size=300), min_size=1, max_size=20),
    st.integers(0, 2**40),
    st.integers(0, 2**30),
    st.sampled_from(list(DigestType)),
)
def test_frames_of_a_batch_equal_the_generic_encoding(payloads, first, length, digest_type):
    digest = DigestManager(7, digest_type, b"pw")

    def prefix_of(body_bytes: int) -> bytes:
        return v2.add_frame_prefix(KEY, body_bytes)

    frames, lengths = digest.frame_entries(first, first - 1, length, payloads, prefix_of)
    for i, (frame, payload) in enumerate(zip(frames, payloads, strict=True)):
        length += len(payload)
        assert lengths[i] == length
        body = digest.encode_entry(first + i, first - 1, length, payload)
        assert frame == v2.encode_request_frame(AddRequest(7, first + i, KEY, body))
        single = digest.frame_entry(first + i, first - 1, length, payload, prefix_of(len(body)))
        assert single == frame


@given(st.integers(0, 2**62), st.integers(0, 2**62), st.integers(1, 300))
def test_a_run_is_recognised(ledger_id, first, count):
    wraps = first >> 32 != (first + count - 1) >> 32  # left to the answer-by-answer lane
    expected = None if wraps else (ledger_id, first, count)
    assert add_run(answers(ledger_id, first, count)) == expected


@pytest.mark.parametrize(
    "spoil",
    [
        lambda: answers(5, 10, 4) + answers(6, 14, 4),  # two ledgers
        lambda: answers(5, 10, 4) + answers(5, 15, 4),  # a gap
        lambda: answers(5, 10, 4) + answers(5, 13, 4),  # a repeat
        lambda: (
            answers(5, 10, 4) + v2.encode_response_frame(AddResponse(StatusCode.EFENCED, 5, 14))
        ),  # an error
        lambda: answers(5, 10, 4) + v2.encode_response_frame(ReadResponse(EOK, 5, 14, b"x" * 4)),
        lambda: answers(5, 2**32 - 2, 4),  # the low word of the entry id wraps: not checked
        lambda: answers(5, 10, 4)[:-1],  # not whole answers
        lambda: b"",
    ],
)
def test_what_is_not_a_run(spoil):
    assert add_run(spoil()) is None


@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("run"), st.integers(0, 3), st.integers(0, 50), st.integers(1, 40)),
            st.tuples(st.just("error"), st.integers(0, 3), st.integers(0, 50), st.integers(1, 2)),
        ),
        max_size=8,
    ),
    st.lists(st.integers(1, 700), max_size=20),
)
def test_feed_runs_gives_what_feed_gives(parts, cuts):
    """Whatever the chunks, runs and answers from ``feed_runs`` are the ADD answers ``feed``
    gives, in order."""
    data = b""
    want = []
    for kind, ledger_id, first, count in parts:
        for e in range(first, first + count):
            status = EOK if kind == "run" else StatusCode.EIO
            data += v2.encode_response_frame(AddResponse(status, ledger_id, e))
            want.append((status, ledger_id, e))
    stream = v2_stream.ResponseStream(1 << 20)
    got = []
    runs = 0
    position = 0
    for cut in [*cuts, len(data)]:
        run, adds, others = stream.feed_runs(data[position : position + cut])
        position += cut
        assert others == []
        if run is not None:
            runs += 1
            assert adds == [] and run[2] >= RUN_ANSWERS_MIN
            ledger_id, first, count = run
            got += [(EOK, ledger_id, e) for e in range(first, first + count)]
        got += adds
    assert got == want


def test_a_chunk_of_one_ledgers_answers_is_one_run():
    stream = v2_stream.ResponseStream(1 << 20)
    data = answers(9, 100, 50)
    assert stream.feed_runs(data[:-5]) == ((9, 100, 49), [], [])
    assert stream.feed_runs(data[-5:]) == (None, [(EOK, 9, 149)], [])


def batch_frame(bodies: list[bytes]) -> memoryview:
    response = BatchReadResponse(EOK, 7, 3, 1, tuple(bodies))
    return memoryview(v2.encode_response_frame(response)[4:])


@given(
    st.lists(st.binary(max_size=300), min_size=1, max_size=20),
    st.integers(1, 25),
    st.sampled_from(list(DigestType)),
)
def test_a_batch_frame_verifies_as_its_bodies_do(payloads, count, digest_type):
    digest = DigestManager(7, digest_type, b"pw")
    bodies = [digest.encode_entry(3 + i, 2 + i, 10 * i, p) for i, p in enumerate(payloads)]
    frame = batch_frame(bodies)
    got = digest.verify_batch_frame(frame, BODIES_AT, 3, count)
    assert got == digest.verify_entries(bodies[:count], 3)
    assert [bytes(e.payload) for e in got] == payloads[:count]


@pytest.mark.parametrize("digest_type", list(DigestType))
def test_a_bad_body_in_a_batch_frame_is_named(digest_type):
    digest = DigestManager(7, digest_type, b"pw")
    bodies = [digest.encode_entry(3 + i, 2, 10, b"payload %d" % i) for i in range(4)]
    wrong_entry = [*bodies[:2], digest.encode_entry(9, 2, 10, b"payload 2"), *bodies[3:]]
    with pytest.raises(DigestMismatchError, match="entry 9"):
        digest.verify_batch_frame(batch_frame(wrong_entry), BODIES_AT, 3, 4)
    if digest_type is not DigestType.DUMMY:
        flipped = bytearray(bodies[2])
        flipped[-1] ^= 1
        with pytest.raises(DigestMismatchError):
            digest.verify_batch_frame(batch_frame([*bodies[:2], bytes(flipped)]), BODIES_AT, 3, 4)
    whole = batch_frame(bodies)
    assert len(digest.verify_batch_frame(whole, BODIES_AT, 3, 2)) == 2  # the first count
    with pytest.raises(ProtocolError, match="overruns"):
        digest.verify_batch_frame(whole[:-1], BODIES_AT, 3, 4)
    with pytest.raises(ProtocolError, match="cut"):
        digest.verify_batch_frame(whole[: BODIES_AT + 2], BODIES_AT, 3, 4)
