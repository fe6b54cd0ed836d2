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
