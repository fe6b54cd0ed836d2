"""Each read and write option of the data source through real Spark (local[2]) against real
bookies, by what it visibly does: rollBytes (the ledgers a task makes), writerId (a second
query with the same id is a replay), createLog=false, password, includeProperties,
rowsPerBatch, minEntriesPerTrigger/maxTriggerDelay, a failing streaming batch (abort) and a
write task's in-flight limit."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from bkeeper.client import BookKeeper
from bkeeper.namedlog import NamedLogs, PendingLedgers, Position
from tests.spark.test_spark import (
    append,
    ledgers_in_logs,
    list_ledgers,
    read_log,
    run,
    source,
)


def write(frame, uri: str, **options) -> None:
    writer = frame.write.format("bkeeper").option("metadata", uri).mode("append")
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save()


def log_ledgers(uri: str, log: str) -> list[int]:
    async def go() -> list[int]:
        async with BookKeeper(uri) as bk:
            return [x.ledger_id for x in (await NamedLogs(bk).log(log).metadata()).ledgers]

    return run(go)


def orphans(uri: str) -> set[int]:
    """Ledgers of the cluster that no log holds."""
    return list_ledgers(uri) - ledgers_in_logs(uri)


def pending(uri: str, job_id: str) -> dict[int, str]:
    async def go() -> dict[int, str]:
        async with BookKeeper(uri) as bk:
            return await PendingLedgers(bk.cluster.store, NamedLogs(bk).store, job_id).registered()

    return run(go)


def first_line(error: BaseException) -> str:
    return str(error).splitlines()[0]


def test_roll_bytes_starts_a_new_ledger_after_that_many_bytes(spark, spark_cluster):
    uri = spark_cluster.uri
    payloads = [b"%03d" % i + b"x" * 87 for i in range(95)]  # 100-byte records (10 of header)
    frame = spark.createDataFrame([(p,) for p in payloads], "payload binary").coalesce(1)
    write(frame, uri, log="rolled", rollBytes=1000, batching="false")  # an entry a record
    ledgers = log_ledgers(uri, "rolled")
    assert len(ledgers) == 10, "one task: a new ledger once 1,000 bytes were written"
    rows = source(spark, uri, log="rolled").orderBy("ledger", "entry").collect()
    assert [r.payload for r in rows] == payloads
    per_ledger = [sum(1 for r in rows if r.ledger == ledger) for ledger in ledgers]
    assert per_ledger == [10] * 9 + [5]
    write(frame, uri, log="unrolled")  # the default: 256 MiB
    assert len(log_ledgers(uri, "unrolled")) == 1


def ledger_metadata(uri: str, ledger_id: int):
    async def go():
        async with BookKeeper(uri) as bk:
            return await bk.ledger_metadata(ledger_id)

    return run(go)


def test_replication_and_digest_options_shape_the_task_ledgers(spark, spark_cluster):
    uri = spark_cluster.uri
    frame = spark.createDataFrame([(b"shaped-%d" % i,) for i in range(10)], "payload binary")
    write(frame.coalesce(1), uri, log="shaped", ensembleSize=2, writeQuorum=2, ackQuorum=1,
          digest="crc32")  # fmt: skip
    (ledger,) = log_ledgers(uri, "shaped")
    meta = ledger_metadata(uri, ledger)
    shape = (meta.ensemble_size, meta.write_quorum, meta.ack_quorum, meta.digest_type.name)
    assert shape == (2, 2, 1, "CRC32")
    assert read_log(uri, "shaped") == [b"shaped-%d" % i for i in range(10)]


def copy_stream(spark, uri: str, checkpoint: Path, writer_id: str | None):
    writer = (
        spark.readStream.format("bkeeper")
        .option("metadata", uri)
        .option("log", "wid-src")
        .option("startingPosition", "earliest")
        .load()
        .select("payload")
        .writeStream.format("bkeeper")
        .option("metadata", uri)
        .option("log", "wid-dst")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
    )
    if writer_id is not None:
        writer = writer.option("writerId", writer_id)
    query = writer.start()
    query.awaitTermination(120)
    assert query.exception() is None
    return query


def test_writer_id_makes_another_query_a_replay(spark, spark_cluster, tmp_path):
    uri = spark_cluster.uri
    payloads = [b"wid-%03d" % i for i in range(50)]
    append(uri, "wid-src", payloads)
    copy_stream(spark, uri, tmp_path / "first", "copier")
    assert read_log(uri, "wid-dst") == payloads
    # Another checkpoint, so Spark runs batch 0 again, under the same writer id: the log
    # has batch 0 of "copier" already, so nothing is appended and the copies are deleted.
    again = copy_stream(spark, uri, tmp_path / "second", "copier")
    assert [p["numInputRows"] for p in again.recentProgress] == [50]
    assert read_log(uri, "wid-dst") == payloads
    assert orphans(uri) == set()
    # Without writerId, a new checkpoint is a new writer: it copies the records again.
    copy_stream(spark, uri, tmp_path / "third", None)
    assert sorted(read_log(uri, "wid-dst")) == sorted(payloads * 2)


def test_create_log_false_refuses_a_missing_log(spark, spark_cluster):
    uri = spark_cluster.uri
    frame = spark.createDataFrame([(b"one",), (b"two",)], "payload binary")
    with pytest.raises(Exception) as caught:
        write(frame, uri, log="absent", createLog="false")
    assert first_line(caught.value).endswith(
        "bkeeper.common.errors.LogNotFoundError: no log named 'absent', and createLog=false: "
        "create the log first or leave the option out"
    ), first_line(caught.value)
    assert "absent" not in run_names(uri)
    # Routed by a log column: the missing log fails the write before any log changes (the
    # logs are committed in name order; the one that exists comes first).
    append(uri, "a-present", [b"before"])
    routed = spark.createDataFrame(
        [(b"p1", "a-present"), (b"z1", "z-absent"), (b"p2", "a-present")],
        "payload binary, log string",
    ).repartition(2)
    with pytest.raises(Exception) as caught:
        write(routed, uri, createLog="false")
    assert "no log named 'z-absent', and createLog=false" in str(caught.value)
    assert read_log(uri, "a-present") == [b"before"], "no log got part of the failed write"
    assert "z-absent" not in run_names(uri)
    assert orphans(uri) == set()
    write(frame.coalesce(1), uri, log="absent")  # createLog defaults to true
    assert read_log(uri, "absent") == [b"one", b"two"]


def run_names(uri: str) -> list[str]:
    async def go() -> list[str]:
        async with BookKeeper(uri) as bk:
            return await NamedLogs(bk).names()

    return run(go)


def test_password_writes_and_reads_protected_ledgers(spark, spark_cluster):
    uri = spark_cluster.uri
    frame = spark.createDataFrame([(b"secret-%d" % i,) for i in range(20)], "payload binary")
    write(frame.coalesce(1), uri, log="locked", password="s3cret")
    (ledger,) = log_ledgers(uri, "locked")
    rows = (
        source(spark, uri, log="locked", password="s3cret")
        .orderBy("entry", "batch_index")
        .collect()
    )
    assert [r.payload for r in rows] == [b"secret-%d" % i for i in range(20)]
    for wrong in ({}, {"password": "guess"}):
        with pytest.raises(Exception) as caught:
            source(spark, uri, log="locked", **wrong).collect()
        assert first_line(caught.value).endswith(
            f"bkeeper.common.errors.UnauthorizedAccessError: ledger {ledger}: wrong password"
        ), first_line(caught.value)


def test_include_properties_adds_the_properties_column(spark, spark_cluster):
    uri = spark_cluster.uri
    rows = [(b"a", {"origin": "x", "n": "1"}), (b"b", None), (b"c", {"origin": "y"})]
    frame = spark.createDataFrame(rows, "payload binary, properties map<string,string>")
    write(frame.coalesce(1), uri, log="propped")
    plain = source(spark, uri, log="propped")
    assert plain.columns == ["log", "ledger", "entry", "batch_index", "timestamp", "key", "payload"]
    read = source(spark, uri, log="propped", includeProperties="true").orderBy(
        "entry", "batch_index"
    )
    assert read.columns == [*plain.columns, "properties"]
    assert [(r.payload, r.properties) for r in read.collect()] == [
        (b"a", {"origin": b"x", "n": b"1"}),
        (b"b", {}),
        (b"c", {"origin": b"y"}),
    ]


def test_a_schema_naming_some_columns_reads_only_those(spark, spark_cluster, tmp_path):
    """The Python Data Source API prunes no columns itself: a schema given with ``.schema()``
    that names some bkeeper columns (any order, their types) is what the source returns, in
    a batch read and a stream; a column it does not have, or a wrong type, is one line."""
    uri = spark_cluster.uri
    positions = append(uri, "narrow", [b"n-%d" % i for i in range(40)])
    reader = spark.read.format("bkeeper").option("metadata", uri).option("log", "narrow")
    narrow = reader.schema("payload binary, entry bigint").load()
    assert narrow.columns == ["payload", "entry"]
    assert sorted((r.entry, r.payload) for r in narrow.collect()) == [
        (p.entry_id, b"n-%d" % i) for i, p in enumerate(positions)
    ]
    for schema, message in [
        ("payload string", "schema: column 'payload' is binary, not string"),
        ("value binary", "schema: column 'value' is not a bkeeper column (log, ledger, entry"),
        ("properties map<string,binary>", "set includeProperties=true for it"),
    ]:
        with pytest.raises(Exception, match=re.escape(message)):
            reader.schema(schema).load().collect()
    stream = (
        spark.readStream.format("bkeeper").option("metadata", uri).option("log", "narrow")
        .option("startingPosition", "earliest").schema("payload binary").load()
        .writeStream.format("memory").queryName("narrow_stream")
        .option("checkpointLocation", str(tmp_path / "ck")).start()
    )  # fmt: skip
    try:
        wait_for(lambda: spark.table("narrow_stream").count() == 40, "the 40 records")
    finally:
        stream.stop()
    assert spark.table("narrow_stream").columns == ["payload"]


def test_rows_per_batch_cuts_the_arrow_batches(spark, spark_cluster):
    """Spark does not show the batches a source hands it, so the reader's ``read()`` is
    driven by hand for their sizes; Spark then reads the same rows across the cuts."""
    from bkeeper.namedlog import LogConfig
    from bkeeper.spark.options import source_options
    from bkeeper.spark.runtime import runtime
    from bkeeper.spark.source import LogBatchReader

    uri = spark_cluster.uri
    payloads = [b"rpb-%03d" % i for i in range(250)]
    positions = append(uri, "batched", payloads, roll_bytes=1600)
    per_ledger = [
        sum(1 for p in positions if p.ledger_id == x) for x in log_ledgers(uri, "batched")
    ]
    assert len(per_ledger) == 3 and sum(per_ledger) == 250
    options = source_options(
        {"metadata": uri, "log": "batched", "rowsPerBatch": "7"}, streaming=False
    )
    reader = LogBatchReader(options)
    try:
        (partition,) = reader.partitions()
        sizes = [batch.num_rows for batch in reader.read(partition)]
    finally:
        runtime(options.metadata, options.client, LogConfig(password=options.password)).close()
    # 7 rows a batch, and the rest of a ledger's records: batches never span ledgers.
    assert sizes == [size for n in per_ledger for size in [7] * (n // 7) + [n % 7] if size]
    rows = source(spark, uri, log="batched", rowsPerBatch=7).orderBy("ledger", "entry").collect()
    assert [(Position(r.ledger, r.entry), r.payload) for r in rows] == list(
        zip(positions, payloads, strict=True)
    )


def wait_for(condition, what: str, timeout_s: float = 120.0):
    deadline = time.monotonic() + timeout_s
    while not (found := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return found


def trigger_stream(spark, uri: str, log: str, name: str, checkpoint: Path, **options):
    reader = spark.readStream.format("bkeeper").option("metadata", uri).option("log", log)
    for key, value in options.items():
        reader = reader.option(key, value)
    writer = reader.load().writeStream.format("memory").queryName(name)
    writer = writer.option("checkpointLocation", str(checkpoint))
    return writer.trigger(processingTime="200 milliseconds").start()


def batch_sizes(query) -> list[int]:
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


def reported_head(progress) -> Position | None:
    latest = progress["sources"][0]["latestOffset"]
    latest = json.loads(latest) if isinstance(latest, str) else latest
    if not latest:
        return None
    return Position(latest["trig"]["ledger"], latest["trig"]["entry"]) if "trig" in latest else None


def test_min_entries_per_trigger_waits_for_enough_records(spark, spark_cluster, tmp_path):
    uri = spark_cluster.uri
    old = append(uri, "trig", [b"old-%d" % i for i in range(10)])  # before the start: not read
    spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", "100ms")
    query = trigger_stream(spark, uri, "trig", "trig", tmp_path / "ck",
                           minEntriesPerTrigger=100, maxTriggerDelay="1h")  # fmt: skip
    try:
        start = Position(old[-1].ledger_id, old[-1].entry_id + 1)
        wait_for(
            lambda: [p for p in query.recentProgress if reported_head(p) == start],
            "a first trigger (the stream starts at the latest record then)",
        )
        few = append(uri, "trig", [b"few-%d" % i for i in range(30)])
        head = Position(few[-1].ledger_id, few[-1].entry_id + 1)
        # Triggers come and go: the source sees the 30 records (its reported head) but
        # starts no batch, for 30 < 100 and an hour has not passed.
        wait_for(
            lambda: [p for p in query.recentProgress if reported_head(p) == head],
            "a trigger that saw the 30 records",
        )
        seen = [p for p in query.recentProgress if reported_head(p) == head]
        wait_for(lambda: len([p for p in query.recentProgress if reported_head(p) == head]) >= 3,
                 "three triggers that saw them")  # fmt: skip
        assert batch_sizes(query) == [] and spark.table("trig").count() == 0, seen
        append(uri, "trig", [b"more-%d" % i for i in range(80)])
        wait_for(lambda: batch_sizes(query), "a batch")
        assert batch_sizes(query) == [110], "all that waited, in one batch"
    finally:
        query.stop()
        spark.conf.unset("spark.sql.streaming.noDataProgressEventInterval")
    payloads = [r.payload for r in spark.table("trig").orderBy("ledger", "entry").collect()]
    assert payloads == [b"few-%d" % i for i in range(30)] + [b"more-%d" % i for i in range(80)]


def test_max_trigger_delay_lets_fewer_records_through(spark, spark_cluster, tmp_path):
    uri = spark_cluster.uri
    append(uri, "trig-delay", [b"early-%d" % i for i in range(5)])
    query = trigger_stream(spark, uri, "trig-delay", "trig_delay", tmp_path / "ck",
                           startingPosition="earliest", minEntriesPerTrigger=100,
                           maxTriggerDelay="2s")  # fmt: skip
    try:
        wait_for(lambda: batch_sizes(query), "a batch")
        assert batch_sizes(query) == [5], "fewer than 100, once 2 s had passed"
    finally:
        query.stop()
    # AvailableNow does not wait at all.
    available = (
        spark.readStream.format("bkeeper").option("metadata", uri).option("log", "trig-delay")
        .option("startingPosition", "earliest").option("minEntriesPerTrigger", 100).load()
        .writeStream.format("memory").queryName("trig_now")
        .option("checkpointLocation", str(tmp_path / "now")).trigger(availableNow=True).start()
    )  # fmt: skip
    available.awaitTermination(120)
    assert available.exception() is None
    assert batch_sizes(available) == [5]


def test_a_failing_streaming_batch_leaves_no_ledgers(spark, spark_cluster, tmp_path):
    """Two tasks: a small one that writes its rows and reports, and a big one that fails at
    its last input batch (a null payload). Spark aborts the batch: nothing of it is visible,
    and the abort deletes the ledgers registered for the writer id.

    The small task may still run when the big one fails (a loaded machine): Spark calls the
    abort at once and stops the small task afterwards (cancelled mid-write, its worker
    killed, or ending just after the abort). Its one ledger then stays registered, and
    the writer id's next batch deletes it when it commits (both checked here)."""
    uri = spark_cluster.uri
    append(uri, "abort-src", [b"small-%d" % i for i in range(50)])  # one ledger
    append(uri, "abort-src", [b"big-%d" % i for i in range(999)] + [b"poison"])  # another
    before = list_ledgers(uri)
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "100")
    try:
        query = (
            spark.readStream.format("bkeeper").option("metadata", uri).option("log", "abort-src")
            .option("startingPosition", "earliest").option("maxEntriesPerSplit", 1000).load()
            .selectExpr("IF(CAST(payload AS STRING) = 'poison', NULL, payload) AS payload")
            .writeStream.format("bkeeper").option("metadata", uri).option("log", "abort-dst")
            .option("writerId", "aborted-stream")
            .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True)
            .start()
        )  # fmt: skip
        with pytest.raises(Exception) as caught:
            query.awaitTermination(120)
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert "bkeeper.common.errors.ConfigError: cannot write: the payload column has nulls" in str(
        caught.value
    ), str(caught.value)[:3000]
    assert read_log(uri, "abort-dst") == []
    tracker = spark.sparkContext.statusTracker()  # the query failed; its tasks may still end
    deadline = time.monotonic() + 60
    while tracker.getActiveStageIds() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not tracker.getActiveStageIds(), "the failed batch's tasks still run after 60 s"
    left = pending(uri, "aborted-stream")
    assert len(left) <= 1 and set(left.values()) <= {"abort-dst"}, left
    assert list_ledgers(uri) - before == set(left), "nothing but the late task's ledger"
    # The writer id's next batch (a new query, nothing to fail) cleans what a killed task
    # left, whichever way the first one went.
    append(uri, "abort-ok", [b"fine"])
    (
        spark.readStream.format("bkeeper").option("metadata", uri).option("log", "abort-ok")
        .option("startingPosition", "earliest").load().select("payload")
        .writeStream.format("bkeeper").option("metadata", uri).option("log", "abort-dst")
        .option("writerId", "aborted-stream")
        .option("checkpointLocation", str(tmp_path / "ck2")).trigger(availableNow=True)
        .start().awaitTermination(120)
    )  # fmt: skip
    assert read_log(uri, "abort-dst") == [b"fine"]
    assert pending(uri, "aborted-stream") == {}
    assert list_ledgers(uri) - before == set(log_ledgers(uri, "abort-dst")) | set(
        log_ledgers(uri, "abort-ok")
    )


def test_a_write_task_bounds_its_appends_in_flight(spark, spark_cluster):
    """One task writes more records than it keeps in flight (2,000) with at most 16 appends
    in flight per ledger (client.pending_adds_max): it waits for acknowledgements instead
    of holding more, and every record lands once, in order."""
    uri = spark_cluster.uri
    payloads = [b"flight-%05d" % i for i in range(4500)]
    frame = spark.createDataFrame([(p,) for p in payloads], "payload binary").coalesce(1)
    write(frame, uri, log="in-flight", **{"client.pending_adds_max": 16})
    assert read_log(uri, "in-flight") == payloads


def test_reading_fences_no_live_writer(spark, spark_cluster):
    """A read plans an open ledger up to its last add confirmed and reads it without
    recovery: the writer goes on appending, and a later read sees what it added."""
    from bkeeper.client.sync import LoopThread

    uri = spark_cluster.uri
    loop = LoopThread()
    try:
        bk = loop.call(BookKeeper(uri).start(), 30)
        try:
            logs = NamedLogs(bk)
            loop.call(logs.create("live"), 30)
            writer = loop.call(logs.log("live").open_writer(), 30)
            for i in range(10):
                loop.call(writer.append(b"live-%d" % i), 30)
            rows = source(spark, uri, log="live").orderBy("entry").collect()
            # Entry 9 is confirmed to readers by the next append (or the close).
            assert [r.payload for r in rows] == [b"live-%d" % i for i in range(9)]
            loop.call(writer.append(b"after the read"), 30)  # not fenced
            loop.call(writer.close(), 30)
        finally:
            loop.call(bk.close(), 30)
    finally:
        loop.stop()
    rows = source(spark, uri, log="live").orderBy("entry").collect()
    assert [r.payload for r in rows] == [b"live-%d" % i for i in range(10)] + [b"after the read"]


def test_a_stream_write_needs_a_checkpoint_location_or_writer_id(spark, spark_cluster, tmp_path):
    """Spark itself asks for a checkpoint location; with only the session's default one it
    does not pass the option, and bkeeper asks for it (or writerId) by name."""
    uri = spark_cluster.uri
    append(uri, "no-ck-src", [b"x"])
    spark.conf.set("spark.sql.streaming.checkpointLocation", str(tmp_path / "default"))
    try:
        with pytest.raises(Exception) as caught:
            (
                spark.readStream.format("bkeeper").option("metadata", uri)
                .option("log", "no-ck-src").load().select("payload")
                .writeStream.format("bkeeper").option("metadata", uri)
                .option("log", "no-ck-dst").trigger(availableNow=True).start()
                .awaitTermination(120)
            )  # fmt: skip
    finally:
        spark.conf.unset("spark.sql.streaming.checkpointLocation")
    assert first_line(caught.value).endswith(
        "bkeeper.common.errors.ConfigError: a streaming write to bkeeper needs the "
        "checkpointLocation option (or writerId): it identifies the query across restarts, "
        "for exactly-once commits"
    ), first_line(caught.value)
