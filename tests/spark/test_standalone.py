"""The bkeeper data source on a real Spark standalone cluster (tests/spark/standalone.py): a
master and two workers of 1 core each, so two executors in JVMs of their own, each running
its own Python workers. The driver is this test process's SparkSession, connected to that
master (the JVM the other Spark modules share is stopped before and after: one SparkContext
per JVM).

Through the cluster: a batch read spread over both executors, a streaming read stopped and
restarted from its checkpoint, a batch write and a streaming write, each checked exactly (no
record missing, none twice). The executors run this interpreter because the driver's
environment names it (``PYSPARK_PYTHON``, set by ``local_session``; docs/spark.md, "Running on
a cluster"); the tests check that they did."""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.spark.standalone import StandaloneCluster
from tests.spark.test_spark import append, read_log

pyspark = pytest.importorskip("pyspark")

#: How long the application may wait for both executors to register.
EXECUTORS_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    with StandaloneCluster(tmp_path_factory.mktemp("standalone")) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def cluster_spark(
    spark_jvm: None,
    standalone: StandaloneCluster,
    spark_cluster: Any,  # the bookies start while the Spark workers start and register
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Any]:
    from bkeeper.spark.session import local_session, stop_jvm

    stop_jvm()  # a local[2] context of another module may hold this process's JVM
    try:
        session = local_session(
            standalone.master_url,
            "bkeeper-standalone-tests",
            conf={
                "spark.executor.memory": "512m",
                "spark.executor.cores": "1",
                "spark.cores.max": str(standalone.workers),
            },
            scratch_dir=tmp_path_factory.mktemp("standalone-driver"),
        )
        standalone.wait_workers()
        _wait_executors(session, standalone.workers)
        yield session
    finally:
        stop_jvm()  # the next module's local session starts a JVM of its own


def _wait_executors(spark: Any, count: int) -> None:
    """Until ``count`` executors registered: tasks given out before the second one is there
    would all go to the first."""
    tracker = spark.sparkContext.statusTracker()
    deadline = time.monotonic() + EXECUTORS_TIMEOUT_S
    while len(tracker.getExecutorInfos()) < count + 1:  # + the driver
        assert time.monotonic() < deadline, "the executors did not register"
        time.sleep(0.2)


def where_udf() -> Any:
    """A column: the working directory and interpreter of the Python worker computing it, in
    the same task as the read (the executor's directory under its worker's work dir)."""
    from pyspark.sql.functions import udf

    def where() -> str:
        return f"{os.getcwd()}|{sys.executable}"

    return udf(where, useArrow=False).asNondeterministic()()


def worker_of(standalone: StandaloneCluster, cwd: str) -> int:
    for index in range(standalone.workers):
        if Path(cwd).is_relative_to(standalone.work_dir(index)):
            return index
    raise AssertionError(f"{cwd} is in no worker's work dir")


def test_batch_read_is_spread_over_both_executors(cluster_spark, standalone, spark_cluster):
    uri = spark_cluster.uri
    payloads = [b"cluster-%04d" % i for i in range(600)]
    positions = append(uri, "spread", payloads, roll_bytes=2_000)
    assert len({p.ledger_id for p in positions}) >= 4, "several ledgers"
    df = (
        cluster_spark.read.format("bkeeper")
        .option("metadata", uri)
        .option("log", "spread")
        .option("maxEntriesPerSplit", 100)
        .load()
    )
    rows = df.select("payload", "ledger", "entry", where_udf().alias("where")).collect()
    assert sorted(r.payload for r in rows) == payloads, "each record once"
    places = Counter(r.where for r in rows)
    interpreters = {where.split("|")[1] for where in places}
    assert interpreters == {sys.executable}, "the executors ran the driver's interpreter"
    per_worker = Counter()
    for where, count in places.items():
        per_worker[worker_of(standalone, where.split("|")[0])] += count
    assert sorted(per_worker) == [0, 1], f"both executors read: {dict(per_worker)}"
    assert sum(per_worker.values()) == 600


def test_streaming_read_restarts_from_its_checkpoint(
    cluster_spark, standalone, spark_cluster, tmp_path
):
    uri = spark_cluster.uri
    first = [b"s1-%04d" % i for i in range(100)]
    append(uri, "stream", first, roll_bytes=1_500)
    batches: dict[int, list[bytes]] = {}
    places: set[int] = set()

    def keep(df: Any, batch_id: int) -> None:
        rows = df.select("payload", where_udf().alias("where")).collect()
        # A batch run again after a stop reads the same records: it replaces itself here.
        batches[batch_id] = [r.payload for r in rows]
        places.update(worker_of(standalone, r.where.split("|")[0]) for r in rows)

    def start(available_now: bool) -> Any:
        writer = (
            cluster_spark.readStream.format("bkeeper")
            .option("metadata", uri)
            .option("log", "stream")
            .option("startingPosition", "earliest")
            # small batches (of two read partitions) until stopped, then two to drain
            .option("maxEntriesPerTrigger", 100 if available_now else 10)
            .option("maxEntriesPerSplit", 50 if available_now else 5)
            .load()
            .writeStream.foreachBatch(keep)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
        )
        if available_now:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime="100 milliseconds")
        return writer.start()

    query = start(available_now=False)
    try:
        deadline = time.monotonic() + 60
        while sum(1 for b in batches.values() if b) < 2:
            assert query.exception() is None, query.exception()
            assert time.monotonic() < deadline, "no two batches in 60 s"
            time.sleep(0.1)
    finally:
        query.stop()
    before = dict(batches)
    read_before = sum(map(len, before.values()))
    assert 0 < read_before < len(first), "stopped mid-stream"
    second = [b"s2-%04d" % i for i in range(100)]
    append(uri, "stream", second, roll_bytes=1_500)
    query = start(available_now=True)
    assert query.awaitTermination(120), "the restarted stream drained what was there"
    assert query.exception() is None
    for batch_id, payloads in before.items():
        assert batches[batch_id] == payloads, f"batch {batch_id} read the same when replayed"
    resumed = [p["batchId"] for p in query.recentProgress]
    assert min(resumed) >= max(before), "the restart went on from the checkpoint"
    everything = [p for batch_id in sorted(batches) for p in batches[batch_id]]
    assert sorted(everything) == sorted(first + second), "no record missing, none twice"
    assert places == {0, 1}, "both executors read"


def test_batch_write_appends_each_row_once(cluster_spark, spark_cluster):
    uri = spark_cluster.uri
    df = cluster_spark.range(0, 800, numPartitions=4).selectExpr(
        "CAST(format_string('bw-%04d', id) AS BINARY) AS payload",
        "CAST(concat('k', id % 7) AS BINARY) AS key",
    )  # made on the executors, four write tasks
    df.write.format("bkeeper").option("metadata", uri).option("log", "written").mode(
        "append"
    ).save()
    assert sorted(read_log(uri, "written")) == [b"bw-%04d" % i for i in range(800)]


def test_streaming_write_copies_each_record_once(cluster_spark, spark_cluster, tmp_path):
    uri = spark_cluster.uri
    first = [b"copy-%04d" % i for i in range(300)]
    append(uri, "copy-src", first, roll_bytes=1_500)

    def copy() -> Any:
        return (
            cluster_spark.readStream.format("bkeeper")
            .option("metadata", uri)
            .option("log", "copy-src")
            .option("startingPosition", "earliest")
            .option("maxEntriesPerTrigger", 150)
            .option("maxEntriesPerSplit", 50)
            .load()
            .select("payload", "key")
            .writeStream.format("bkeeper")
            .option("metadata", uri)
            .option("log", "copy-dst")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )

    query = copy()
    assert query.awaitTermination(120)
    assert query.exception() is None
    assert sorted(read_log(uri, "copy-dst")) == first
    more = [b"more-%04d" % i for i in range(100)]
    append(uri, "copy-src", more, roll_bytes=1_500)
    query = copy()
    assert query.awaitTermination(120)
    assert query.exception() is None
    assert sorted(read_log(uri, "copy-dst")) == sorted(first + more), "no duplicate, no gap"
