"""Records to Arrow batches and back: the schema Spark expects, keys, properties, payloads."""

from __future__ import annotations

import pyarrow as pa
import pytest

from bkeeper.common.errors import ConfigError
from bkeeper.namedlog import encode_record
from bkeeper.spark.arrow import arrow_schema, record_batch, sink_rows


def make_entries(ledger_id: int, records: list[bytes]):
    from bkeeper.client.entry import Entry

    return [Entry(ledger_id, i, i - 1, 0, memoryview(data)) for i, data in enumerate(records)]


def test_plain_records():
    records = [encode_record(b"p%d" % i, 1_700_000_000_000 + i) for i in range(5)]
    batch = record_batch("dice", 7, make_entries(7, records), include_properties=False)
    assert batch.schema == arrow_schema(False)
    assert batch.column("payload").to_pylist() == [b"p%d" % i for i in range(5)]
    assert batch.column("entry").to_pylist() == list(range(5))
    assert set(batch.column("log").to_pylist()) == {"dice"}
    assert set(batch.column("ledger").to_pylist()) == {7}
    assert batch.column("key").null_count == 5
    ts = batch.column("timestamp").cast(pa.int64()).to_pylist()
    assert ts == [(1_700_000_000_000 + i) * 1000 for i in range(5)]


def test_keys_and_properties_mixed_with_plain_records():
    records = [
        encode_record(b"a", 1),
        encode_record(b"b", 2, key=b"k"),
        encode_record(b"", 3, properties={"x": b"1"}),
    ]
    batch = record_batch("l", 1, make_entries(1, records), include_properties=True)
    assert batch.schema == arrow_schema(True)
    assert batch.column("key").to_pylist() == [None, b"k", None]
    assert batch.column("payload").to_pylist() == [b"a", b"b", b""]
    assert batch.column("properties").to_pylist() == [[], [], [("x", b"1")]]


def test_sink_rows_from_strings_and_binary():
    batch = pa.RecordBatch.from_pydict(
        {"payload": ["x", "y"], "key": [b"k", None], "log": ["a", "b"]}
    )
    assert list(sink_rows(batch, None)) == [("a", b"x", b"k", None), ("b", b"y", None, None)]
    assert [r[0] for r in sink_rows(batch, "fixed")] == ["fixed", "fixed"]
    with pytest.raises(ConfigError, match="payload column has nulls"):
        list(sink_rows(pa.RecordBatch.from_pydict({"payload": [None, b"x"]}), "a"))
    with pytest.raises(ConfigError, match="log option or give a log column"):
        list(sink_rows(pa.RecordBatch.from_pydict({"payload": [b"x"]}), None))


def _stamps(batch):
    return batch.column("timestamp").cast(pa.int64()).to_pylist()


def test_record_batches_mixed_with_single_records():
    from bkeeper.namedlog.core import encode_batch

    def batch_of(first: int, n: int) -> bytes:
        return encode_batch([encode_record(b"r%d" % i, 1_000 + i) for i in range(first, first + n)])

    entries = [encode_record(b"r0", 1_000), batch_of(1, 3), encode_record(b"r4", 1_004),
               batch_of(5, 2)]  # fmt: skip
    batch = record_batch("l", 3, make_entries(3, entries), include_properties=False)
    assert batch.schema == arrow_schema(False)
    assert batch.column("payload").to_pylist() == [b"r%d" % i for i in range(7)]
    assert batch.column("entry").to_pylist() == [0, 1, 1, 1, 2, 3, 3]
    assert batch.column("batch_index").to_pylist() == [0, 0, 1, 2, 0, 0, 1]
    assert _stamps(batch) == [(1_000 + i) * 1000 for i in range(7)]
    assert batch.column("key").null_count == 7


def test_first_and_end_index_trim_the_first_and_last_entries():
    from bkeeper.namedlog.core import encode_batch

    def batch_of(first: int, n: int) -> bytes:
        return encode_batch([encode_record(b"r%d" % i, 1) for i in range(first, first + n)])

    entries = make_entries(0, [batch_of(0, 4), batch_of(4, 4), batch_of(8, 4)])
    trimmed = record_batch("l", 0, entries, False, first_index=2, end_index=1)
    assert trimmed.column("payload").to_pylist() == [b"r%d" % i for i in range(2, 9)]
    assert trimmed.column("batch_index").to_pylist() == [2, 3, 0, 1, 2, 3, 0]
    one = record_batch("l", 0, entries[:1], False, first_index=1, end_index=3)
    assert one.column("payload").to_pylist() == [b"r1", b"r2"]
    past = record_batch("l", 0, entries[:1], False, first_index=4)  # (L, E, n) is after E
    assert past.num_rows == 0
    singles = make_entries(0, [encode_record(b"a", 1), encode_record(b"b", 1)])
    assert record_batch("l", 0, singles, False, first_index=1).column("payload").to_pylist() == [
        b"b"
    ]


def test_batches_with_keys_properties_and_compression():
    from bkeeper.namedlog.core import CODEC_LZ4, CODEC_ZSTD, encode_batch

    records = [
        encode_record(b"a", 5, key=b"k1"),
        encode_record(b"b", 6),
        encode_record(b"c", 7, properties={"p": b"v"}),
    ]
    entries = make_entries(
        9,
        [
            encode_batch(records, CODEC_ZSTD),
            encode_record(b"d", 8),
            encode_batch(records, CODEC_LZ4),
        ],
    )
    batch = record_batch("l", 9, entries, include_properties=True, first_index=1, end_index=2)
    assert batch.schema == arrow_schema(True)
    assert batch.column("payload").to_pylist() == [b"b", b"c", b"d", b"a", b"b"]
    assert batch.column("key").to_pylist() == [None, None, None, b"k1", None]
    assert batch.column("entry").to_pylist() == [0, 0, 1, 2, 2]
    assert batch.column("batch_index").to_pylist() == [1, 2, 0, 0, 1]
    assert batch.column("properties").to_pylist() == [[], [("p", b"v")], [], [], []]
    assert _stamps(batch) == [6000, 7000, 8000, 5000, 6000]
    plain = make_entries(9, [encode_batch([encode_record(b"x", 1)] * 3, CODEC_ZSTD)])
    assert record_batch("l", 9, plain, False).column("payload").to_pylist() == [b"x"] * 3
