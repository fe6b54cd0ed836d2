"""Every failure reads the same wherever it happens: in real Spark (local[2]) against real
bookies, the first line a user reads of a failed query (the exception PySpark raises in the
driver, a streaming query's exception message) is bkeeper's one-line message, for failures
on the driver (planning) and in executor tasks (reads, writes), with no Python traceback.

PySpark prefixes a task's error with a fixed line of its own (``An exception was thrown
from the Python worker:``, see :mod:`bkeeper.spark.errors`); :func:`first_message` reads
past that line and nothing else. The bookie-killing tests come last: this module's
``spark_cluster`` is its own (they stop every bookie), not the one other modules share."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from bkeeper.client import BookKeeper
from bkeeper.namedlog import NamedLogs
from bkeeper.spark.errors import python_lacks
from bkeeper.testing.benchmarks.processes import free_port
from bkeeper.testing.zookeeper import ZooKeeperServer
from tests.client.conftest import RealCluster
from tests.spark.conftest import own_cluster
from tests.spark.test_spark import append, run, source


@pytest.fixture(scope="module")
def spark_cluster(
    zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RealCluster]:
    """This module's own bookies: its last tests stop every one of them."""
    uri = zookeeper.uri(f"/{uuid.uuid4().hex[:12]}/ledgers")
    with own_cluster(uri, tmp_path_factory.mktemp("failures-bookies")) as cluster:
        yield cluster


def stop_every_bookie(cluster: RealCluster) -> None:
    with ThreadPoolExecutor(len(cluster.ports)) as pool:
        list(pool.map(cluster.stop, range(len(cluster.ports))))


def start_every_bookie(cluster: RealCluster) -> None:
    with ThreadPoolExecutor(len(cluster.ports)) as pool:
        list(pool.map(cluster.start, range(len(cluster.ports))))


#: The line PySpark's ``PythonException.__str__`` puts before a task worker's report.
WORKER_PREFIX = "An exception was thrown from the Python worker:"


def first_message(text: str) -> str:
    """The first line of an error that is not PySpark's fixed prefix for a task's error."""
    lines = text.strip().splitlines()
    if lines[0] == WORKER_PREFIX:
        return lines[1]
    return lines[0]


def assert_plain(text: str, pattern: str) -> None:
    """``text`` reads first (after Spark's prefix) as bkeeper's message ``pattern`` (a
    regular expression, matched from the start of the message), with no Python traceback
    before the JVM's stack trace."""
    message = first_message(text)
    print("FIRST LINE:", message)  # docs/spark.md, "When something fails", copies these
    assert re.search(r"bkeeper\.common\.errors\.\w+: " + pattern, message), text[:3000]
    before_jvm = text.split("JVM stacktrace:", maxsplit=1)[0]
    assert "Traceback (most recent call last)" not in before_jvm, text


def delete_log(uri: str, log: str) -> None:
    async def go():
        async with BookKeeper(uri) as bk:
            await NamedLogs(bk).delete(log)

    run(go)


def planned(spark, uri: str, log: str):
    """An RDD of ``log`` planned now (3 partitions of 100 entries), read later."""
    append(uri, log, [b"r%04d" % i for i in range(300)], roll_bytes=1500)
    rdd = source(spark, uri, log=log, maxEntriesPerSplit=100).select("payload").rdd
    assert rdd.getNumPartitions() == 3
    return rdd


# -- the driver ---------------------------------------------------------------------------
def test_wrong_log_on_the_driver(spark, spark_cluster):
    with pytest.raises(Exception) as caught:
        source(spark, spark_cluster.uri, log="no-such-log").collect()
    assert_plain(str(caught.value), "(no log named 'no-such-log'|log 'no-such-log' does not exist)")


def test_wrong_root_on_the_driver(spark, spark_cluster):
    wrong = spark_cluster.uri.replace("/ledgers", "/nothing-here/ledgers")
    with pytest.raises(Exception) as caught:
        source(spark, wrong, log="a").collect()
    assert_plain(str(caught.value), re.escape(f"no cluster at {wrong}"))


def test_zookeeper_down_on_the_driver(spark):
    uri = f"zk://127.0.0.1:{free_port()}/nobody/ledgers"  # nothing listens there
    with pytest.raises(Exception) as caught:
        source(spark, uri, log="a").collect()
    assert_plain(
        str(caught.value),
        re.escape(f"cannot reach the metadata service {uri}: ")
        + r".*; check that ZooKeeper runs and is reachable from this host",
    )
    assert str(caught.value).count("is ZooKeeper running") <= 1  # the hint said once


def test_log_deleted_under_a_stream(spark, spark_cluster, tmp_path):
    """Deleted while a stream reads it: the stream's next planning fails (on the driver),
    saying deleted (the planner finds no log of that name)."""
    uri = spark_cluster.uri
    append(uri, "deleted-streamed", [b"s%04d" % i for i in range(300)], roll_bytes=1500)
    query = (
        spark.readStream.format("bkeeper")
        .option("metadata", uri)
        .option("log", "deleted-streamed")
        .option("startingPosition", "earliest")
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:
        deadline = time.monotonic() + 60
        while not query.recentProgress or query.lastProgress["numInputRows"] == 0:
            assert time.monotonic() < deadline, "the stream read nothing"
            time.sleep(0.2)
        delete_log(uri, "deleted-streamed")
        with pytest.raises(Exception) as caught:
            query.awaitTermination(60)
    finally:
        query.stop()
    failed = query.exception()
    assert failed is not None
    for text in (str(caught.value), str(failed)):  # str(failed): the query's message
        assert_plain(
            text,
            "log 'deleted-streamed' was deleted while this stream read it \\(its offsets name "
            "it\\): its records are gone; stop the query",
        )


# -- executor tasks -----------------------------------------------------------------------
def test_zookeeper_down_in_a_read_task(spark, zookeeper_home, tmp_path):
    """A ZooKeeper of this test's own, stopped between planning and reading: the task's
    client cannot start."""
    from bkeeper.testing.zookeeper import ZooKeeperConfig

    config = ZooKeeperConfig(
        data_dir=tmp_path / "zk", port=0, tick_time_ms=500, zookeeper_home=zookeeper_home
    )
    server = ZooKeeperServer(config)
    server.start()
    try:
        uri = server.uri("/alone/ledgers")
        (tmp_path / "bookies").mkdir()
        with own_cluster(uri, tmp_path / "bookies"):
            rdd = planned(spark, uri, "zk-down")
            server.stop()
            with pytest.raises(Exception) as caught:
                rdd.collect()
    finally:
        server.stop()
    assert_plain(
        str(caught.value),
        re.escape(f"cannot reach the metadata service {uri}: ")
        + r".*; check that ZooKeeper runs and is reachable from this host",
    )
    assert str(caught.value).count("is ZooKeeper running") <= 1  # the hint said once


def test_log_deleted_after_planning_in_a_read_task(spark, spark_cluster):
    rdd = planned(spark, spark_cluster.uri, "deleted-planned")
    delete_log(spark_cluster.uri, "deleted-planned")
    with pytest.raises(Exception) as caught:
        rdd.collect()
    assert_plain(
        str(caught.value),
        r"log 'deleted-planned' was deleted while this query read it: ledger \d+ \(entries "
        r"0\.\.99\) went with it",
    )
    assert "failOnDataLoss" not in str(caught.value)
    assert "truncat" not in str(caught.value)


def test_a_later_error_in_the_same_workers_keeps_its_traceback(spark, spark_cluster):
    """The traceback is hidden for bkeeper's error only: a task's worker exits after
    reporting one, so a later error of other code (in the same daemon's workers) keeps its
    traceback."""
    deleted = planned(spark, spark_cluster.uri, "then-a-bug")
    intact = planned(spark, spark_cluster.uri, "then-a-bug-intact")
    delete_log(spark_cluster.uri, "then-a-bug")
    with pytest.raises(Exception) as ours:
        deleted.collect()
    assert "Traceback" not in str(ours.value)

    def bug(_):
        raise ValueError("a bug of someone else's")

    with pytest.raises(Exception) as theirs:
        intact.map(bug).collect()
    assert "Traceback (most recent call last)" in str(theirs.value)
    assert "ValueError: a bug of someone else's" in str(theirs.value)


def test_python_lacks(subprocesses: None) -> None:
    assert python_lacks(sys.executable) is None
    assert python_lacks("/nonexistent/python3").startswith("does not run")


def test_wrong_python_on_executors(spark_cluster, tmp_path):
    """Spark's Python workers run an interpreter without pyarrow and bkeeper (local mode
    with ``PYSPARK_PYTHON``=/usr/bin/python3, in a driver process of its own): no code of
    bkeeper runs in them, so Spark's own report is a traceback ending in ``No module named``;
    :func:`check_workers_python`, called by ``register``, says it first, and what to do."""
    system = "/usr/bin/python3"
    if python_lacks(system) is None:
        pytest.skip(f"{system} has pyarrow and bkeeper")
    append(spark_cluster.uri, "wrong-python", [b"w%04d" % i for i in range(10)])
    job = tmp_path / "job.py"
    job.write_text(
        textwrap.dedent(f"""
        from bkeeper.spark import register
        from bkeeper.spark.session import local_session
        spark = local_session("local[1]", "wrong-python", scratch_dir={str(tmp_path)!r},
                              register_source=False)
        try:
            register(spark)  # registers, then refuses: the workers' Python lacks bkeeper
        except Exception as error:
            print("CHECK:", str(error).splitlines()[0])
        try:
            (spark.read.format("bkeeper").option("metadata", {spark_cluster.uri!r})
             .option("log", "wrong-python").load().collect())
        except Exception as error:
            print("SPARK:", " | ".join(str(error).strip().splitlines()))
        """)
    )
    env = {**os.environ, "PYSPARK_PYTHON": system, "PYSPARK_DRIVER_PYTHON": sys.executable}
    done = subprocess.run(
        [sys.executable, str(job)], env=env, capture_output=True, text=True, timeout=300,
        check=False,
    )  # fmt: skip
    lines = {line.split(":", 1)[0]: line.split(": ", 1)[1] for line in done.stdout.splitlines()}
    assert set(lines) == {"CHECK", "SPARK"}, done.stdout + done.stderr[-3000:]
    assert lines["CHECK"] == (
        f"Spark's Python workers run {system} (PYSPARK_PYTHON), which has no module 'pyarrow' "
        f"nor 'bkeeper': bkeeper's reads and writes run there. Point Spark at an interpreter "
        f"with bkeeper installed: PYSPARK_PYTHON={sys.executable} (spark.pyspark.python under "
        "spark-submit), or on a cluster a packed venv shipped with --archives (docs/spark.md, "
        '"Running on a cluster")'
    )
    assert "No module named 'bkeeper'" in lines["SPARK"], lines["SPARK"]


def test_bookies_down_in_a_write_task(spark, spark_cluster):
    """Last but one: stops every bookie (started again after)."""
    uri = spark_cluster.uri
    frame = spark.createDataFrame([(b"x%03d" % i,) for i in range(20)], "payload binary")
    append(uri, "written-down", [b"seed"])
    try:
        stop_every_bookie(spark_cluster)
        with pytest.raises(Exception) as caught:
            frame.write.format("bkeeper").option("metadata", uri).option(
                "log", "written-down"
            ).mode("append").save()
        assert_plain(str(caught.value), r"write task .*: cannot write: ")
        assert "bkeeper shell listbookies" in first_message(str(caught.value))
    finally:
        start_every_bookie(spark_cluster)


def test_bookies_down_on_the_driver(spark, spark_cluster):
    """Every bookie stopped under a log whose last ledger is open: planning asks its
    bookies how far it goes."""
    uri = spark_cluster.uri
    append(uri, "planned-down", [b"o%04d" % i for i in range(10)], close=False)
    try:
        stop_every_bookie(spark_cluster)
        with pytest.raises(Exception) as caught:
            source(spark, uri, log="planned-down").collect()
    finally:
        start_every_bookie(spark_cluster)
    assert_plain(
        str(caught.value),
        r"log 'planned-down': planning the read: ledger \d+: .*; are the ledger's bookies "
        r"running, and reachable from this host\? `bkeeper shell listbookies`",
    )


def test_bookies_down_under_a_stream(spark, spark_cluster, tmp_path):
    """Every bookie stopped after a stream's first batch: the next batch's read task fails
    (planning needs no bookie: the log's ledgers are closed). The stream's first run reads
    the first ledger as its first batch and ends (AvailableNow); it goes on from its
    checkpoint once the bookies are down, so that no batch can run between the first one and
    the stop (the next trigger of a stream left running, 3 s later, raced the stop of the
    bookies on a loaded machine)."""
    uri = spark_cluster.uri
    append(uri, "streamed-down", [b"d%04d" % i for i in range(100)], roll_bytes=1500)

    def start():
        return (
            spark.readStream.format("bkeeper")
            .option("metadata", uri)
            .option("log", "streamed-down")
            .option("startingPosition", "earliest")
            .option("maxEntriesPerTrigger", "100")
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(availableNow=True)
            .start()
        )

    first = start()
    assert first.awaitTermination(120), "the first batch ran"
    assert first.exception() is None
    assert [p["numInputRows"] for p in first.recentProgress if p["numInputRows"]] == [100]
    append(uri, "streamed-down", [b"e%04d" % i for i in range(200)], roll_bytes=1500)
    stop_every_bookie(spark_cluster)
    try:
        query = start()
        try:
            with pytest.raises(Exception) as caught:
                query.awaitTermination(120)
        finally:
            query.stop()
    finally:
        start_every_bookie(spark_cluster)
    failed = query.exception()
    assert failed is not None
    assert [p["batchId"] for p in query.recentProgress] == [], "no batch after the first"
    pattern = r"log 'streamed-down': cannot read ledger \d+ \(entries 0\.\.99\) from its bookies"
    for text in (str(caught.value), str(failed)):
        assert_plain(text, pattern)


def test_bookies_down_in_a_read_task(spark, spark_cluster):
    """Last: every bookie stopped between planning and reading."""
    rdd = planned(spark, spark_cluster.uri, "read-down")
    bookies = [spark_cluster.bookie_id(i) for i in range(len(spark_cluster.ports))]
    try:
        stop_every_bookie(spark_cluster)
        with pytest.raises(Exception) as caught:
            rdd.collect()
    finally:
        start_every_bookie(spark_cluster)
    assert_plain(
        str(caught.value),
        r"log 'read-down': cannot read ledger \d+ \(entries 0\.\.99\) from its bookies "
        r"[0-9.:, ]+: cannot connect to bookie 127\.0\.0\.1:\d+: .*; are the ledger's bookies "
        r"running, and reachable from this host\? `bkeeper shell listbookies` lists the live "
        r"ones",
    )
    assert any(b in first_message(str(caught.value)) for b in bookies)
