"""Records, not entries: ``maxRecordsPerTrigger`` cuts inside record batches,
``minRecordsPerTrigger`` counts only as far as it needs, ``minPartitions`` splits spans, and
lag counts records and time (issue 38). Planning on the in-memory cluster; the Spark tests at
the end run real streams on the ``spark_cluster`` fixture."""

from __future__ import annotations

import pytest

from bkeeper.client.config import ClientConfig
from bkeeper.common.errors import ConfigError
from bkeeper.namedlog import LogConfig, NamedLogs, Position
from bkeeper.namedlog.records import (
    encode_batch,
    encode_chunks,
    encode_record,
    entry_first_timestamp,
    entry_record_count,
)
from bkeeper.spark.lag import LagReport, measure
from bkeeper.spark.options import source_options
from bkeeper.spark.plan import (
    EntrySpan,
    LogView,
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
