"""The frame decoder: any split of a stream yields the same frames; bad lengths are refused."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bkeeper.common.errors import ProtocolError
from bkeeper.wire.framing import FrameDecoder, encode_frame

payloads = st.lists(st.binary(min_size=1, max_size=200), max_size=20)


@given(payloads, st.lists(st.integers(1, 97), min_size=1, max_size=50))
def test_any_split_decodes_to_the_same_frames(frames, cuts):
    stream = b"".join(encode_frame(f) for f in frames)
    decoder = FrameDecoder(1000)
    got: list[bytes] = []
    pos = index = 0
    while pos < len(stream):
        step = cuts[index % len(cuts)]
        decoder.receive_data(stream[pos : pos + step])
        got.extend(bytes(f) for f in decoder.frames())
        pos += step
        index += 1
    assert got == frames
    assert decoder.buffered_bytes == 0


def test_frames_stay_valid_after_more_data():
    decoder = FrameDecoder()
    decoder.receive_data(encode_frame(b"first") + encode_frame(b"sec"))
    (first, partial_check) = decoder.frames()
    decoder.receive_data(b"\x00\x00\x00\x03abc")
    assert bytes(first) == b"first"
    assert bytes(partial_check) == b"sec"
    assert [bytes(f) for f in decoder.frames()] == [b"abc"]


@pytest.mark.parametrize("length", [0, -1, -(1 << 31), 1001])
def test_bad_lengths_raise_before_buffering(length):
    decoder = FrameDecoder(1000)
    with pytest.raises(ProtocolError, match=str(length)):
        decoder.receive_data(struct.pack(">i", length))
    with pytest.raises(ProtocolError):  # poisoned
        decoder.receive_data(b"more")
    assert decoder.buffered_bytes == 0


def test_bad_length_after_good_frame():
    decoder = FrameDecoder(100)
    decoder.receive_data(encode_frame(b"ok") + struct.pack(">i", 500))
    with pytest.raises(ProtocolError, match="exceeds"):
        decoder.frames()


@given(st.binary(max_size=2000), st.integers(1, 64))
def test_fuzz_never_raises_other_errors_or_exceeds_the_limit(data, chunk):
    decoder = FrameDecoder(256)
    try:
        for pos in range(0, len(data), chunk):
            decoder.receive_data(data[pos : pos + chunk])
            assert decoder.buffered_bytes <= 256 + 4 + chunk
            for frame in decoder.frames():
                assert 0 < len(frame) <= 256
    except ProtocolError:
        pass
