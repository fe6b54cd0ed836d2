"""``failOnDataLoss`` for real, in real Spark against real bookies: a stream restarted from
its checkpoint after the log was truncated past it, and a ledger deleted between planning
(``partitions()``) and reading (``read()``), each way."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from bkeeper.namedlog import Position
from tests.spark.test_spark import append, source, truncate


def copy_to_parquet(spark, uri: str, log: str, out: Path, checkpoint: Path, fail: str):
    """A stream of ``log`` into Parquet files (exactly once, through the checkpoint)."""
    return (
        spark.readStream.format("bkeeper")
        .option("metadata", uri)
        .option("log", log)
        .option("startingPosition", "earliest")
        .option("failOnDataLoss", fail)
        .load()
        .select("ledger", "entry", "payload")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )


def copied(spark, out: Path) -> list[tuple[Position, bytes]]:
    rows = spark.read.parquet(str(out)).collect()
    return sorted((Position(r.ledger, r.entry), bytes(r.payload)) for r in rows)


def test_restart_after_a_truncation_past_the_checkpoint(spark, spark_cluster, tmp_path):
    uri, log = spark_cluster.uri, "cut"
    first = [b"a%04d" % i for i in range(300)]
    at_first = append(uri, log, first, roll_bytes=1500)  # 15-byte records: 100 a ledger
    assert len({p.ledger_id for p in at_first}) == 3
    out, checkpoint = tmp_path / "out", tmp_path / "ck"
    query = copy_to_parquet(spark, uri, log, out, checkpoint, "true")
    query.awaitTermination(120)
    assert query.exception() is None
    assert copied(spark, out) == list(zip(at_first, first, strict=True))
    # The checkpoint now points after the last record read; more arrive, and the log is
    # truncated past the checkpoint: records b0000..b0199 are lost before any query read them.
    second = [b"b%04d" % i for i in range(500)]
    at_second = append(uri, log, second, roll_bytes=1500)
    cut = at_second[200]
    assert cut.entry_id == 0
    assert truncate(uri, log, cut) == 5
    end_of_first = Position(at_first[-1].ledger_id, at_first[-1].entry_id + 1)

    strict = copy_to_parquet(spark, uri, log, out, checkpoint, "true")
    with pytest.raises(Exception) as caught:
        strict.awaitTermination(120)
    expected = (
        f"bkeeper.common.errors.LogTruncatedError: log 'cut': records from {end_of_first} up "
        f"to {cut} are gone (truncated or deleted) before they were read; set "
        "failOnDataLoss=false to skip them and go on"
    )
    first_line = str(caught.value).splitlines()[0]
    assert first_line.endswith("latestOffset: " + expected), first_line
    assert len(copied(spark, out)) == 300, "the failed run wrote nothing"

    lenient = copy_to_parquet(spark, uri, log, out, checkpoint, "false")
    lenient.awaitTermination(120)
    assert lenient.exception() is None
    expected_rows = list(zip(at_first, first, strict=True))
    expected_rows += list(zip(at_second[200:], second[200:], strict=True))
    assert copied(spark, out) == expected_rows, "from the earliest record left: no gap, no dup"


def _planned_log(uri: str, log: str) -> list[Position]:
    positions = append(uri, log, [b"p%04d" % i for i in range(300)], roll_bytes=1500)
    assert len({p.ledger_id for p in positions}) == 3
    return positions


def _gone(log: str, ledger_id: int) -> str:
    return (
        f"log '{log}': ledger {ledger_id} (entries 0..99) is gone: the log was truncated past "
        "it after this read was planned; failOnDataLoss=false skips it"
    )


@pytest.mark.parametrize("fail", ["true", "false"])
def test_a_ledger_deleted_after_planning_driving_the_reader(spark_cluster, fail, caplog):
    """Spark's two calls made by hand: ``partitions()`` plans, the first ledger is deleted
    (by a truncation), then ``read()`` reads every planned partition."""
    from bkeeper.common.errors import LogTruncatedError
    from bkeeper.namedlog import LogConfig
    from bkeeper.spark.options import source_options
    from bkeeper.spark.runtime import runtime
    from bkeeper.spark.source import LogBatchReader

    uri, log = spark_cluster.uri, f"planned-by-hand-{fail}"
    positions = _planned_log(uri, log)
    options = source_options(
        {"metadata": uri, "log": log, "maxEntriesPerSplit": "100", "failOnDataLoss": fail},
        streaming=False,
    )
    reader = LogBatchReader(options)
    try:
        partitions = reader.partitions()
        assert len(partitions) == 3
        assert truncate(uri, log, positions[100]) == 1  # deletes the first planned ledger
        if fail == "true":
            with pytest.raises(LogTruncatedError) as caught:
                [batch for p in partitions for batch in reader.read(p)]
            assert str(caught.value) == _gone(log, positions[0].ledger_id)
        else:
            with caplog.at_level(logging.WARNING, logger="bkeeper.spark.runtime"):
                batches = [batch for p in partitions for batch in reader.read(p)]
            warned = [r.getMessage() for r in caplog.records if r.name == "bkeeper.spark.runtime"]
            assert warned == [
                _gone(log, positions[0].ledger_id).split("; ")[0]
                + "; skipping it (failOnDataLoss=false)"
            ]
            read = [
                Position(ledger, entry)
                for batch in batches
                for ledger, entry in zip(
                    batch.column("ledger").to_pylist(), batch.column("entry").to_pylist(),
                    strict=True,
                )
            ]  # fmt: skip
            assert read == positions[100:]
    finally:  # the client the reader made in this process
        runtime(options.metadata, options.client, LogConfig(password=options.password)).close()


@pytest.mark.parametrize("fail", ["true", "false"])
def test_a_ledger_deleted_after_planning_in_spark(spark, spark_cluster, fail):
    """The same in real Spark: ``df.rdd`` is planned once (its partitions fixed), so the
    ledger is deleted between the planning and the tasks that read it."""
    uri, log = spark_cluster.uri, f"planned-{fail}"
    positions = _planned_log(uri, log)
    frame = source(spark, uri, log=log, maxEntriesPerSplit=100, failOnDataLoss=fail)
    rdd = frame.select("ledger", "entry", "payload").rdd
    assert rdd.getNumPartitions() == 3  # planned now
    assert truncate(uri, log, positions[100]) == 1
    if fail == "true":
        with pytest.raises(Exception) as caught:
            rdd.collect()
        expected = "LogTruncatedError: " + _gone(log, positions[0].ledger_id)
        assert expected in str(caught.value), str(caught.value)[-3000:]
    else:
        rows = rdd.collect()
        assert sorted(Position(r.ledger, r.entry) for r in rows) == positions[100:]
        assert sorted(bytes(r.payload) for r in rows) == [b"p%04d" % i for i in range(100, 300)]
