"""Option validation of the Spark data source: every bad option named in a clear error."""

from __future__ import annotations

import pytest

from bkeeper.common.errors import ConfigError
from bkeeper.namedlog import LATEST, Position
from bkeeper.spark.options import (
    offset_from_positions,
    positions_from_offset,
    sink_options,
    source_options,
)

BASE = {"metadata": "zk://127.0.0.1:2181/ledgers"}


def test_defaults_and_case_insensitive_names():
    batch = source_options({**BASE, "LOG": "a, b", "maxentriespersplit": "5"}, streaming=False)
    assert batch.logs == ("a", "b") and batch.max_entries_per_split == 5
    assert batch.starting_default == "earliest" and batch.fail_on_data_loss
    stream = source_options({**BASE, "log": "a", "maxEntriesPerTrigger": "7"}, streaming=True)
    assert stream.starting_default == LATEST and stream.max_entries_per_trigger == 7


@pytest.mark.parametrize(
    ("options", "streaming", "message"),
    [
        ({"log": "a"}, False, "option metadata is required"),
        ({**BASE}, False, "exactly one of the options log"),
        ({**BASE, "log": "a", "logPattern": "a"}, False, "exactly one"),
        ({**BASE, "logPattern": "("}, False, "logPattern"),
        ({**BASE, "log": "a/b"}, False, "log name"),
        ({**BASE, "log": "a", "maxEntriesPerSplit": "0"}, False, "maxEntriesPerSplit"),
        ({**BASE, "log": "a", "maxEntriesPerSplit": "x"}, False, "not an integer"),
        ({**BASE, "log": "a", "startingPosition": "latest"}, False, "not allowed for batch"),
        ({**BASE, "log": "a", "startingPosition": "{"}, False, "not valid JSON"),
        (
            {**BASE, "log": "a", "startingPosition": '{"a": {"ledger": -1, "entry": 0}}'},
            False,
            "position of log",
        ),
        ({**BASE, "log": "a", "endingPosition": "latest"}, True, "batch reads only"),
        ({**BASE, "log": "a", "endingPosition": '{"a": "earliest"}'}, False, "cannot end"),
        ({**BASE, "log": "a", "maxEntriesPerTrigger": "3"}, False, "streaming reads only"),
        ({**BASE, "log": "a", "failOnDataLoss": "maybe"}, False, "failOnDataLoss"),
        ({**BASE, "log": "a", "startingTimestamp": "yesterday"}, False, "startingTimestamp"),
        ({**BASE, "log": "a", "client.nonsense": "1"}, False, "unknown client setting"),
        ({**BASE, "log": "a", "client.read_timeout_ms": "-5"}, False, "read_timeout_ms"),
        ({"metadata": "http://x", "log": "a"}, False, "zk://"),
    ],
)
def test_bad_source_options(options, streaming, message):
    with pytest.raises(ConfigError, match=message):
        source_options(options, streaming=streaming)


def test_positions_round_trip():
    positions = {"b": Position(3, 4), "a": Position(1, 0)}
    offset = offset_from_positions(positions)
    assert list(offset) == ["a", "b"]
    assert positions_from_offset(offset) == positions
    assert positions_from_offset('{"a": "earliest"}') == {"a": "earliest"}


def test_sink_options():
    sink = sink_options({**BASE, "log": "out", "checkpointLocation": "/tmp/ck", "ackQuorum": "1"})
    assert sink.writer_id and sink.writer_id.startswith("checkpoint:")
    assert sink_options({**BASE, "checkpointLocation": "/tmp/ck"}).writer_id == sink.writer_id
    assert sink_options({**BASE, "writerId": "me"}).writer_id == "me"
    assert sink.log_config.ack_quorum == 1
    with pytest.raises(ConfigError, match="ensemble_size >= write_quorum"):
        sink_options({**BASE, "ensembleSize": "2", "writeQuorum": "3"})
    with pytest.raises(ConfigError, match="digest"):
        sink_options({**BASE, "digest": "md5"})


def test_trigger_size_options():
    stream = source_options(
        {**BASE, "log": "a", "minEntriesPerTrigger": "10", "maxTriggerDelay": "30s"},
        streaming=True,
    )
    assert stream.min_entries_per_trigger == 10 and stream.max_trigger_delay_ms == 30_000
    assert source_options({**BASE, "log": "a"}, streaming=True).max_trigger_delay_ms == 900_000
    for text, ms in (("250ms", 250), ("2m", 120_000), ("1h", 3_600_000), ("40", 40)):
        options = {**BASE, "log": "a", "maxTriggerDelay": text}
        assert source_options(options, streaming=True).max_trigger_delay_ms == ms
    with pytest.raises(ConfigError, match="not a duration"):
        source_options({**BASE, "log": "a", "maxTriggerDelay": "soon"}, streaming=True)
    with pytest.raises(ConfigError, match="streaming reads only"):
        source_options({**BASE, "log": "a", "minEntriesPerTrigger": "5"}, streaming=False)
    with pytest.raises(ConfigError, match="exceeds maxEntriesPerTrigger"):
        source_options(
            {**BASE, "log": "a", "minEntriesPerTrigger": "50", "maxEntriesPerTrigger": "10"},
            streaming=True,
        )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"maxentriespersplitt": "5"}, "unknown option maxEntriesPerSplitt: did you mean maxEntriesPerSplit?"),
        ({"maxOffsetsPerTrigger": "5"}, "unknown option maxOffsetsPerTrigger (Kafka's name): bkeeper's is maxRecordsPerTrigger"),
        ({"subscribe": "a"}, "unknown option subscribe (Kafka's name): bkeeper's is log"),
        ({"rollbytes": "5"}, "option rollBytes is for writes, not reads"),
        ({"colour": "blue"}, "unknown option colour; the options are listed in docs/spark.md"),
    ],
)  # fmt: skip
def test_unknown_read_option_names(options, message):
    for streaming in (True, False, None):
        with pytest.raises(ConfigError) as caught:
            source_options({**BASE, "log": "a", **options}, streaming=streaming)
        assert str(caught.value) == message


def test_unknown_write_option_names_and_spark_own_options():
    with pytest.raises(ConfigError) as caught:
        sink_options({**BASE, "log": "a", "startingPosition": "earliest"})
    assert str(caught.value) == "option startingPosition is for reads, not writes"
    with pytest.raises(ConfigError) as caught:
        sink_options({**BASE, "log": "a", "ensembelsize": "3"})
    assert str(caught.value) == "unknown option ensembelSize: did you mean ensembleSize?"
    spark_own = {"path": "p", "checkpointlocation": "/ck", "queryname": "q"}
    assert sink_options({**BASE, "log": "a", **spark_own}).log == "a"
    assert source_options({**BASE, "log": "a", **spark_own}, streaming=True).logs == ("a",)


def test_timestamps_one_or_per_log_and_mode_checks():
    one = source_options({**BASE, "log": "a,b", "startingTimestamp": "5"}, streaming=False)
    assert (one.starting_timestamp_ms, one.starting_timestamps) == (5, {})
    per_log = source_options(
        {**BASE, "log": "a,b", "startingTimestamp": '{"a": 7}', "endingTimestamp": '{"b": 9}'},
        streaming=False,
    )
    assert per_log.starting_timestamps == {"a": 7} and per_log.ending_timestamps == {"b": 9}
    with pytest.raises(ConfigError, match=r"names logs this read does not cover: \['c'\]"):
        source_options({**BASE, "log": "a", "startingTimestamp": '{"c": 7}'}, streaming=None)
    with pytest.raises(ConfigError, match="log 'a' maps to -1, not milliseconds"):
        source_options({**BASE, "log": "a", "startingTimestamp": '{"a": -1}'}, streaming=None)
    with pytest.raises(ConfigError, match="option endingTimestamp is for batch reads only"):
        source_options({**BASE, "log": "a", "endingTimestamp": "5"}, streaming=True)
    # Unknown mode (load()): what only one kind of read refuses passes, the rest does not.
    source_options({**BASE, "log": "a", "endingTimestamp": "5"}, streaming=None)
    source_options({**BASE, "log": "a", "maxEntriesPerTrigger": "5"}, streaming=None)
    with pytest.raises(ConfigError) as caught:
        source_options({**BASE, "log": "a", "startingPosition": "beginning"}, streaming=None)
    assert str(caught.value) == (
        "option startingPosition: 'beginning' is not earliest, latest or a JSON object of log "
        'name to position such as {"a": {"ledger": 12, "entry": 0}}'
    )
    assert sink_options({**BASE, "log": "a"}).create_log is None
    assert sink_options({**BASE, "log": "a", "createLog": "true"}).create_log is True


def test_positions_inside_a_record_batch():
    positions = {"a": Position(1, 2, 3), "b": Position(4, 5)}
    offset = offset_from_positions(positions)
    # index only when not 0: offsets of single-record entries read as before
    assert offset == {"a": {"ledger": 1, "entry": 2, "index": 3}, "b": {"ledger": 4, "entry": 5}}
    assert positions_from_offset(offset) == positions
    start = source_options(
        {**BASE, "log": "a", "startingPosition": '{"a": {"ledger": 1, "entry": 2, "index": 7}}'},
        streaming=False,
    )
    assert start.starting == {"a": Position(1, 2, 7)}
    with pytest.raises(ConfigError, match=r'with "index": I, a record of a batch'):
        positions_from_offset('{"a": {"ledger": 1, "entry": 2, "index": -1}}', "startingPosition")
    with pytest.raises(ConfigError, match="position of log 'a'"):
        positions_from_offset('{"a": {"ledger": 1, "index": 2}}', "startingPosition")


def test_sink_batching_options():
    """The writer's batching options (LogConfig's), on by default for the sink."""
    config = sink_options({**BASE, "log": "a"}).log_config
    assert (config.batching, config.batch_max_records, config.batch_max_bytes) == (
        True,
        1_000,
        128 * 1024,
    )
    assert config.compression == "none"
    assert config.explicit_lac_interval_ms == 0  # its ledgers join the log sealed
    sized = {"batchMaxRecords": "50", "batchMaxBytes": "4096", "compression": "ZSTD"}
    chosen = sink_options({**BASE, "log": "a", **sized}).log_config
    assert (chosen.batch_max_records, chosen.batch_max_bytes, chosen.compression) == (
        50,
        4096,
        "zstd",
    )
    assert sink_options({**BASE, "log": "a", "batching": "false"}).log_config.batching is False
    with pytest.raises(ConfigError, match="option compression 'gzip' is not one of none, zstd"):
        sink_options({**BASE, "log": "a", "compression": "gzip"})
    with pytest.raises(
        ConfigError, match=r"option batchMaxBytes: must be an integer in 1\.\.4194304, got 5242880$"
    ):
        sink_options({**BASE, "log": "a", "batchMaxBytes": str(5 * 1024 * 1024)})
    with pytest.raises(
        ConfigError,
        match=r"option batchMaxRecords: must be an integer in 1\.\.1048576, got 2000000$",
    ):
        sink_options({**BASE, "log": "a", "batchMaxRecords": "2000000"})
    with pytest.raises(ConfigError, match="need batching=true"):
        sink_options({**BASE, "log": "a", "batching": "false", "compression": "lz4"})
    with pytest.raises(ConfigError, match="did you mean batchMaxRecords"):
        sink_options({**BASE, "log": "a", "batchMaxRecord": "5"})
