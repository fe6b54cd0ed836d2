"""Spark ships readers, writers and partitions to other processes: they must pickle, and
carry only options and plans (no client, lock or socket)."""

from __future__ import annotations

import pickle

import pytest

pytest.importorskip("pyspark")

from bkeeper.spark.options import sink_options, source_options
from bkeeper.spark.plan import EntrySpan
from bkeeper.spark.sink import BatchWriter, LedgersMessage, StreamWriter
from bkeeper.spark.source import LogBatchReader, ReadPartition, StreamReader

URI = "zk://127.0.0.1:2181/ledgers"


def round_trip(value):
    return pickle.loads(pickle.dumps(value))


def test_readers_partitions_and_writers_pickle():
    options = source_options(
        {"metadata": URI, "log": "a", "client.read_timeout_ms": "900"}, streaming=True
    )
    reader = round_trip(StreamReader(options))
    assert reader.options == options and reader.options.client_config().read_timeout_ms == 900
    batch = round_trip(
        LogBatchReader(source_options({"metadata": URI, "log": "a"}, streaming=False))
    )
    assert batch.options.logs == ("a",)
    partition = round_trip(ReadPartition((EntrySpan("a", 3, 0, 9), EntrySpan("a", 4, 0, 0))))
    assert partition.spans[1] == EntrySpan("a", 4, 0, 0)
    sink = sink_options({"metadata": URI, "log": "b", "checkpointLocation": "/tmp/x"})
    assert round_trip(StreamWriter(sink, sink.writer_id or "")).writer_id == sink.writer_id
    assert round_trip(BatchWriter(sink, "job")).options == sink
    assert round_trip(LedgersMessage({"b": [5, 7]}, 3)).ledgers == {"b": [5, 7]}


def test_min_entries_per_trigger_waits_up_to_the_delay():
    options = source_options(
        {"metadata": URI, "log": "a", "minEntriesPerTrigger": "100", "maxTriggerDelay": "2s"},
        streaming=True,
    )
    reader = StreamReader(options)
    assert reader._should_wait(10), "too few entries and no delay passed yet"
    assert not reader._should_wait(100)
    reader._last_batch_s -= 2.5
    assert not reader._should_wait(10), "the delay is up: read what there is"
    reader._targets = {}
    reader._last_batch_s += 2.5
    assert not reader._should_wait(10), "AvailableNow never waits"


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        ([("payload", "int")], "column payload of type int: use binary or string"),
        ([("payload", "binary"), ("log", "binary")], "column log of type binary"),
        ([("payload", "binary"), ("color", "string")], "a bkeeper log takes payload"),
        ([("key", "binary")], "a bkeeper log takes payload"),
        ([("payload", "binary"), ("properties", "map<string,int>")], "column properties"),
    ],
)
def test_sink_refuses_bad_columns_on_the_driver(columns, message):
    from pyspark.sql import types

    from bkeeper.common.errors import ConfigError
    from bkeeper.spark.sink import sink_for

    known = {
        "int": types.IntegerType(),
        "binary": types.BinaryType(),
        "string": types.StringType(),
        "map<string,int>": types.MapType(types.StringType(), types.IntegerType()),
    }
    schema = types.StructType([types.StructField(name, known[ddl]) for name, ddl in columns])
    with pytest.raises(ConfigError, match=message):
        sink_for({"metadata": URI, "log": "a"}, streaming=False, schema=schema)
