"""The record batch format (format 2): round trips, exact bytes, malformed batches, the
fast path, and format-1 entries read through the same functions."""

from __future__ import annotations

import pickle
import struct
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bkeeper.common.errors import ConfigError, ProtocolError
from bkeeper.namedlog.core import (
    BATCH_BODY_BYTES_MAX,
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_ZSTD,
    Position,
    available_codecs,
    codec_id,
    decode_entry,
    encode_batch,
    encode_record,
    entry_envelopes,
)

RECORDS = st.lists(
    st.tuples(
        st.binary(max_size=200),
        st.integers(-(2**63), 2**63 - 1),
        st.none() | st.binary(max_size=30),
        st.dictionaries(st.text(max_size=8), st.binary(max_size=16), max_size=3),
    ),
    min_size=1,
    max_size=40,
)


@given(records=RECORDS, codec=st.sampled_from([CODEC_NONE, CODEC_ZSTD, CODEC_LZ4]))
def test_batches_round_trip_with_each_record_its_own_position(records, codec):
    envelopes = [encode_record(p, t, k, props) for p, t, k, props in records]
    decoded = decode_entry(encode_batch(envelopes, codec), 7, 9)
    assert [r.position for r in decoded] == [Position(7, 9, i) for i in range(len(records))]
    assert [(r.payload, r.timestamp_ms, r.key, dict(r.properties)) for r in decoded] == [
        (p, t, k, props) for p, t, k, props in records
    ]


def test_batch_bytes_are_as_documented():
    first, second = encode_record(b"ab", 1), encode_record(b"c", 2, b"k")
    assert encode_batch([first, second]) == (
        b"\x02\x00\x00\x00\x00\x02"  # format 2, codec none, two records
        b"\x00\x00\x00\x0c\x00\x00\x00\x0e" + first + second  # their lengths: 12 and 14
    )
    packed = encode_batch([first, second], CODEC_ZSTD)
    assert packed[:10] == b"\x02\x01\x00\x00\x00\x02\x00\x00\x00\x22"  # body: 8 + 12 + 14


def test_format_1_entries_decode_as_one_record_at_index_0():
    data = encode_record(b"old", 5, b"k", {"p": b"v"})
    (record,) = decode_entry(data, 3, 4)
    assert (record.position, record.payload, record.key) == (Position(3, 4), b"old", b"k")
    assert entry_envelopes(data, 3, 4) == (1, struct.pack(">I", len(data)), data)


def test_fast_path_gives_the_length_table_and_the_envelopes_back_to_back():
    envelopes = [encode_record(b"x" * n, n) for n in (0, 5, 100)]
    for codec in (CODEC_NONE, CODEC_ZSTD, CODEC_LZ4):
        count, lengths, data = entry_envelopes(encode_batch(envelopes, codec), 1, 2)
        assert count == 3
        assert struct.unpack(">3I", lengths) == (10, 15, 110)
        assert bytes(data) == b"".join(envelopes)


def _batch(count: int, table: bytes, body: bytes, codec: int = CODEC_NONE) -> bytes:
    return struct.pack(">BBI", 2, codec, count) + table + body


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\x02\x00\x00", "head is cut short"),
        (_batch(0, b"", b""), "record count 0"),
        (_batch(2, b"\x00\x00\x00\x01", b""), "length table of 2 records is cut short"),
        (_batch(1, b"\x00\x00\x00\x0b", encode_record(b"", 0)), "add up to 11 bytes, not 10"),
        (_batch(1, b"\x00\x00\x00\x05", b"\x01\x00\x00\x00\x00"), "is malformed: unpack_from"),
        (_batch(1, b"", b"", codec=9), "unknown record batch codec 9"),
        (_batch(1, b"\x00\x00\x00\x10", b"junk", codec=CODEC_ZSTD), "zstd body does not"),
        (_batch(1, b"\x00\x00\x00\x10", b"junk", codec=CODEC_LZ4), "lz4 body does not"),
        (
            _batch(1, struct.pack(">I", BATCH_BODY_BYTES_MAX + 1), b"", codec=CODEC_ZSTD),
            "exceeds",
        ),
    ],
)
def test_malformed_batches_name_their_entry(data, reason):
    with pytest.raises(ProtocolError, match=f"at 3:4.*{reason}"):
        decode_entry(data, 3, 4)


def test_a_record_inside_a_batch_names_its_own_position():
    bad = b"\x01\x80" + bytes(8)
    data = encode_batch([encode_record(b"", 0), bad])
    with pytest.raises(ProtocolError, match="record at 3:4:1 is malformed"):
        decode_entry(data, 3, 4)


def test_a_reader_lacking_the_codec_says_which(monkeypatch):
    data = encode_batch([encode_record(b"a", 0)], CODEC_ZSTD)
    monkeypatch.setitem(sys.modules, "zstandard", None)  # as if it were not installed
    with pytest.raises(ProtocolError, match="codec zstd needs the zstandard package"):
        decode_entry(data, 3, 4)
    with pytest.raises(ConfigError, match=r"compression 'zstd'.*not installed"):
        codec_id("zstd")
    assert "zstd" not in available_codecs()


def test_codecs_and_limits():
    assert (codec_id("none"), codec_id("zstd"), codec_id("lz4")) == (0, 1, 2)
    assert available_codecs() == ["none", "zstd", "lz4"]
    with pytest.raises(ConfigError, match="compression 'gzip' is not one of none, zstd, lz4"):
        codec_id("gzip")
    with pytest.raises(ConfigError, match="1 to"):
        encode_batch([])


def test_positions_with_an_index():
    assert str(Position(12, 7)) == "12:7" and str(Position(12, 7, 3)) == "12:7:3"
    assert Position.parse("12:7:3") == Position(12, 7, 3)
    assert Position.parse("12:7") == Position(12, 7, 0)
    assert Position(1, 2, 5) < Position(1, 3) < Position(1, 3, 1) < Position(2, 0)
    assert Position(1, 2, 5).next() == Position(1, 2, 6)
    for bad in ("1:2:3:4", "1:2:x", "1:2:-1", "1"):
        with pytest.raises(ConfigError):
            Position.parse(bad)


def test_records_are_cheap_tuples_that_pickle_and_compare_as_before():
    plain, keyed = decode_entry(
        encode_batch([encode_record(b"p", 1), encode_record(b"q", 2, b"k", {"a": b"b"})]), 4, 5
    )
    assert plain.properties == {} and not plain.properties and plain.key is None
    assert keyed.properties == {"a": b"b"} and keyed.entry_records == 2
    for record in (plain, keyed):
        again = pickle.loads(pickle.dumps(record))
        assert again == record and again.position == record.position
