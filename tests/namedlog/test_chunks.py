"""Chunks of large records (format 3): exact bytes, round trips, limits, and the reassembly
every reader uses (pure: no cluster)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bkeeper.common.errors import ConfigError, ProtocolError
from bkeeper.namedlog.core import (
    CHUNKS_MAX,
    RECORD_BYTES_MAX,
    Incomplete,
    Position,
    Reassembly,
    Whole,
    decode_chunk,
    decode_entry,
    encode_batch,
    encode_chunks,
    encode_record,
    whole_records,
)


def test_chunk_bytes_are_as_documented():
    envelope = encode_record(b"abcdefgh", 7)  # 18 bytes
    chunks = encode_chunks(envelope, 8)
    assert chunks == [
        b"\x03\x00" + struct.pack(">III", 0, 3, 18) + envelope[:8],
        b"\x03\x00" + struct.pack(">III", 1, 3, 18) + envelope[8:16],
        b"\x03\x00" + struct.pack(">III", 2, 3, 18) + envelope[16:],
    ]
    chunk = decode_chunk(chunks[1], 4, 5)
    assert chunk is not None
    assert (chunk.chunk_index, chunk.chunk_count, chunk.record_bytes) == (1, 3, 18)
    assert bytes(chunk.piece) == envelope[8:16]


def test_format_1_and_2_entries_are_not_chunks_and_a_chunk_is_no_record():
    envelope = encode_record(b"old", 1)
    assert decode_chunk(envelope, 1, 2) is None
    assert decode_chunk(encode_batch([envelope, envelope]), 1, 2) is None
    with pytest.raises(ProtocolError, match=r"entry 1:2 is a chunk of a large record"):
        decode_entry(encode_chunks(encode_record(b"x" * 40, 1), 16)[0], 1, 2)


def test_too_large_a_record_is_refused_naming_its_size_and_the_limit():
    with pytest.raises(ConfigError, match=rf"{RECORD_BYTES_MAX + 1} bytes.*RECORD_BYTES_MAX"):
        encode_chunks(memoryview(bytearray(RECORD_BYTES_MAX + 1)), 4 * 1024 * 1024)
    with pytest.raises(ConfigError, match=r"makes 1 chunks"):
        encode_chunks(b"x" * 10, 10)
    with pytest.raises(ConfigError, match=rf"not 2 to {CHUNKS_MAX}"):
        encode_chunks(b"x" * (CHUNKS_MAX + 1), 1)


@pytest.mark.parametrize(
    ("head", "problem"),
    [
        (struct.pack(">BBIII", 3, 1, 0, 2, 10), "unknown flags"),
        (struct.pack(">BBIII", 3, 0, 0, 1, 10), "chunk count 1 is not 2"),
        (struct.pack(">BBIII", 3, 0, 0, CHUNKS_MAX + 1, 10), "chunk count"),
        (struct.pack(">BBIII", 3, 0, 2, 2, 10), "chunk index 2 is not below"),
        (struct.pack(">BBIII", 3, 0, 0, 2, RECORD_BYTES_MAX + 1), "exceeds RECORD_BYTES_MAX"),
        (b"\x03\x00\x00", "cut short"),
    ],
)
def test_malformed_chunk_heads_name_the_entry(head, problem):
    with pytest.raises(ProtocolError, match=rf"chunk at 8:9: .*{problem}"):
        decode_chunk(head + b"piece", 8, 9)


RECORD = st.tuples(
    st.binary(min_size=0, max_size=300),
    st.integers(-(2**63), 2**63 - 1),
    st.none() | st.binary(max_size=20),
    st.dictionaries(st.text(max_size=6), st.binary(max_size=12), max_size=3),
)


def _entries(records, chunk_bytes):
    """Entry payloads of ``records`` as a writer makes them: chunked when larger."""
    entries = []
    for payload, timestamp, key, properties in records:
        envelope = encode_record(payload, timestamp, key, properties)
        if len(envelope) > chunk_bytes:
            entries += encode_chunks(envelope, chunk_bytes)
        else:
            entries.append(envelope)
    return entries


def _read(entries, first=0, ledger_id=5):
    skipped: list[Incomplete] = []
    chunks = Reassembly(ledger_id, skipped.append)
    records = []
    for entry_id in range(first, len(entries)):
        whole = chunks.feed(entry_id, entries[entry_id])
        if whole is not None:
            records += whole_records(whole, ledger_id)
    chunks.end("the ledger ends")
    return records, skipped


@given(records=st.lists(RECORD, min_size=1, max_size=12), chunk_bytes=st.integers(8, 64))
def test_records_round_trip_through_chunks_one_position_each(records, chunk_bytes):
    entries = _entries(records, chunk_bytes)
    found, skipped = _read(entries)
    assert skipped == []
    assert [(r.payload, r.timestamp_ms, r.key, dict(r.properties)) for r in found] == [
        (p, t, k, props) for p, t, k, props in records
    ]
    # Each record is at its last entry's position; it spans `chunks` entries before it.
    ends = [r.position.entry_id for r in found]
    firsts = [r.position.entry_id - r.chunks + 1 for r in found]
    assert firsts == [0] + [end + 1 for end in ends[:-1]]
    assert ends[-1] == len(entries) - 1
    assert all(r.position == Position(5, r.position.entry_id, 0) for r in found)


@given(
    records=st.lists(RECORD, min_size=1, max_size=8),
    chunk_bytes=st.integers(8, 64),
    data=st.data(),
)
def test_a_read_from_any_entry_skips_only_the_record_it_starts_inside(records, chunk_bytes, data):
    entries = _entries(records, chunk_bytes)
    start = data.draw(st.integers(0, len(entries) - 1))
    everything, _ = _read(entries)
    found, skipped = _read(entries, start)
    wanted = [r for r in everything if r.position.entry_id - r.chunks + 1 >= start]
    assert found == wanted  # never a record in part
    inside = [r for r in everything if r.position.entry_id - r.chunks + 1 < start]
    inside = [r for r in inside if r.position.entry_id >= start]
    assert len(skipped) == len(inside)
    for record, skip in zip(inside, skipped, strict=True):
        assert (skip.first, skip.last, skip.count) == (
            start,
            record.position.entry_id,
            record.chunks,
        )
        assert "first chunks were not read" in skip.reason


@given(records=st.lists(RECORD, min_size=1, max_size=6), data=st.data())
def test_a_writer_that_stopped_between_chunks_leaves_a_record_every_reader_skips(records, data):
    chunk_bytes = 16
    big = encode_chunks(encode_record(b"B" * 100, 1), chunk_bytes)
    kept = data.draw(st.integers(1, len(big) - 1))
    before = _entries(records, chunk_bytes)
    entries = before + big[:kept]
    found, skipped = _read(entries)
    assert found == _read(before)[0]
    assert [(s.first, s.last, s.seen, s.count) for s in skipped] == [
        (len(before), len(entries) - 1, kept, len(big))
    ]
    assert "ledger ends" in skipped[0].reason
    # A new record after the cut chunks (as after a restart, in the same ledger) ends it.
    after = _entries(records, chunk_bytes)
    found, skipped = _read(entries + after)
    assert len(found) == 2 * len(records) and len(skipped) == 1
    assert "is not its next chunk" in skipped[0].reason


def test_chunks_out_of_place_or_of_the_wrong_size_are_never_returned():
    envelope = encode_record(b"x" * 50, 1)
    one, other = encode_chunks(envelope, 16), encode_chunks(encode_record(b"y" * 70, 2), 16)
    found, skipped = _read([one[0], other[1], *one[1:]])
    # The first record's chunk 0, `other`'s lone chunk, then the rest of the first record.
    assert found == [] and [(s.first, s.last) for s in skipped] == [(0, 0), (1, 1), (2, 4)]
    forged = [*one[:-1], one[-1] + b"extra"]
    found, skipped = _read(forged)
    assert found == [] and "exceed" in skipped[0].reason
    short = [*one[:-1], one[-1][:-1]]
    found, skipped = _read(short)
    assert found == [] and "add up to" in skipped[0].reason


def test_first_chunk_tells_where_a_record_begins():
    chunks = encode_chunks(encode_record(b"z" * 60, 1), 16)
    reassembly = Reassembly(3, lambda skipped: None)
    assert reassembly.first_chunk(10, chunks[0]) is None
    assert reassembly.first_chunk(12, chunks[2]) == 10
    assert reassembly.first_chunk(12, encode_record(b"plain", 1)) is None
    assert reassembly.fresh and reassembly.idle
    assert reassembly.feed(10, chunks[0]) is None
    assert not reassembly.fresh and not reassembly.idle
    plain = encode_record(b"p", 1)
    assert reassembly.feed(11, plain) == Whole(11, plain)
