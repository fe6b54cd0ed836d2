"""Task attempts of a batch write to bkeeper: a write task that fails after appending rows and
is retried by Spark, and a speculative copy of a write task, each commit every row exactly once
and leave no ledger that no log holds (docs/spark.md, "Exactly once").

- Retried: a SparkContext of its own with master ``local[2,3]`` (local mode retries a failed
  task only with a max-failures figure: ``local[N,F]``; the shared ``local[2]`` session's is
  1). It is made once for the module in the process's JVM (the shared context is stopped
  first, and made again on the next use of ``spark``). The first attempt of one partition
  fails in the write task itself, after the writer appended rows to its ledger: an input row
  with a null payload, which the writer refuses after it wrote the rows before it.
- Speculative: Spark starts speculative copies only off local mode (``TaskSchedulerImpl``
  runs its speculation check only when not local), and a copy is then either killed (the
  other attempt succeeded first) or denied its commit by the ``OutputCommitCoordinator``
  (both finished) at a moment no test can choose. Here the driver's and the tasks' side of
  that are played directly, deterministically and without a JVM, with the classes Spark runs
  and the way it runs them: the data source makes the writer (driver), each attempt gets its
  own pickled copy and writes the partition's Arrow batches through ``write`` (as
  ``pyspark.sql.worker.write_into_data_source`` does), the messages come back pickled, and
  ``commit`` gets the message of the attempt the coordinator authorized only (Spark drops a
  denied attempt's message: the JVM side of a Python writer has nothing to abort). Against
  the real bookies.

Which ledgers an attempt made: ledger ids come from one ZooKeeper sequence, so the ledgers
made between two probe ledgers are exactly the ids between theirs."""

from __future__ import annotations

import contextlib
import json
import pickle
from collections.abc import Iterator
from typing import Any

import pytest

from bkeeper.client import BookKeeper
from bkeeper.common.errors import BKeeperError, NoNodeError
from bkeeper.namedlog import LogConfig, NamedLogs
from bkeeper.namedlog.ledgers import create_ledger
from tests.spark.test_spark import ledgers_in_logs, list_ledgers, read_log, run

pytest.importorskip("pyspark")

#: Rows of each of the two partitions (write tasks) of a write.
PARTITION_ROWS = 300
#: Rows per Arrow batch a write task is given.
BATCH_ROWS = 50
#: Rows the failing attempt writes before its bad row.
FAIL_AFTER = 200
#: Records per entry: small, so the failing attempt's rows are on the bookies (not held in
#: an open batch) when it fails.
WRITE_OPTIONS = {"batchMaxRecords": "20"}


def payloads(first: int, count: int) -> list[bytes]:
    return [b"row-%05d" % i for i in range(first, first + count)]


def probe_ledger_id(uri: str) -> int:
    """The id of a ledger made (then deleted) now: later ledgers have greater ids."""

    async def go() -> int:
        async with BookKeeper(uri) as bk:
            handle = await create_ledger(bk, LogConfig())
            await handle.close()
            await bk.delete_ledger(handle.ledger_id)
            return handle.ledger_id

    result: int = run(go)
    return result


def log_ledgers(uri: str, log: str) -> list[int]:
    async def go() -> list[int]:
        async with BookKeeper(uri) as bk:
            return [x.ledger_id for x in (await NamedLogs(bk).log(log).metadata()).ledgers]

    result: list[int] = run(go)
    return result


def registered_ledgers(uri: str) -> list[str]:
    """The ledgers registered as pending by any write job (a job's node stays, marked, once
    it ended: bkeeper.namedlog.stores.pending_ledgers)."""

    async def go() -> list[str]:
        async with BookKeeper(uri) as bk:
            store = bk.cluster.store
            root = NamedLogs(bk).store.root.rpartition("/")[0] + "/pending"
            try:
                jobs = await store.children(root)
            except NoNodeError:
                return []
            return [ledger for job in jobs for ledger in await store.children(f"{root}/{job}")]

    result: list[str] = run(go)
    return result


def assert_no_orphan(uri: str, made: set[int], committed: set[int]) -> None:
    """Of the ledgers ``made``, those not ``committed`` are gone; every ledger left is in a
    log; no job has a pending ledger registered."""
    losers = made - committed
    assert not losers & list_ledgers(uri), f"ledgers of losing attempts left: {sorted(losers)}"
    assert list_ledgers(uri) == ledgers_in_logs(uri), "a ledger that no log holds"
    assert registered_ledgers(uri) == [], "a ledger still registered as pending"


# -- a failed attempt, retried by Spark ---------------------------------------------------


@pytest.fixture(scope="module")
def retrying_spark(spark_jvm: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A local session that retries a failed task (up to 3 attempts), in the process's JVM."""
    from pyspark import SparkContext

    from bkeeper.spark.session import local_session

    # One SparkContext per JVM, and getOrCreate would return the shared local[2] one: stop it
    # (the spark fixture makes it again on its next use).
    if SparkContext._active_spark_context is not None:
        SparkContext._active_spark_context.stop()
    session = local_session(
        "local[2,3]",
        "bkeeper-task-attempts",
        {"spark.sql.execution.arrow.maxRecordsPerBatch": str(BATCH_ROWS)},
        scratch_dir=tmp_path_factory.mktemp("spark-scratch"),
    )
    assert session.sparkContext.master == "local[2,3]"
    yield session
    session.stop()


def test_a_retried_write_task_commits_its_rows_once(retrying_spark, spark_cluster, tmp_path):
    uri, marks = spark_cluster.uri, tmp_path

    def rows(ids: Iterator[int]) -> Iterator[tuple[bytes | None]]:
        """Each id as a payload; the first attempt of partition 1 ends with a null payload
        after ``FAIL_AFTER`` rows. Each attempt leaves a mark: the ledgers there were when
        it started."""
        import asyncio

        from pyspark import TaskContext

        from bkeeper.client import BookKeeper

        async def ledgers() -> list[int]:
            async with BookKeeper(uri) as bk:
                return sorted([i async for i in bk.list_ledgers()])

        context = TaskContext.get()
        assert context is not None
        part, attempt = context.partitionId(), context.attemptNumber()
        (marks / f"attempt-{part}-{attempt}").write_text(json.dumps(asyncio.run(ledgers())))
        for sent, i in enumerate(ids):
            if part == 1 and attempt == 0 and sent == FAIL_AFTER:
                yield (None,)  # the writer refuses it, after writing the rows before
                return
            yield (b"row-%05d" % i,)

    first = probe_ledger_id(uri)
    ids = retrying_spark.sparkContext.parallelize(range(2 * PARTITION_ROWS), 2)
    df = retrying_spark.createDataFrame(ids.mapPartitions(rows), "payload binary")
    df.write.format("bkeeper").option("metadata", uri).option("log", "retried").options(
        **WRITE_OPTIONS
    ).mode("append").save()
    made = set(range(first + 1, probe_ledger_id(uri)))

    attempts = sorted(p.name for p in marks.iterdir())
    assert attempts == ["attempt-0-0", "attempt-1-0", "attempt-1-1"], "partition 1 was retried"
    # Every row once; each task's rows whole and in order, the tasks in their ledgers' order.
    zero, one = payloads(0, PARTITION_ROWS), payloads(PARTITION_ROWS, PARTITION_ROWS)
    written = read_log(uri, "retried")
    assert written in (zero + one, one + zero), f"{len(written)} rows, not each row once"
    committed = set(log_ledgers(uri, "retried"))
    failed = made - committed
    assert failed, "the failed attempt made a ledger"
    # The failed attempt deleted its ledgers itself, before its retry started.
    at_retry = set(json.loads((marks / "attempt-1-1").read_text()))
    assert not failed & at_retry, f"the failed attempt's {sorted(failed & at_retry)} were left"
    assert_no_orphan(uri, made, committed)


# -- a speculative copy -----------------------------------------------------------------


def shipped(value: Any) -> Any:
    """``value`` as another process gets it from Spark (pickled): the writer a task runs,
    the commit message the driver gets back."""
    return pickle.loads(pickle.dumps(value))


def arrow_batches(rows: list[bytes]) -> Iterator[Any]:
    """``rows`` as a write task's input: Arrow batches of ``BATCH_ROWS`` rows."""
    import pyarrow as pa

    for low in range(0, len(rows), BATCH_ROWS):
        yield pa.record_batch([pa.array(rows[low : low + BATCH_ROWS], pa.binary())], ["payload"])


@pytest.fixture
def write_job(spark_cluster: Any) -> Iterator[Any]:
    """The driver's writer for a batch write to ``log`` (made as Spark makes it, through the
    data source); the test process's client is closed afterwards."""
    from pyspark.sql.datasource import CaseInsensitiveDict
    from pyspark.sql.types import BinaryType, StructField, StructType

    from bkeeper.spark.options import sink_options
    from bkeeper.spark.runtime import runtime
    from bkeeper.spark.source import BKeeperDataSource

    options = CaseInsensitiveDict({"metadata": spark_cluster.uri, **WRITE_OPTIONS})

    def writer(log: str) -> Any:
        source = BKeeperDataSource(options=CaseInsensitiveDict({**options, "log": log}))
        return source.writer(StructType([StructField("payload", BinaryType())]), False)

    yield writer
    parsed = sink_options(options)
    runtime(parsed.metadata, parsed.client, parsed.log_config).close()


def test_a_speculative_copy_commits_one_attempt(write_job, spark_cluster):
    """Both attempts of partition 1 write it whole; the coordinator authorized the copy."""
    uri = spark_cluster.uri
    first = probe_ledger_id(uri)
    driver = write_job("speculative")
    zero, one = payloads(0, PARTITION_ROWS), payloads(PARTITION_ROWS, PARTITION_ROWS)
    task_zero = shipped(shipped(driver).write(arrow_batches(zero)))
    original = shipped(shipped(driver).write(arrow_batches(one)))
    copy = shipped(shipped(driver).write(arrow_batches(one)))
    assert original.ledgers and copy.ledgers, "both attempts wrote"
    shipped(driver).commit([task_zero, copy])
    made = set(range(first + 1, probe_ledger_id(uri)))

    assert read_log(uri, "speculative") in (zero + one, one + zero), "each row once"
    committed = log_ledgers(uri, "speculative")
    assert sorted(committed) == sorted(
        task_zero.ledgers["speculative"] + copy.ledgers["speculative"]
    )
    assert not set(original.ledgers["speculative"]) & list_ledgers(uri), "the loser's are deleted"
    assert_no_orphan(uri, made, set(committed))


@pytest.mark.parametrize("when", ["while-it-writes", "after-the-commit"])
def test_an_attempt_that_outlives_the_commit_leaves_nothing(write_job, spark_cluster, when):
    """The original attempt of partition 1 is still writing when its copy has won and the
    driver committed (Spark kills or denies it, and drops its message), or only starts then
    (a copy launched late, whose original won)."""
    uri = spark_cluster.uri
    log = f"outlived-{when}"
    first = probe_ledger_id(uri)
    driver = write_job(log)
    zero, one = payloads(0, PARTITION_ROWS), payloads(PARTITION_ROWS, PARTITION_ROWS)
    task_zero = shipped(shipped(driver).write(arrow_batches(zero)))
    copy = shipped(shipped(driver).write(arrow_batches(one)))

    def commit() -> None:
        shipped(driver).commit([task_zero, copy])

    def input_committed_midway() -> Iterator[Any]:
        batches = list(arrow_batches(one))
        yield from batches[:2]
        commit()  # the rows before are on the bookies: each batch is written before the next
        yield from batches[2:]

    if when == "after-the-commit":
        commit()
        straggler = arrow_batches(one)
    else:
        straggler = input_committed_midway()
    # Its message is never committed. Written into while the commit deleted it, its ledger
    # fails the attempt, as well it may.
    with contextlib.suppress(BKeeperError):
        shipped(driver).write(straggler)
    made = set(range(first + 1, probe_ledger_id(uri)))

    assert read_log(uri, log) in (zero + one, one + zero), "each row once"
    committed = log_ledgers(uri, log)
    assert sorted(committed) == sorted(task_zero.ledgers[log] + copy.ledgers[log])
    assert_no_orphan(uri, made, set(committed))
