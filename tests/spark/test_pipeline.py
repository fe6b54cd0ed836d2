"""What a data engineer's pipeline on ``format("bkeeper")`` ran into (issue 23), in real Spark
(local[2]) against real bookies: a wrong metadata root is "no cluster" at ``load()`` (not false
data loss), unknown options are refused with the closest known name on read and write, batch
and stream, option errors come first and at ``load()`` (a stream reader's constructor never
raises), per-log ``startingTimestamp`` and ``endingTimestamp``, ``createLog`` on a restarted
stream, and lag (``reportLatestOffset``, ``LagListener``, ``bkeeper log lag``)."""

from __future__ import annotations

import json
import logging
import time

import pytest
from click.testing import CliRunner

from bkeeper.cli.log import log
from tests.spark.test_spark import append, read_log, source


def first_line(error: BaseException) -> str:
    return str(error).splitlines()[0]


def failure(action) -> BaseException:
    with pytest.raises(Exception) as caught:
        action()
    return caught.value


def wrong_root(uri: str) -> str:
    return uri.rsplit("/", 1)[0] + "/wrongroot"


# -- 1. a wrong metadata root ---------------------------------------------------------------


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_a_wrong_root_is_no_cluster_at_load(spark, spark_cluster, fail_on_data_loss):
    uri = spark_cluster.uri
    append(uri, "events", [b"e%d" % i for i in range(5)])
    bad = wrong_root(uri)
    expected = f"no cluster at {bad}"
    read = (
        spark.read.format("bkeeper")
        .option("metadata", bad)
        .option("log", "events")
        .option("failOnDataLoss", fail_on_data_loss)
    )
    error = failure(read.load)
    assert expected in first_line(error), first_line(error)
    assert "gone" not in str(error)
    stream = spark.readStream.format("bkeeper").option("metadata", bad).option("log", "events")
    error = failure(stream.load)
    assert expected in first_line(error), first_line(error)
    frame = spark.createDataFrame([(b"x",)], "payload binary")
    write = frame.write.format("bkeeper").option("metadata", bad).option("log", "events")
    error = failure(write.mode("append").save)
    assert expected in first_line(error), first_line(error)


# -- 2. unknown options -------------------------------------------------------------------


def test_unknown_read_options_name_the_closest_known_one(spark, spark_cluster):
    uri = spark_cluster.uri
    append(uri, "known", [b"k%d" % i for i in range(3)])
    read = source_reader(spark, uri, "known", maxEntriesPerSplitt="10")
    error = failure(read.load)
    assert first_line(error).endswith(
        "ConfigError: unknown option maxEntriesPerSplitt: did you mean maxEntriesPerSplit?"
    ), first_line(error)
    stream = stream_reader(spark, uri, "known", maxOffsetsPerTrigger="300000")
    error = failure(stream.load)
    assert first_line(error).endswith(
        "ConfigError: unknown option maxOffsetsPerTrigger (Kafka's name): bkeeper's is "
        "maxRecordsPerTrigger"
    ), first_line(error)
    error = failure(source_reader(spark, uri, "known", startingOffsets="earliest").load)
    assert first_line(error).endswith(
        "ConfigError: unknown option startingOffsets (Kafka's name): bkeeper's is startingPosition"
    ), first_line(error)
    error = failure(source_reader(spark, uri, "known", colour="blue").load)
    assert first_line(error).endswith(
        "ConfigError: unknown option colour; the options are listed in docs/spark.md"
    ), first_line(error)


def test_unknown_write_options_are_refused_batch_and_stream(spark, spark_cluster, tmp_path):
    uri = spark_cluster.uri
    frame = spark.createDataFrame([(b"w",)], "payload binary")
    write = (
        frame.write.format("bkeeper")
        .option("metadata", uri)
        .option("log", "typo-dst")
        .option("rollByte", "1000")
        .mode("append")
    )
    error = failure(write.save)
    assert first_line(error).endswith(
        "ConfigError: unknown option rollByte: did you mean rollBytes?"
    ), first_line(error)
    append(uri, "typo-src", [b"s"])
    writer = (
        stream_reader(spark, uri, "typo-src")
        .load()
        .select("payload")
        .writeStream.format("bkeeper")
        .option("metadata", uri)
        .option("log", "typo-dst")
        .option("ensembelSize", "3")
        .option("checkpointLocation", str(tmp_path / "typo"))
    )
    query = writer.trigger(availableNow=True).start()  # Spark makes a stream's sink later
    error = failure(lambda: query.awaitTermination(120))
    assert "ConfigError: unknown option ensembelSize: did you mean ensembleSize?" in str(error)
    assert "Traceback" not in str(error)


# -- 3. errors come first, at load(), and a stream reader's constructor never raises ---------


def test_starting_position_lists_the_accepted_values(spark, spark_cluster):
    uri = spark_cluster.uri
    append(uri, "begin", [b"b"])
    error = failure(stream_reader(spark, uri, "begin", startingPosition="beginning").load)
    assert first_line(error).endswith(
        "ConfigError: option startingPosition: 'beginning' is not earliest, latest or a JSON "
        'object of log name to position such as {"begin": {"ledger": 12, "entry": 0}}'
    ), first_line(error)


def test_a_batch_only_option_fails_a_stream_without_pyspark_noise(spark, spark_cluster, tmp_path):
    uri = spark_cluster.uri
    append(uri, "stream-only", [b"s"])
    frame = stream_reader(spark, uri, "stream-only", endingPosition="latest").load()
    query = (
        frame.writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "noisy"))
        .trigger(availableNow=True)
        .start()
    )
    error = failure(lambda: query.awaitTermination(120))
    assert "ConfigError: option endingPosition is for batch reads only" in str(error)
    assert "UnboundLocalError" not in str(error)
    assert "Traceback" not in str(error)


# -- 6. Kafka parity ----------------------------------------------------------------------


def test_starting_timestamp_per_log_and_ending_timestamp(spark, spark_cluster):
    uri = spark_cluster.uri
    before = append(uri, "ts-a", [b"a-old-%d" % i for i in range(3)])
    append(uri, "ts-b", [b"b-old-%d" % i for i in range(2)])
    assert before
    time.sleep(0.05)  # timestamps are ms: the next records are strictly later
    middle_ms = int(time.time() * 1000)
    time.sleep(0.05)
    append(uri, "ts-a", [b"a-new-%d" % i for i in range(4)])
    append(uri, "ts-b", [b"b-new-%d" % i for i in range(2)])
    time.sleep(0.05)
    end_ms = int(time.time() * 1000)
    time.sleep(0.05)
    append(uri, "ts-a", [b"a-late"])
    per_log = json.dumps({"ts-a": middle_ms, "ts-b": 0})
    frame = source(spark, uri, log="ts-a,ts-b", startingTimestamp=per_log)
    rows = sorted(bytes(r.payload) for r in frame.collect())
    assert rows == sorted(
        [b"a-new-%d" % i for i in range(4)]
        + [b"a-late"]
        + [b"b-old-%d" % i for i in range(2)]
        + [b"b-new-%d" % i for i in range(2)]
    )
    frame = source(
        spark, uri, log="ts-a", startingTimestamp=str(middle_ms), endingTimestamp=str(end_ms)
    )
    assert sorted(bytes(r.payload) for r in frame.collect()) == [b"a-new-%d" % i for i in range(4)]
    error = failure(
        source_reader(spark, uri, "ts-a", startingTimestamp=json.dumps({"ts-c": 1})).load
    )
    assert first_line(error).endswith(
        "ConfigError: option startingTimestamp names logs this read does not cover: ['ts-c']"
    ), first_line(error)


def copy_query(spark, uri, src, dst, checkpoint, **sink):
    writer = (
        stream_reader(spark, uri, src, startingPosition="earliest")
        .load()
        .select("payload")
        .writeStream.format("bkeeper")
        .option("metadata", uri)
        .option("log", dst)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
    )
    for key, value in sink.items():
        writer = writer.option(key, value)
    return writer.start()


def test_a_restarted_stream_does_not_create_a_missing_log(spark, spark_cluster, tmp_path):
    uri = spark_cluster.uri
    append(uri, "restart-src", [b"r%d" % i for i in range(3)])
    checkpoint = tmp_path / "restart"
    query = copy_query(spark, uri, "restart-src", "restart-dst", checkpoint)
    query.awaitTermination(120)
    assert query.exception() is None
    assert read_log(uri, "restart-dst") == [b"r%d" % i for i in range(3)]
    # Restarted from its checkpoint with a typo in the sink's log name.
    append(uri, "restart-src", [b"r3"])
    query = copy_query(spark, uri, "restart-src", "restart-dts", checkpoint)
    error = failure(lambda: query.awaitTermination(120))
    assert (
        "LogNotFoundError: no log named 'restart-dts', and this stream restarts from its "
        "checkpoint, and a restarted stream creates no log by default (a typo in the log name "
        "would silently start a new one): check the name, or set createLog=true"
    ) in str(error), str(error)
    assert "restart-dts" not in log_names(uri)
    # Said explicitly, it is created (and gets the batch that failed).
    query = copy_query(spark, uri, "restart-src", "restart-dts", checkpoint, createLog="true")
    query.awaitTermination(120)
    assert query.exception() is None
    assert read_log(uri, "restart-dts") == [b"r3"]


def log_names(uri: str) -> list[str]:
    from bkeeper.client import BookKeeper
    from bkeeper.namedlog import NamedLogs
    from tests.spark.test_spark import run

    async def go() -> list[str]:
        async with BookKeeper(uri) as bk:
            return await NamedLogs(bk).names()

    return run(go)


# -- 4. lag -------------------------------------------------------------------------------


def test_progress_carries_the_head_and_the_listener_reports_lag(
    spark, spark_cluster, tmp_path, caplog
):
    from bkeeper.spark import LagListener

    uri = spark_cluster.uri
    payloads = [b"x" * 90 for _ in range(100)]
    append(uri, "lag-a", payloads, roll_bytes=2_000)  # several ledgers
    append(uri, "lag-b", payloads[:40])
    listener = LagListener(uri)
    spark.streams.addListener(listener)
    try:
        with caplog.at_level(logging.INFO, logger="bkeeper.spark.lag"):
            query = (
                stream_reader(
                    spark,
                    uri,
                    "lag-a,lag-b",
                    startingPosition="earliest",
                    maxEntriesPerTrigger="70",
                )
                .load()
                .writeStream.format("noop")
                .option("checkpointLocation", str(tmp_path / "lag"))
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination(120)
            assert query.exception() is None
            deadline = time.monotonic() + 60
            while len(listener.reports) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
    finally:
        spark.streams.removeListener(listener)
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    first = progress[0]["sources"][0]
    head = json.loads(first["latestOffset"])
    assert set(head) == {"lag-a", "lag-b"}
    end = json.loads(first["endOffset"])
    assert head != end, "70 of 140 entries read: the head is ahead of the batch's end"
    report = listener.reports[0]
    assert report.batch_id == progress[0]["batchId"]
    assert report.entries_behind_total == 70
    assert sum(report.entries_behind.values()) == 70
    assert report.bytes_behind_total == 70 * 90 + 70 * 10, "payload and record header"
    assert report.entries_behind_max == max(report.entries_behind.values())
    assert listener.reports[-1].entries_behind_total == 0
    assert any("entries behind" in r.getMessage() for r in caplog.records)
    # The query is stopped: the lag of its checkpoint, from the command line.
    append(uri, "lag-b", payloads[:5])
    result = CliRunner().invoke(
        log, ["lag", "--metadata", uri, "--checkpoint", str(tmp_path / "lag"), "--json"]
    )
    assert result.exit_code == 0, result.output
    lag = json.loads(result.output)
    assert lag["logs"]["lag-b"]["entries_behind"] == 5
    assert lag["logs"]["lag-a"]["entries_behind"] == 0
    assert lag["entries_behind"]["max"] == 5 and lag["entries_behind"]["min"] == 0


# -- helpers ------------------------------------------------------------------------------


def source_reader(spark, uri, log, **options):
    reader = spark.read.format("bkeeper").option("metadata", uri).option("log", log)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader


def stream_reader(spark, uri, log, **options):
    reader = spark.readStream.format("bkeeper").option("metadata", uri).option("log", log)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader


# -- issue 21: a stream reading from a subscription ----------------------------------------


def subscription_mark(uri: str, log_name: str, name: str):
    from bkeeper.client import BookKeeper
    from bkeeper.namedlog import NamedLogs
    from tests.spark.test_spark import run

    async def go():
        async with BookKeeper(uri) as bk:
            return (await NamedLogs(bk).log(log_name).subscriptions())[name].mark

    return run(go)


def test_a_stream_starts_at_its_subscription_and_commits_each_batch_to_it(
    spark, spark_cluster, tmp_path
):
    """``subscription``: the stream starts where the subscription stands (not at
    startingPosition once it exists), and each committed micro-batch moves its mark, so that
    retention by consumption can trim what the job processed; a new query (a new checkpoint)
    on the same subscription reads only what the last one did not."""
    uri = spark_cluster.uri
    first = append(uri, "subbed", [b"s%d" % i for i in range(6)])

    def copy(query_name: str, checkpoint: str) -> list[bytes]:
        query = (
            stream_reader(spark, uri, "subbed", subscription="spark-job",
                          startingPosition="earliest").load()
            .writeStream.format("memory").queryName(query_name)
            .option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
        )  # fmt: skip
        query.awaitTermination(120)
        return sorted(
            bytes(r.payload) for r in spark.sql(f"select payload from {query_name}").collect()
        )

    assert copy("subbed_one", str(tmp_path / "ck1")) == [b"s%d" % i for i in range(6)]
    assert subscription_mark(uri, "subbed", "spark-job") == first[-1]
    later = append(uri, "subbed", [b"t%d" % i for i in range(3)])
    assert copy("subbed_two", str(tmp_path / "ck2")) == [b"t0", b"t1", b"t2"]
    assert subscription_mark(uri, "subbed", "spark-job") == later[-1]
    error = failure(source_reader(spark, uri, "subbed", subscription="spark-job").load().collect)
    assert "option subscription is for streaming reads only" in first_line(error)
