"""A read's logs are checked at ``load()``: a missing log is "does not exist; did you mean"
from the cluster's log names, a ``logPattern`` matching nothing says so and shows a few
names, for a batch and a stream, with bkeeper's line first and before any action (issue 38:
the missing log was found 10.8 s later, at the action, as ``no log named``)."""

from __future__ import annotations

import pytest

from bkeeper.common.errors import LogNotFoundError
from bkeeper.spark.checks import check_logs
from bkeeper.spark.options import source_options

BASE = {"metadata": "zk://127.0.0.1:2181/ledgers"}
NAMES = ["clicks", "orders", "orders-eu", "payments", "refunds", "users", "views"]


def refusal(names: list[str], **options: str) -> str:
    parsed = source_options({**BASE, **options}, streaming=None)
    with pytest.raises(LogNotFoundError) as caught:
        check_logs(parsed, names)
    return str(caught.value)


def test_existing_logs_and_a_matching_pattern_pass():
    check_logs(source_options({**BASE, "log": "orders,views"}, streaming=None), NAMES)
    check_logs(source_options({**BASE, "logPattern": "order.*"}, streaming=None), NAMES)


@pytest.mark.parametrize(
    ("options", "names", "message"),
    [
        ({"log": "ordrs"}, NAMES, "log 'ordrs' does not exist; did you mean 'orders'? Or create it with bkeeper log create ordrs"),
        ({"log": "orders-e"}, NAMES, "log 'orders-e' does not exist; did you mean 'orders-eu' or 'orders'? Or create it with bkeeper log create orders-e"),
        ({"log": "orders,xyz,qqq"}, NAMES, "log 'xyz' does not exist (nor does 'qqq'): create it with bkeeper log create xyz (the logs are 'payments', 'views', 'users', 'refunds', 'orders-eu' and 2 more)"),
        ({"log": "a"}, [], "log 'a' does not exist: create it with bkeeper log create a (this cluster has no logs yet)"),
        ({"logPattern": "ordr.*"}, NAMES, "logPattern 'ordr.*' matches no log (it must match a whole name; the logs are 'orders', 'orders-eu', 'refunds', 'users', 'views' and 2 more)"),
        ({"logPattern": "x.*"}, [], "logPattern 'x.*' matches no log (it must match a whole name; this cluster has no logs yet)"),
    ],
)  # fmt: skip
def test_a_missing_log_or_an_empty_pattern_is_refused_naming_the_close_ones(
    options, names, message
):
    assert refusal(names, **options) == message


# -- in real Spark ---------------------------------------------------------------------------


def first_line(error: BaseException) -> str:
    return str(error).splitlines()[0]


def load_failure(spark, reader) -> tuple[BaseException, int]:
    """The error ``load()`` raised, and how many Spark jobs ran meanwhile."""
    tracker = spark.sparkContext.statusTracker()
    jobs = len(tracker.getJobIdsForGroup())
    with pytest.raises(Exception) as caught:
        reader.load()
    return caught.value, len(tracker.getJobIdsForGroup()) - jobs


def test_load_refuses_a_missing_log_and_an_empty_pattern(spark, spark_cluster):
    """At ``load()``, batch and stream, bkeeper's line first, no traceback, and no Spark job
    run for it: not at an action (before the fix ``load()`` succeeded and the action failed,
    10.8 s later; a wall-clock bound on ``load()`` said so before, and no longer: it timed
    the machine's load as much as the code)."""
    from tests.spark.test_spark import append

    uri = spark_cluster.uri
    append(uri, "orders", [b"o%d" % i for i in range(3)])
    spark.read.format("bkeeper").option("metadata", uri).option("log", "orders").load()
    for reading in (lambda: spark.read, lambda: spark.readStream):
        reader = reading().format("bkeeper").option("metadata", uri).option("log", "ordrs")
        error, jobs = load_failure(spark, reader)
        line = first_line(error)
        assert line.endswith(
            "LogNotFoundError: log 'ordrs' does not exist; did you mean 'orders'? "
            "Or create it with bkeeper log create ordrs"
        ), line
        assert "Traceback" not in str(error)
        assert jobs == 0, "load() refused the read before any Spark job"
        pattern = reading().format("bkeeper").option("metadata", uri)
        pattern = pattern.option("logPattern", "ordr.*")
        error, _ = load_failure(spark, pattern)
        line = first_line(error)
        assert "LogNotFoundError: logPattern 'ordr.*' matches no log" in line, line
        assert "'orders'" in line, line


def test_kafka_names_at_load_in_spark(spark, spark_cluster):
    """Spark passes option names lower-cased; the Kafka name comes back as Kafka spells it,
    an unknown one in camel case when made of known words."""
    from tests.spark.test_spark import append

    uri = spark_cluster.uri
    append(uri, "kafka-names", [b"k"])
    cases = {
        "includeHeaders": "unknown option includeHeaders (Kafka's name): bkeeper's is "
        "includeProperties; adds the properties column: a record's properties are Kafka's "
        "headers",
        "kafka.group.id": "unknown option kafka.group.id (Kafka's name): bkeeper's is "
        "subscription; a durable subscription of each log, where the stream's progress is "
        "recorded",
        "maxRowsPerSplit": "unknown option maxRowsPerSplit: did you mean maxEntriesPerSplit?",
    }
    for key, message in cases.items():
        for reading in (lambda: spark.read, lambda: spark.readStream):
            reader = reading().format("bkeeper").option("metadata", uri)
            reader = reader.option("log", "kafka-names").option(key, "x")
            error, _ = load_failure(spark, reader)
            assert first_line(error).endswith(f"ConfigError: {message}"), first_line(error)


def test_a_stream_on_a_pattern_takes_logs_created_after_it_starts(spark, spark_cluster, tmp_path):
    """The pattern must match one log at ``load()``; one created later still joins."""
    from tests.spark.test_spark import append

    uri = spark_cluster.uri
    append(uri, "late-a", [b"a0", b"a1"])
    stream = (
        spark.readStream.format("bkeeper")
        .option("metadata", uri)
        .option("logPattern", "late-.*")
        .option("startingPosition", "earliest")
        .load()
    )
    query = (
        stream.select("log", "payload")
        .writeStream.format("memory")
        .queryName("late_logs")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .start()
    )
    try:
        query.processAllAvailable()
        append(uri, "late-b", [b"b0"])
        query.processAllAvailable()
        rows = spark.sql("SELECT log, payload FROM late_logs").collect()
    finally:
        query.stop()
    assert sorted((r.log, bytes(r.payload)) for r in rows) == [
        ("late-a", b"a0"),
        ("late-a", b"a1"),
        ("late-b", b"b0"),
    ]
