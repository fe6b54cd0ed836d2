"""Records, not entries: ``maxRecordsPerTrigger`` cuts inside record batches,
``minRecordsPerTrigger`` counts only as far as it needs, ``minPartitions`` splits spans, and
lag counts records and time (issue 38). Planning on the in-memory cluster; the Spark tests at
the end run real streams on the ``spark_cluster`` fixture."""

from __future__ import annotations

import json
import time

import pytest

from bkeeper.client.config import ClientConfig
from bkeeper.common.errors import ConfigError
from bkeeper.namedlog import LogConfig, NamedLogs, Position
from bkeeper.namedlog.core import (
    encode_batch,
    encode_chunks,
    encode_record,
    entry_first_timestamp,
    entry_record_count,
)
from bkeeper.spark.lag import LagReport, measure
from bkeeper.spark.log_view import LogView
from bkeeper.spark.options import source_options
from bkeeper.spark.plan import (
    EntrySpan,
    at_least,
    partition_spans,
    share_records,
    spans_before,
    spans_from,
)
from bkeeper.spark.planner import count_records, move
from bkeeper.testing.cluster import MemoryCluster

FAST = ClientConfig(long_poll_timeout_ms=200)
BATCHED = LogConfig(batching=True, batch_max_records=7, roll_bytes=2_000)
URI = "memory://x/ledgers"


def _stream(**extra: str):
    return source_options({"metadata": URI, "log": "a,b", **extra}, streaming=True)


async def _batched_log(logs: NamedLogs, name: str, count: int, per_call: int = 7) -> list[Position]:
    """A log of ``count`` records in batches of 7 (append_many sends its last batch at once),
    rolled over a few ledgers."""
    named = await logs.create(name)
    writer = await named.open_writer()
    positions: list[Position] = []
    for start in range(0, count, per_call):
        size = min(per_call, count - start)
        positions += await writer.append_many([b"r%05d" % i for i in range(start, start + size)])
    await writer.close()
    return positions


def _between(positions: list[Position], start: Position, end: Position) -> list[Position]:
    return [p for p in positions if start <= p < end]


def test_header_only_counts_and_timestamps():
    one = encode_record(b"x", 1_000)
    batch = encode_batch([encode_record(b"a", 5), encode_record(b"bb", 6), one])
    assert entry_record_count(one, 1, 0) == 1
    assert entry_record_count(batch, 1, 0) == 3
    assert entry_first_timestamp(one, 1, 0) == 1_000
    assert [entry_first_timestamp(batch, 1, 0, i) for i in range(4)] == [5, 6, 1_000, None]
    chunks = encode_chunks(encode_record(b"z" * 200_000, 77), 64 * 1024)
    assert [entry_record_count(c, 1, i) for i, c in enumerate(chunks)] == [0, 0, 0, 1]
    assert [entry_first_timestamp(c, 1, i) for i, c in enumerate(chunks)] == [77, None, None, None]


def test_cutting_spans_at_record_positions():
    spans = [EntrySpan("a", 3, 0, 4), EntrySpan("a", 5, 0, 9, first_index=0, end_index=0)]
    assert spans_before(spans, Position(5, 2, 3)) == [
        EntrySpan("a", 3, 0, 4),
        EntrySpan("a", 5, 0, 2, end_index=3),
    ]
    assert spans_from(spans, Position(5, 2, 3)) == [EntrySpan("a", 5, 2, 9, first_index=3)]
    assert spans_before(spans, Position(5, 0)) == [EntrySpan("a", 3, 0, 4)]
    assert spans_from(spans, Position(3, 5)) == [spans[1]]
    assert spans_from(spans, Position(3, 4, 1)) == [
        EntrySpan("a", 3, 4, 4, first_index=1),
        spans[1],
    ]
    # A piece of one entry: from record 3 up to record 5 of entry 4.
    inner = spans_from(spans_before(spans, Position(3, 4, 5)), Position(3, 4, 3))
    assert inner == [EntrySpan("a", 3, 4, 4, first_index=3, end_index=5)]


def test_record_shares_follow_the_backlog_and_give_every_busy_log_one():
    assert share_records({"a": 30, "b": 10, "c": 0}, 100) == {"a": 75, "b": 25, "c": 0}
    assert sum(share_records({"a": 3, "b": 3, "c": 1}, 10).values()) == 10
    assert share_records({"a": 3, "b": 3, "c": 1}, 2) == {"a": 1, "b": 1, "c": 0}


def test_min_partitions_split_the_largest_until_there_are_enough():
    one = [(EntrySpan("a", 1, 0, 9, first_index=2, end_index=4),)]
    groups = at_least(one, 4)
    assert len(groups) == 4
    covered = [(s.ledger_id, e) for g in groups for s in g for e in range(s.first, s.last + 1)]
    assert covered == [(1, e) for e in range(10)], "every entry once, in order"
    assert groups[0][0].first_index == 2 and groups[-1][-1].end_index == 4
    assert all(s.first_index == 0 for g in groups[1:] for s in g)
    assert max(sum(s.count for s in g) for g in groups) == 3
    # Never more partitions than entries; enough already: unchanged.
    assert len(at_least([(EntrySpan("a", 1, 0, 2),)], 8)) == 3
    packed = partition_spans([EntrySpan("a", 1, 0, 2), EntrySpan("b", 2, 0, 2)], 100)
    assert len(packed) == 1 and len(at_least(packed, 2)) == 2
    assert at_least(packed, None) == packed


def test_record_options_are_checked():
    base = {"metadata": URI, "log": "a"}
    opts = source_options({**base, "maxRecordsPerTrigger": "100", "minRecordsPerTrigger": "10",
                           "minPartitions": "4"}, streaming=True)  # fmt: skip
    assert (opts.max_records_per_trigger, opts.min_records_per_trigger) == (100, 10)
    assert opts.min_partitions == 4
    assert source_options({**base, "minPartitions": "4"}, streaming=False).min_partitions == 4
    for kind in ("max", "min"):
        both = {**base, f"{kind}RecordsPerTrigger": "5", f"{kind}EntriesPerTrigger": "5"}
        with pytest.raises(ConfigError, match=f"options {kind}EntriesPerTrigger and {kind}Rec"):
            source_options(both, streaming=True)
    with pytest.raises(ConfigError, match=r"minRecordsPerTrigger \(10\) exceeds maxRecords"):
        source_options({**base, "maxRecordsPerTrigger": "5", "minRecordsPerTrigger": "10"},
                       streaming=True)  # fmt: skip
    with pytest.raises(ConfigError, match="maxRecordsPerTrigger is for streaming reads only"):
        source_options({**base, "maxRecordsPerTrigger": "5"}, streaming=False)
    with pytest.raises(ConfigError, match="minPartitions: must be a positive integer"):
        source_options({**base, "minPartitions": "0"}, streaming=False)
    with pytest.raises(ConfigError, match="minPartitions: at most 100000, got 100001"):
        source_options({**base, "minPartitions": "100001"}, streaming=False)


async def test_max_records_cut_batches_exactly_and_resume_mid_entry():
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST), BATCHED)
        positions = await _batched_log(logs, "a", 100)
        assert len({p.ledger_id for p in positions}) > 1, "the log rolled"
        view = LogView(logs)
        stream = source_options({"metadata": URI, "log": "a"}, streaming=True)
        start = {"a": positions[0]}
        seen: list[Position] = []
        sizes = []
        while True:
            found = await move(view, stream, start, max_records=10)
            if not found.records:
                break
            batch = _between(positions, start["a"], found.ends["a"])
            assert found.records == len(batch)
            sizes.append(len(batch))
            seen += batch
            start = found.ends
        assert sizes == [10] * 10, "exactly 10 records per batch, cut inside 7-record batches"
        assert seen == positions, "no record twice, none missed"
        cut = await move(view, stream, {"a": positions[0]}, max_records=10)
        assert cut.ends["a"] == Position(positions[0].ledger_id, 1, 3)
        assert cut.spans[-1].end_index == 3


async def test_max_records_are_shared_and_a_short_log_leaves_its_rest_to_the_others():
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST), BATCHED)
        a = await _batched_log(logs, "a", 70)  # 10 entries of 7 records
        b = await _batched_log(logs, "b", 5, per_call=1)  # 5 entries of 1 record
        view = LogView(logs)
        start = {"a": a[0], "b": b[0]}
        found = await move(view, _stream(), start, max_records=30)
        assert found.records == 30
        got_a = _between(a, a[0], found.ends["a"])
        got_b = _between(b, b[0], found.ends["b"])
        assert len(got_b) == 5 and len(got_a) == 25, "b's share beyond its 5 went to a"
        assert found.ends["b"] == found.heads["b"]
        # Fewer waiting than the limit: all of them, ends at the heads.
        everything = await move(view, _stream(), start, max_records=1_000)
        assert everything.records == 75 and everything.ends == everything.heads


async def test_min_records_count_only_up_to_the_minimum():
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST), BATCHED)
        a = await _batched_log(logs, "a", 70)
        view = LogView(logs)
        found = await move(view, _stream(), {"a": a[0]})
        scan = await view.scan(found.spans, records_max=9)
        assert scan.records == 9 and scan.entries == 2, "two entries read of ten"
        assert await count_records(view, found.spans, 1_000) == 70


async def test_lag_counts_records_exactly_or_estimates_and_says_so():
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST), BATCHED)
        a = await _batched_log(logs, "a", 70)
        view = LogView(logs)
        now = 10_000_000_000_000
        exact = (await measure(view, {"a": a[3]}, now_ms=now))["a"]
        assert (exact.records_behind, exact.records_exact, exact.entries_behind) == (67, True, 10)
        assert exact.oldest_unread_ms is not None and 0 < exact.oldest_unread_ms < now
        assert exact.time_behind_ms == now - exact.oldest_unread_ms
        rough = (await measure(view, {"a": a[3]}, now_ms=now, exact_entries_max=3))["a"]
        assert not rough.records_exact and rough.records_text.startswith("~")
        assert rough.records_behind == 4 + 7 + 7 + round(18 / 3 * 7)
        report = LagReport(2, {"a": rough, "b": exact})
        assert report.records_behind_total == rough.records_behind + 67
        assert "records behind (estimated)" in report.summary()
        assert report.to_json()["records_behind"]["records"] == "estimated"
        none = (await measure(view, {"a": exact.head}))["a"]
        assert (none.records_behind, none.time_behind_ms, none.oldest_unread_ms) == (0, 0, None)


# -- in Spark (local[2]) against real bookies -----------------------------------------------


def _frame(spark, payloads: list[bytes]):
    return spark.createDataFrame([(p,) for p in payloads], "payload binary").coalesce(1)


def test_max_records_per_trigger_gives_exactly_that_many_and_a_restart_mid_entry_is_exact(
    spark, spark_cluster, tmp_path
):
    """maxRecordsPerTrigger=100 on a log of 137-record batches: every batch holds exactly
    100 records (Trigger.AvailableNow honours it too), and a query stopped and restarted from
    its checkpoint, whose offsets end inside a batch entry, reads every record once."""
    from tests.spark.test_spark_options import write

    uri = spark_cluster.uri
    payloads = [b"m%05d" % i for i in range(1_000)]
    write(_frame(spark, payloads), uri, log="by-records", batchMaxRecords=137)
    batches: dict[int, list[bytes]] = {}

    def keep(frame, batch_id: int) -> None:  # a replayed batch replaces its first run
        batches[batch_id] = [r.payload for r in frame.select("payload").collect()]

    def start(trigger: dict):
        return (
            spark.readStream.format("bkeeper")
            .option("metadata", uri)
            .option("log", "by-records")
            .option("startingPosition", "earliest")
            .option("maxRecordsPerTrigger", 100)
            .load()
            .writeStream.foreachBatch(keep)
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(**trigger)
            .start()
        )

    query = start({"processingTime": "0 seconds"})
    try:
        deadline = time.monotonic() + 120
        while len(batches) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        query.stop()
    assert 3 <= len(batches) < 10, "stopped part of the way"
    # (a write the stop interrupted can leave a ``.<batch>.<uuid>.tmp`` file beside them)
    offsets = [p for p in (tmp_path / "ck" / "offsets").iterdir() if p.name.isdigit()]
    offsets.sort(key=lambda p: int(p.name))
    last = json.loads(offsets[-1].read_text().splitlines()[-1])["by-records"]
    assert last.get("index"), f"the checkpoint ends inside a batch entry: {last}"
    query = start({"availableNow": True})
    try:
        assert query.awaitTermination(120)
    finally:
        query.stop()
    sizes = [len(batches[b]) for b in sorted(batches)]
    assert sizes == [100] * 10, sizes
    read = [p for b in sorted(batches) for p in batches[b]]
    assert sorted(read) == payloads and len(read) == len(set(read)), "no duplicate, none missed"


def test_min_records_per_trigger_waits_for_records_then_for_the_delay(spark_cluster, monkeypatch):
    """minRecordsPerTrigger counts records, not entries: one 50-record entry is enough for
    a minimum of 40 and 30 single-record entries are not; after maxTriggerDelay a trigger
    reads what there is."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from bkeeper.spark.source import StreamReader
    from bkeeper.testing.clock import FakeClock
    from tests.spark.test_spark import append

    uri = spark_cluster.uri
    append(uri, "min-singles", [b"s%d" % i for i in range(30)])
    clock = FakeClock()
    options = {"metadata": uri, "startingPosition": "earliest", "minRecordsPerTrigger": "40",
               "maxTriggerDelay": "1m", "minPartitions": "3"}  # fmt: skip
    singles = StreamReader(source_options({**options, "log": "min-singles"}, streaming=True),
                           clock=clock)  # fmt: skip
    start = singles.initialOffset()
    import bkeeper.spark.source as source_module

    counts = []
    counted = source_module.count_records

    def counting(*args):
        counts.append(args)
        return counted(*args)

    monkeypatch.setattr(source_module, "count_records", counting)
    assert singles.latestOffset(start, ReadAllAvailable()) == start, "30 records: wait"
    assert singles.latestOffset(start, ReadAllAvailable()) == start
    assert len(counts) == 1, "polled again with nothing new: not counted again"
    clock.advance(61)
    end = singles.latestOffset(start, ReadAllAvailable())
    assert end != start, "the delay is up: read the 30"
    assert len(singles.partitions(start, end)) == 3, "minPartitions in a stream's batch"

    async def one_batch() -> None:
        from bkeeper.client.bookkeeper import BookKeeper

        async with BookKeeper(uri) as bk:
            named = await NamedLogs(bk, LogConfig(batching=True)).create("min-batched")
            writer = await named.open_writer()
            await writer.append_many([b"b%d" % i for i in range(50)])
            await writer.close()

    from tests.spark.test_spark import run

    run(one_batch)
    batched = StreamReader(source_options({**options, "log": "min-batched"}, streaming=True),
                           clock=clock)  # fmt: skip
    start = batched.initialOffset()
    assert batched.latestOffset(start, ReadAllAvailable()) != start, "one entry, 50 records"


def test_min_partitions_splits_one_log_into_that_many_reads(spark, spark_cluster):
    from tests.spark.test_spark import append, source

    uri = spark_cluster.uri
    payloads = [b"p%04d" % i for i in range(200)]
    append(uri, "min-parts", payloads)
    frame = source(spark, uri, log="min-parts", minPartitions=4)
    assert frame.rdd.getNumPartitions() == 4
    rows = frame.collect()
    assert sorted(r.payload for r in rows) == payloads and len(rows) == 200
    assert source(spark, uri, log="min-parts").rdd.getNumPartitions() == 1


def test_lag_listener_and_the_command_count_records_and_time(
    spark, spark_cluster, tmp_path, caplog
):
    """The issue's case: a log of record batches far fewer entries than records; the
    listener and ``bkeeper log lag`` say records behind and the oldest unread one's age."""
    import logging

    from click.testing import CliRunner

    from bkeeper.cli.log import log as log_command
    from bkeeper.spark import LagListener
    from tests.spark.test_spark import run

    uri = spark_cluster.uri

    async def write(count: int) -> None:
        from bkeeper.client.bookkeeper import BookKeeper

        async with BookKeeper(uri) as bk:
            logs = NamedLogs(bk, LogConfig(batching=True, batch_max_records=10))
            named = logs.log("lag-records")
            if "lag-records" not in await logs.names():
                named = await logs.create("lag-records")
            writer = await named.open_writer()
            for start in range(0, count, 10):
                await writer.append_many([b"l%04d" % i for i in range(start, start + 10)])
            await writer.close()

    run(lambda: write(700))  # 70 entries of 10 records
    listener = LagListener(uri)
    spark.streams.addListener(listener)
    try:
        with caplog.at_level(logging.INFO, logger="bkeeper.spark.lag"):
            query = (
                spark.readStream.format("bkeeper")
                .option("metadata", uri)
                .option("log", "lag-records")
                .option("startingPosition", "earliest")
                .option("maxRecordsPerTrigger", 250)
                .load()
                .writeStream.format("noop")
                .option("checkpointLocation", str(tmp_path / "ck"))
                .trigger(availableNow=True)
                .start()
            )
            assert query.awaitTermination(120)
            deadline = time.monotonic() + 60
            while len(listener.reports) < 3 and time.monotonic() < deadline:
                time.sleep(0.05)
    finally:
        spark.streams.removeListener(listener)
    rows = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert rows == [250, 250, 200]
    print("\n".join(report.summary() for report in listener.reports))  # docs/spark.md's
    first = listener.reports[0]
    assert (first.records_behind_total, first.records_exact) == (450, True)
    assert first.entries_behind_total == 45
    assert 0 < first.time_behind_ms < 600_000
    assert listener.reports[-1].records_behind_total == 0
    assert any("450 records behind" in r.getMessage() for r in caplog.records)
    run(lambda: write(30))
    result = CliRunner().invoke(
        log_command, ["lag", "--metadata", uri, "--checkpoint", str(tmp_path / "ck"), "--json"]
    )
    assert result.exit_code == 0, result.output
    lag = json.loads(result.output)["logs"]["lag-records"]
    assert (lag["records_behind"], lag["records"], lag["entries_behind"]) == (30, "exact", 3)
    assert lag["time_behind_ms"] >= 0 and lag["oldest_unread_ms"] > 0
    table = CliRunner().invoke(
        log_command, ["lag", "--metadata", uri, "--checkpoint", str(tmp_path / "ck")]
    )
    print(table.output)
    assert "records behind" in table.output and "30 records behind" in table.output


async def test_a_record_limit_counts_a_large_record_once_at_its_last_chunk():
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST), LogConfig(chunk_bytes=64 * 1024))
        named = await logs.create("a")
        writer = await named.open_writer()
        positions = [await writer.append(b"s%d" % i) for i in range(3)]
        positions.append(await writer.append(b"L" * 200_000))  # 4 chunks, entries 3..6
        positions += [await writer.append(b"t%d" % i) for i in range(3)]
        await writer.close()
        ledger = positions[0].ledger_id
        assert positions[3] == Position(ledger, 6)
        view = LogView(logs)
        stream = source_options({"metadata": URI, "log": "a"}, streaming=True)
        three = await move(view, stream, {"a": positions[0]}, max_records=3)
        assert three.ends["a"] == Position(ledger, 3), "stops before the first chunk"
        four = await move(view, stream, three.ends, max_records=1)
        assert (four.records, four.ends["a"]) == (1, Position(ledger, 7))
        assert [(s.first, s.last) for s in four.spans] == [(3, 6)], "all its chunks"
        rest = await move(view, stream, four.ends, max_records=10)
        assert rest.records == 3 and rest.ends == rest.heads
