"""The bkeeper data source in real Spark (local[2]) against real bookies: batch reads equal
what was appended, streams pick up appends, exactly-once streaming writes survive a replayed
batch, failOnDataLoss both ways, batch writes."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from bkeeper.client import BookKeeper
from bkeeper.namedlog import LogConfig, NamedLogs, Position


def run(coro_fn):
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro_fn()).result()


def append(
    uri: str,
    log: str,
    payloads: list[bytes],
    *,
    roll_bytes: int = 64 * 1024,
    keys: bool = False,
    close: bool = True,
) -> list[Position]:
    async def go():
        async with BookKeeper(uri) as bk:
            logs = NamedLogs(bk, LogConfig(roll_bytes=roll_bytes))
            named = logs.log(log)
            if log not in await logs.names():
                await logs.create(log)
            writer = await named.open_writer()
            futures = [
                await writer.append_async(p, key=(b"k%d" % i if keys else None))
                for i, p in enumerate(payloads)
            ]
            positions = [await f for f in futures]
            if close:
                await writer.close()
            return positions

    return run(go)


def truncate(uri: str, log: str, before: Position) -> int:
    async def go():
        async with BookKeeper(uri) as bk:
            return await NamedLogs(bk).log(log).truncate(before)

    return run(go)


def read_log(uri: str, log: str) -> list[bytes]:
    """Every record's payload, in log order, straight from the ledgers (entries of one record
    or record batches, as the sink writes them)."""
    return [payload for payload, _ in read_log_positions(uri, log)]


def read_log_positions(uri: str, log: str) -> list[tuple[bytes, Position]]:
    from bkeeper.namedlog.core import decode_entry
    from bkeeper.spark.log_view import LogView

    async def go():
        async with BookKeeper(uri) as bk:
            view = LogView(NamedLogs(bk))
            spans, _ = await view.spans(log, await view.earliest(log))
            out = []
            for span in spans:
                handle = await bk.open_ledger(span.ledger_id, b"", recovery=False)
                async for entry in handle.read(span.first, span.last):
                    for record in decode_entry(entry.payload, span.ledger_id, entry.entry_id):
                        out.append((record.payload, record.position))
            return out

    return run(go)


def source(spark, uri, **options):
    reader = spark.read.format("bkeeper").option("metadata", uri)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_batch_read_equals_what_was_appended(spark, spark_cluster):
    uri = spark_cluster.uri
    payloads = [b"record-%05d-" % i + bytes([i % 256]) * (i % 50) for i in range(3000)]
    positions = append(uri, "batch", payloads, keys=True)
    assert len({p.ledger_id for p in positions}) > 1, "the log spans several ledgers"
    df = source(spark, uri, log="batch", maxEntriesPerSplit=700)
    assert df.rdd.getNumPartitions() >= 5
    rows = df.orderBy("ledger", "entry").collect()
    assert len(rows) == 3000
    assert [r.payload for r in rows] == payloads
    assert [Position(r.ledger, r.entry) for r in rows] == positions
    assert [r.key for r in rows[:3]] == [b"k0", b"k1", b"k2"]
    assert {r.log for r in rows} == {"batch"}
    assert sum(len(r.payload) for r in rows) == sum(map(len, payloads))
    assert rows[0].timestamp.year >= 2024
    # Exact positions and a second log through logPattern.
    append(uri, "batch2", [b"other-%d" % i for i in range(10)])
    start, end = positions[100], positions[200]
    part = source(
        spark,
        uri,
        logPattern="batch.*",
        startingPosition=json.dumps(
            {"batch": {"ledger": start.ledger_id, "entry": start.entry_id}}
        ),
        endingPosition=json.dumps({"batch": {"ledger": end.ledger_id, "entry": end.entry_id}}),
    )
    counts = {r["log"]: r["count"] for r in part.groupBy("log").count().collect()}
    assert counts == {"batch": 100, "batch2": 10}
    # Timestamps are the writer's clock in ms; startingTimestamp starts at the first record
    # appended at or after it (and wins over startingPosition).
    times = [r.timestamp for r in rows]
    assert all(t.microsecond % 1000 == 0 for t in times)
    assert times == sorted(times)
    middle = times[1234]
    first_at = times.index(middle)
    from_time = source(
        spark, uri, log="batch", startingPosition=json.dumps({"batch": "latest"}),
        startingTimestamp=str(int(middle.timestamp() * 1000)),
    ).orderBy("ledger", "entry").collect()  # fmt: skip
    assert [Position(r.ledger, r.entry) for r in from_time] == positions[first_at:]
    # A timestamp after everything: nothing; SQL over the data source works too.
    assert (
        source(
            spark, uri, log="batch", startingTimestamp=str(int(time.time() * 1000) + 60_000)
        ).count()
        == 0
    )
    spark.sql(
        f"CREATE OR REPLACE TEMPORARY VIEW b USING bkeeper OPTIONS (metadata '{uri}', log 'batch')"
    )
    assert spark.sql("SELECT count(*) AS n, sum(length(payload)) AS bytes FROM b").first().n == 3000


def test_bad_options_fail_with_a_clear_error(spark, spark_cluster):
    with pytest.raises(Exception, match="exactly one of the options log"):
        source(spark, spark_cluster.uri).count()
    with pytest.raises(Exception, match="log 'missing' does not exist"):
        source(spark, spark_cluster.uri, log="missing").count()


def test_fail_on_data_loss_both_ways(spark, spark_cluster):
    uri = spark_cluster.uri
    positions = append(uri, "lossy", [b"x%04d" % i for i in range(1500)], roll_bytes=2000)
    first = positions[0]
    cut = positions[1000]
    assert truncate(uri, "lossy", Position(cut.ledger_id, 0)) > 0
    start = json.dumps({"lossy": {"ledger": first.ledger_id, "entry": 0}})
    with pytest.raises(Exception) as caught:
        source(spark, uri, log="lossy", startingPosition=start).count()
    assert (
        str(caught.value)
        .splitlines()[0]
        .endswith(
            f"bkeeper.common.errors.LogTruncatedError: log 'lossy': records from {first} up to "
            f"{cut.ledger_id}:0 are gone (truncated or deleted) before they were read; set "
            "failOnDataLoss=false to skip them and go on"
        )
    ), str(caught.value)[:2000]
    rows = source(spark, uri, log="lossy", startingPosition=start, failOnDataLoss="false")
    kept = [p for p in positions if p.ledger_id >= cut.ledger_id]
    assert sorted(Position(r.ledger, r.entry) for r in rows.collect()) == kept


def test_stream_picks_up_new_appends(spark, spark_cluster, tmp_path):
    uri = spark_cluster.uri
    append(uri, "tail", [b"before-%d" % i for i in range(100)])
    stream = (
        spark.readStream.format("bkeeper")
        .option("metadata", uri)
        .option("log", "tail")
        .option("startingPosition", "earliest")
        .load()
    )
    query = (
        stream.writeStream.format("memory")
        .queryName("tailed")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(processingTime="300 milliseconds")
        .start()
    )
    try:
        deadline = time.monotonic() + 60
        while spark.table("tailed").count() < 100 and time.monotonic() < deadline:
            time.sleep(0.3)
        assert spark.table("tailed").count() == 100
        append(uri, "tail", [b"after-%d" % i for i in range(250)], close=False)
        append(uri, "tail", [b"last-%d" % i for i in range(5)])  # fences and seals the one before
        while spark.table("tailed").count() < 355 and time.monotonic() < deadline:
            time.sleep(0.3)
        payloads = [r.payload for r in spark.table("tailed").orderBy("ledger", "entry").collect()]
        assert payloads == (
            [b"before-%d" % i for i in range(100)]
            + [b"after-%d" % i for i in range(250)]
            + [b"last-%d" % i for i in range(5)]
        )
        progress = query.lastProgress
        latest = progress["sources"][0]["latestOffset"]
        latest = json.loads(latest) if isinstance(latest, str) else latest
        end = progress["sources"][0]["endOffset"]
        end = json.loads(end) if isinstance(end, str) else end
        # everything was read: the head reported is exactly where the stream stands
        assert set(latest) == {"tail"} and latest == end, (latest, end)
    finally:
        query.stop()


def copy_stream(spark, uri, checkpoint: Path):
    return (
        spark.readStream.format("bkeeper")
        .option("metadata", uri)
        .option("log", "src")
        .option("startingPosition", "earliest")
        .option("maxEntriesPerTrigger", 300)
        .load()
        .select("payload", "key")
        .writeStream.format("bkeeper")
        .option("metadata", uri)
        .option("log", "dst")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )


def test_exactly_once_streaming_write_survives_a_replayed_batch(spark, spark_cluster, tmp_path):
    uri = spark_cluster.uri
    payloads = [b"copy-%05d" % i for i in range(1000)]
    append(uri, "src", payloads)
    checkpoint = tmp_path / "copy"
    query = copy_stream(spark, uri, checkpoint)
    query.awaitTermination(120)
    assert query.exception() is None
    batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert batches == [300, 300, 300, 100], "maxEntriesPerTrigger splits AvailableNow"
    assert sorted(read_log(uri, "dst")) == payloads
    # Crash between the sink's commit and the checkpoint's commit: the commit log lacks the
    # last batch, so a restart replays it against a log that already holds it.
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    (checkpoint / "commits" / str(last)).unlink()
    for crc in (checkpoint / "commits").glob(f".{last}.crc"):
        crc.unlink()
    query = copy_stream(spark, uri, checkpoint)
    query.awaitTermination(120)
    assert query.exception() is None
    replayed = [p["batchId"] for p in query.recentProgress if p["numInputRows"]]
    assert replayed == [last], "Spark replayed the uncommitted batch"
    copied = read_log(uri, "dst")
    assert len(copied) == 1000 and sorted(copied) == payloads, "no duplicate, no gap"
    # New source records continue without a gap.
    append(uri, "src", [b"copy-more-%d" % i for i in range(50)])
    query = copy_stream(spark, uri, checkpoint)
    query.awaitTermination(120)
    copied = read_log(uri, "dst")
    assert sorted(copied) == sorted(payloads + [b"copy-more-%d" % i for i in range(50)])


def test_batch_write_appends_whole(spark, spark_cluster):
    uri = spark_cluster.uri
    rows = [(b"w%d" % i, b"k%d" % (i % 3)) for i in range(500)]
    df = spark.createDataFrame(rows, "payload binary, key binary").repartition(3)
    df.write.format("bkeeper").option("metadata", uri).option("log", "written").mode(
        "append"
    ).save()
    back = source(spark, uri, log="written").collect()
    assert sorted((r.payload, r.key) for r in back) == sorted(rows)
    with pytest.raises(Exception, match="append-only"):
        df.write.format("bkeeper").option("metadata", uri).option("log", "written").mode(
            "overwrite"
        ).save()
    # A log column routes rows; strings are written as UTF-8.
    mixed = spark.createDataFrame(
        [("a1", "wa"), ("b1", "wb"), ("a2", "wa")], "payload string, log string"
    )
    mixed.write.format("bkeeper").option("metadata", uri).mode("append").save()
    assert sorted(read_log(uri, "wa")) == [b"a1", b"a2"] and read_log(uri, "wb") == [b"b1"]
    # Other columns are refused, naming them.
    extra = spark.createDataFrame([(b"x", 1)], "payload binary, extra int")
    with pytest.raises(Exception) as caught:
        extra.write.format("bkeeper").option("metadata", uri).option("log", "wa").mode(
            "append"
        ).save()
    assert (
        str(caught.value)
        .splitlines()[0]
        .endswith(
            "ConfigError: cannot write columns ['payload', 'extra']: a bkeeper log takes payload "
            "(required), key, log and properties"
        )
    ), str(caught.value)[:2000]


def _example(name: str):
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "examples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"example_{name}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_examples_dice_stats_and_stream_copy(spark, spark_cluster, tmp_path):
    uri = spark_cluster.uri
    values = [1 + (i * 7) % 6 for i in range(600)]
    append(uri, "dice", [b"%d" % v for v in values])
    stats = _example("dice_stats").dice_stats(spark, uri, "dice")
    assert stats == [(v, values.count(v)) for v in range(1, 7)]
    queries = _example("stream_copy").start_copies(
        spark,
        uri,
        "dice",
        "dice-copy",
        str(tmp_path / "parquet"),
        str(tmp_path / "ck"),
        available_now=True,
    )
    for query in queries:
        query.awaitTermination(120)
        assert query.exception() is None
    parquet = spark.read.parquet(str(tmp_path / "parquet"))
    assert sorted(r.payload for r in parquet.collect()) == sorted(b"%d" % v for v in values)
    assert sorted(read_log(uri, "dice-copy")) == sorted(b"%d" % v for v in values)


def list_ledgers(uri: str) -> set[int]:
    async def go():
        async with BookKeeper(uri) as bk:
            return {i async for i in bk.list_ledgers()}

    return run(go)


def ledgers_in_logs(uri: str) -> set[int]:
    """The ledgers that the cluster's named logs hold."""

    async def go() -> set[int]:
        async with BookKeeper(uri) as bk:
            logs = NamedLogs(bk)
            found: set[int] = set()
            for name in await logs.names():
                found |= {x.ledger_id for x in (await logs.log(name).metadata()).ledgers}
            return found

    return run(go)


def test_a_failed_write_leaves_nothing_behind(spark, spark_cluster):
    uri = spark_cluster.uri
    append(uri, "atomic", [b"kept"])
    before = list_ledgers(uri)
    rows = [(b"ok-%d" % i,) for i in range(300)] + [(None,)]
    df = (
        spark.createDataFrame(rows, "payload binary")
        .coalesce(1)
        .union(spark.createDataFrame([(b"other-%d" % i,) for i in range(300)], "payload binary"))
    )
    with pytest.raises(Exception, match="payload column has nulls"):
        df.write.format("bkeeper").option("metadata", uri).option("log", "atomic").mode(
            "append"
        ).save()
    assert read_log(uri, "atomic") == [b"kept"], "readers never see part of a failed write"
    deadline = time.monotonic() + 10
    while list_ledgers(uri) != before and time.monotonic() < deadline:
        time.sleep(0.2)
    after = list_ledgers(uri)
    assert after == before, f"ledgers left: {after - before}, gone: {before - after}"


def test_a_write_whose_log_is_deleted_meanwhile_fails_naming_it(spark, spark_cluster):
    """The log is deleted by the write's own task before it writes (after the driver found
    the log): the commit fails with the delete as the first line, appends nothing, and the
    write's ledgers are deleted (issue 36; before, "no log named ...")."""
    uri = spark_cluster.uri
    positions = append(uri, "deleted-meanwhile", [b"before"])
    before = list_ledgers(uri)

    def delete_the_log_first(payload: bytes, done: list[bool] = []) -> bytes:  # noqa: B006
        if not done:  # the task's first row
            import asyncio

            from bkeeper.client import BookKeeper
            from bkeeper.namedlog import NamedLogs

            async def delete() -> None:
                async with BookKeeper(uri) as bk:
                    await NamedLogs(bk).delete("deleted-meanwhile")

            asyncio.run(delete())
            done.append(True)
        return payload

    from pyspark.sql.functions import col, udf

    rows = spark.createDataFrame([(b"r%d" % i,) for i in range(100)], "payload binary")
    deleting = udf(delete_the_log_first, "binary", useArrow=False)
    df = rows.coalesce(1).select(deleting(col("payload")).alias("payload"))
    with pytest.raises(Exception) as caught:
        df.write.format("bkeeper").option("metadata", uri).option("log", "deleted-meanwhile").mode(
            "append"
        ).save()
    assert (
        str(caught.value)
        .splitlines()[0]
        .endswith(
            "LogDeletedError: log 'deleted-meanwhile' was deleted while this write ran: none of "
            "the write's records were appended to it (Spark's abort deletes the ledgers they "
            "were written to)"
        )
    ), str(caught.value)[:2000]
    expected = before - {position.ledger_id for position in positions}
    deadline = time.monotonic() + 10
    while list_ledgers(uri) != expected and time.monotonic() < deadline:
        time.sleep(0.2)
    after = list_ledgers(uri)
    assert after == expected, f"ledgers left: {after - expected}, gone: {expected - after}"


def test_stream_fails_on_data_loss_unless_told_not_to(spark, spark_cluster, tmp_path):
    """A new stream told to start before a truncation: it fails naming the gap, or with
    failOnDataLoss=false skips it. (A stream restarted from a checkpoint that a truncation
    passed: tests/spark/test_data_loss.py.)"""
    uri = spark_cluster.uri
    positions = append(uri, "lossy-stream", [b"s%04d" % i for i in range(600)], roll_bytes=1500)

    def start(name: str, fail: str):
        before_the_cut = {"lossy-stream": {"ledger": positions[0].ledger_id, "entry": 0}}
        return (
            spark.readStream.format("bkeeper")
            .option("metadata", uri)
            .option("log", "lossy-stream")
            .option("startingPosition", json.dumps(before_the_cut))
            .option("maxEntriesPerTrigger", 100)
            .option("failOnDataLoss", fail)
            .load()
            .writeStream.format("memory")
            .queryName(name)
            .option("checkpointLocation", str(tmp_path / name))
            .trigger(availableNow=True)
            .start()
        )

    first = start("loss_before", "true")
    first.awaitTermination(120)
    assert spark.table("loss_before").count() == 600
    cut = Position(positions[400].ledger_id, 0)
    truncate(uri, "lossy-stream", cut)
    append(uri, "lossy-stream", [b"new-%d" % i for i in range(5)])
    strict = start("loss_strict", "true")
    with pytest.raises(Exception) as caught:
        strict.awaitTermination(120)
    assert (
        f"log 'lossy-stream': records from {positions[0]} up to {cut} are gone (truncated or "
        "deleted) before they were read; set failOnDataLoss=false to skip them and go on"
    ) in str(caught.value).splitlines()[0]
    lenient = start("loss_lenient", "false")
    lenient.awaitTermination(120)
    assert lenient.exception() is None
    rows = spark.table("loss_lenient").orderBy("ledger", "entry").collect()
    kept = [p for p in positions if p >= cut]
    assert [Position(r.ledger, r.entry) for r in rows][: len(kept)] == kept
    assert [r.payload for r in rows] == [
        b"s%04d" % i for i in range(600) if positions[i] >= cut
    ] + [b"new-%d" % i for i in range(5)]


def test_filter_pushdown_prunes_ledgers(spark, spark_cluster):
    uri = spark_cluster.uri
    positions = append(uri, "pushed", [b"p%04d" % i for i in range(1200)], roll_bytes=3000)
    ledgers = sorted({p.ledger_id for p in positions})
    assert len(ledgers) >= 4
    with pytest.raises(Exception) as caught:  # Spark's own setting is off by default
        source(spark, uri, log="pushed", filterPushdown="true").count()
    assert (
        "[DATA_SOURCE_PUSHDOWN_DISABLED] PushdownBatchReader implements pushFilters() but filter "
        "pushdown is disabled because configuration 'spark.sql.python.filterPushdown.enabled' is "
        "false."
    ) in str(caught.value)
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        df = source(spark, uri, log="pushed", filterPushdown="true", maxEntriesPerSplit=100)
        everything = df.rdd.getNumPartitions()
        pruned = df.where(f"ledger >= {ledgers[-2]} AND entry < 10")
        expected = [p for p in positions if p.ledger_id >= ledgers[-2] and p.entry_id < 10]
        assert pruned.rdd.getNumPartitions() < everything
        rows = pruned.orderBy("ledger", "entry").collect()
        assert [Position(r.ledger, r.entry) for r in rows] == expected
        assert df.where("log = 'other'").count() == 0
    finally:
        spark.conf.unset("spark.sql.python.filterPushdown.enabled")  # unset, as it was


def test_batch_write_makes_ledgers_with_the_logs_stored_replication(spark, spark_cluster):
    """A log created with its own ensemble and quorums (``bkeeper log create -e 2 ...``) gets
    ledgers of that shape from Spark's write tasks too, not the job's ``ensembleSize`` 3."""
    from dataclasses import replace

    uri = spark_cluster.uri

    async def create() -> None:
        async with BookKeeper(uri) as bk:
            named = await NamedLogs(bk).create("shaped")
            await named.configure(
                lambda s: replace(s, ensemble_size=2, write_quorum=2, ack_quorum=1)
            )

    run(create)
    df = spark.createDataFrame([(b"s%d" % i,) for i in range(20)], "payload binary")
    df.write.format("bkeeper").option("metadata", uri).option("log", "shaped").mode("append").save()

    async def shapes() -> list[tuple[int, int, int]]:
        async with BookKeeper(uri) as bk:
            meta = await NamedLogs(bk).log("shaped").metadata()
            out = []
            for ledger in meta.ledgers:
                handle = await bk.open_ledger(ledger.ledger_id, b"", recovery=False)
                m = handle.metadata
                out.append((m.ensemble_size, m.write_quorum, m.ack_quorum))
                await handle.close()
            return out

    found = run(shapes)
    assert found and set(found) == {(2, 2, 1)}, found
    assert sorted(read_log(uri, "shaped")) == sorted(b"s%d" % i for i in range(20))
