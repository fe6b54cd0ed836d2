"""Planning Spark reads on the in-memory cluster: spans, splits, read limits, data loss, and
the exactly-once ledger append the sink relies on."""

from __future__ import annotations

import logging

import pytest

from bkeeper.client.config import ClientConfig
from bkeeper.common.errors import ConfigError, LogFencedError, LogTruncatedError
from bkeeper.namedlog import LATEST, LogConfig, NamedLogs, Position
from bkeeper.spark.log_view import LogView
from bkeeper.spark.options import source_options
from bkeeper.spark.plan import EntrySpan, limit_spans, partition_spans, split_spans
from bkeeper.spark.planner import advance, batch_spans, log_names, move, spans_between
from bkeeper.testing.cluster import MemoryCluster

#: Add and read timeouts as the client's defaults: nothing here fails a bookie, and a 500 ms
#: read timeout on a loaded CI machine made a recovery read "unknown" (cannot tell whether
#: entry 0 exists) once. A short long poll keeps a reader at the tail quick.
FAST = ClientConfig(long_poll_timeout_ms=200)
SMALL = LogConfig(roll_bytes=300)


def test_split_and_pack():
    spans = [
        EntrySpan("a", 1, 0, 9),
        EntrySpan("a", 2, 0, 1),
        EntrySpan("a", 3, 5, 5),
        EntrySpan("a", 4, 0, 24),
    ]
    assert split_spans(spans[:1], 4) == [
        EntrySpan("a", 1, 0, 3),
        EntrySpan("a", 1, 4, 7),
        EntrySpan("a", 1, 8, 9),
    ]
    groups = partition_spans(spans, 10)
    assert [sum(s.count for s in g) for g in groups] == [10, 2 + 1, 10, 10, 5]
    flat = [s for g in groups for s in g]
    # Every entry exactly once, in order.
    covered = [(s.ledger_id, e) for s in flat for e in range(s.first, s.last + 1)]
    expected = [(s.ledger_id, e) for s in spans for e in range(s.first, s.last + 1)]
    assert covered == expected


def test_limit_shares_by_backlog():
    spans = {"a": [EntrySpan("a", 1, 0, 899)], "b": [EntrySpan("b", 2, 0, 99)], "c": []}
    limited = limit_spans(spans, 100)
    assert sum(s.count for s in limited["a"]) == 90
    assert sum(s.count for s in limited["b"]) == 10
    assert limited["c"] == []
    # A tiny backlog still moves while the limit allows.
    limited = limit_spans({"a": [EntrySpan("a", 1, 0, 9999)], "b": [EntrySpan("b", 2, 0, 0)]}, 10)
    assert sum(s.count for s in limited["b"]) == 1
    assert sum(s.count for items in limited.values() for s in items) == 10
    assert limit_spans(spans, 10_000) == spans


async def _log_with_rolls(logs: NamedLogs, name: str, count: int) -> list[Position]:
    named = await logs.create(name)
    writer = await named.open_writer()
    positions = [await writer.append(b"record-%04d" % i) for i in range(count)]
    await writer.close()
    return positions


async def test_spans_cover_a_log_across_rolls_and_stop_at_an_open_ledger():
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST), SMALL)
        positions = await _log_with_rolls(logs, "a", 100)
        assert len({p.ledger_id for p in positions}) > 3, "rolls made several ledgers"
        view = LogView(logs)
        spans, after = await view.spans("a", await view.earliest("a"))
        covered = [Position(s.ledger_id, e) for s in spans for e in range(s.first, s.last + 1)]
        assert covered == positions
        assert after == Position(positions[-1].ledger_id, positions[-1].entry_id + 1)
        tail = after
        # From the middle to an exact end.
        spans, after = await view.spans("a", positions[10], positions[50])
        covered = [Position(s.ledger_id, e) for s in spans for e in range(s.first, s.last + 1)]
        assert covered == positions[10:50]
        assert after == positions[50]

        # An open ledger: spans end at its LAC, and the head moves as appends confirm.
        writer = await logs.log("a").open_writer()
        for i in range(5):
            await writer.append(b"more-%d" % i)
        spans, head = await view.spans("a", tail)
        assert spans and not spans[-1].sealed
        assert sum(s.count for s in spans) >= 4  # the last one's LAC may still be behind
        await writer.append(b"after planning")  # planning fenced nothing: the writer goes on
        await writer.close()
        spans, head2 = await view.spans("a", tail)
        assert sum(s.count for s in spans) == 6 and spans[-1].sealed
        assert head2 >= head


async def test_truncation_is_data_loss_both_ways(caplog):
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST), SMALL)
        positions = await _log_with_rolls(logs, "a", 60)
        view = LogView(logs)
        start = await view.earliest("a")
        cut = positions[40]
        await logs.log("a").truncate(Position(cut.ledger_id, 0))
        gone = (
            f"log 'a': records from {start} up to {cut.ledger_id}:0 are gone (truncated or "
            "deleted) before they were read"
        )
        with pytest.raises(LogTruncatedError) as caught:
            await view.spans("a", start)
        assert str(caught.value) == gone + "; set failOnDataLoss=false to skip them and go on"
        with caplog.at_level(logging.WARNING, logger="bkeeper.spark.plan"):
            spans, _ = await view.spans("a", start, fail_on_data_loss=False)
        warned = [r.getMessage() for r in caplog.records if r.name == "bkeeper.spark.plan"]
        assert warned == [gone + "; skipping them (failOnDataLoss=false)"]
        first = spans[0]
        assert Position(first.ledger_id, first.first) == Position(cut.ledger_id, 0)
        # A start at or after the truncation point is no loss: every record from there on.
        spans, _ = await view.spans("a", Position(cut.ledger_id, 0))
        planned = [Position(s.ledger_id, e) for s in spans for e in range(s.first, s.last + 1)]
        assert planned == [p for p in positions if p >= Position(cut.ledger_id, 0)]


async def test_planner_batch_and_stream_moves():
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST), SMALL)
        a = await _log_with_rolls(logs, "a", 80)
        b = await _log_with_rolls(logs, "b", 20)
        view = LogView(logs)
        options = source_options(
            {"metadata": "memory://x/ledgers", "logPattern": "[ab]"}, streaming=False
        )
        spans = await batch_spans(view, options)
        assert sum(s.count for s in spans) == 100
        stream = source_options(
            {
                "metadata": "memory://x/ledgers",
                "logPattern": "[ab]",
                "startingPosition": "earliest",
            },
            streaming=True,
        )
        start = {"a": Position(a[0].ledger_id, 0)}  # b appears later: starts at earliest
        ends, heads, covered = await advance(view, stream, start, max_entries=50)
        assert covered == 50
        between = await spans_between(view, stream, start, ends)
        assert sum(s.count for s in between) == 50
        assert {s.log for s in between} == {"a", "b"}
        ends2, _, covered2 = await advance(view, stream, ends, max_entries=50)
        assert covered2 == 50
        ends3, _, covered3 = await advance(view, stream, ends2, max_entries=50)
        assert covered3 == 0 and ends3 == ends2
        rest = await spans_between(view, stream, ends, ends2)
        got = [Position(s.ledger_id, e) for s in between + rest for e in range(s.first, s.last + 1)]
        assert sorted(got) == sorted(a + b)
        assert heads["a"] == Position(a[-1].ledger_id, a[-1].entry_id + 1)


async def test_append_ledgers_is_idempotent_per_writer_and_batch():
    async with MemoryCluster(3) as cluster:
        bk = await cluster.client(FAST)
        logs = NamedLogs(bk, SMALL)
        named = await logs.create("a")
        writer = await named.open_writer()
        await writer.append(b"from the log writer")

        async def task_ledger(*payloads: bytes) -> int:
            from bkeeper.namedlog import encode_record

            handle = await bk.create_ledger(3, 3, 2, password=b"")
            for p in payloads:
                await handle.append(encode_record(p, 1))
            await handle.close()
            return handle.ledger_id

        first = [await task_ledger(b"t0-a", b"t0-b"), await task_ledger(b"t1-a")]
        assert await named.append_ledgers(first, writer_id="q", batch_id=0)
        with pytest.raises(LogFencedError):
            await writer.append(b"fenced by the commit")
        replay = [await task_ledger(b"t0-a", b"t0-b"), await task_ledger(b"t1-a")]
        assert not await named.append_ledgers(replay, writer_id="q", batch_id=0)
        meta = await named.metadata()
        assert meta.last_batch("q") == 0
        assert [x.ledger_id for x in meta.ledgers][-2:] == first

        # A ledger older than the log's last one is copied, keeping ids increasing.
        old = await task_ledger(b"old")
        newer = await named.open_writer()
        await newer.append(b"x")
        await newer.close()
        assert await named.append_ledgers([old], writer_id="q", batch_id=1)
        meta = await named.metadata()
        assert meta.ledgers[-1].ledger_id > old
        reader = await named.open_reader()
        records = []
        while (record := await reader.next(1.0)) is not None:
            records.append(record.payload)
        await reader.close()
        assert records == [b"from the log writer", b"t0-a", b"t0-b", b"t1-a", b"x", b"old"]


async def test_pending_ledgers_clean_and_abort_marks():
    from bkeeper.namedlog import PendingLedgers

    async with MemoryCluster(3) as cluster:
        bk = await cluster.client(FAST)
        logs = NamedLogs(bk, SMALL)
        named = await logs.create("a")
        made = []
        for _ in range(3):
            handle = await bk.create_ledger(3, 3, 2, password=b"")
            await handle.close()
            made.append(handle.ledger_id)
        pending = PendingLedgers(bk.cluster.store, logs.store, "job-1")
        for ledger_id in made:
            await pending.add("a", ledger_id)
        await named.append_ledgers(made[:1])  # appended, then the job died before unregistering
        assert await pending.registered() == dict.fromkeys(made, "a")
        assert await pending.clean(bk.delete_ledger) == made[1:]
        assert await pending.registered() == {}
        remaining = {i async for i in bk.list_ledgers()}
        assert made[0] in remaining and not set(made[1:]) & remaining
        # An aborted one-off job keeps its mark; others are independent.
        await pending.mark_aborted()
        assert await pending.aborted()
        await pending.remove([])
        assert await pending.aborted(), "the mark outlives the clean"
        assert not await PendingLedgers(bk.cluster.store, logs.store, "job-2").aborted()


async def test_ended_job_marks_are_swept_once_stale():
    """A committed or aborted batch write's mark stays ENDED_MARK_KEPT_MS for its stragglers,
    then a later mark removes it: marks do not pile up one per write. A job still running
    (registered ledgers, no mark), a mark without a time (written before marks had one) and
    a fresh mark stay."""
    from bkeeper.namedlog import PendingLedgers
    from bkeeper.namedlog.stores.pending_ledgers import ENDED_MARK_KEPT_MS
    from bkeeper.testing.clock import FakeClock

    async with MemoryCluster(3) as cluster:
        bk = await cluster.client(FAST)
        logs = NamedLogs(bk, SMALL)
        clock = FakeClock()

        def job(name: str) -> PendingLedgers:
            return PendingLedgers(bk.cluster.store, logs.store, name, clock)

        await job("old-commit").mark_committed()
        await job("old-abort").mark_aborted()
        await job("running").add("a", 7)
        legacy = job("legacy")
        await bk.cluster.store.create(legacy.path, b"aborted", make_parents=True)
        root = legacy.path.rpartition("/")[0]
        clock.advance(ENDED_MARK_KEPT_MS / 1000 - 1)
        await job("recent").mark_committed()
        clock.advance(2)
        assert await job("old-commit").ended() and await job("old-abort").aborted()
        await job("new").mark_committed()
        left = set(await bk.cluster.store.children(root))
        assert left == {
            job(n).path.rpartition("/")[2] for n in ("running", "legacy", "recent", "new")
        }
        assert await job("legacy").aborted() and await job("recent").ended()
        assert await job("running").registered() == {7: "a"}


def test_bounds_from_filters_only_drop_rejected_entries():
    from bkeeper.spark.plan import Bounds

    spans = [EntrySpan("a", 1, 0, 99), EntrySpan("a", 2, 0, 99), EntrySpan("b", 3, 0, 9)]
    bounds = Bounds().restrict("ledger", ">=", 2).restrict("entry", "<", 50)
    assert bounds.narrow(spans) == [EntrySpan("a", 2, 0, 49), EntrySpan("b", 3, 0, 9)]
    bounds = Bounds().restrict("log", "in", ("b", "c")).restrict("log", "=", "b")
    assert bounds.narrow(spans) == [EntrySpan("b", 3, 0, 9)]
    assert Bounds().restrict("ledger", "=", 1).restrict("entry", "in", (5, 7)).narrow(spans) == [
        EntrySpan("a", 1, 5, 7)
    ]
    # Filters it cannot use change nothing.
    for column, op, value in [
        ("payload", "=", b"x"),
        ("ledger", "=", "2"),
        ("entry", "in", (1, "x")),
        ("ledger", "!=", 1),
        ("log", ">", "a"),
    ]:
        assert Bounds().restrict(column, op, value).narrow(spans) == spans
    assert Bounds().restrict("ledger", ">", 5).narrow(spans) == []


def test_a_log_remembers_its_last_1000_writers():
    from bkeeper.namedlog.core import COMMITS_MAX, LogMetadata, WriterCommit

    assert COMMITS_MAX == 1_000
    meta = LogMetadata(ctime_ms=0)
    for i in range(1_001):
        meta = meta.with_ledgers((), WriterCommit(f"w{i}", i, time_ms=i))
    assert len(meta.commits) == 1_000
    assert meta.last_batch("w0") is None, "the writer committed longest ago is forgotten"
    assert [meta.last_batch(f"w{i}") for i in (1, 500, 1_000)] == [1, 500, 1_000]
    meta = meta.with_ledgers((), WriterCommit("w1", 7, time_ms=2_000))  # w1 commits again
    meta = meta.with_ledgers((), WriterCommit("new", 0, time_ms=2_001))
    assert meta.last_batch("w1") == 7 and meta.last_batch("w2") is None


class _ManyLogs:
    """A planning view of a cluster with this many logs (a fake: only names() is used)."""

    def __init__(self, count: int) -> None:
        self.count = count

    async def names(self) -> list[str]:
        return [f"log-{i:05d}" for i in range(self.count)]


async def test_a_log_pattern_reads_at_most_10000_logs():
    options = source_options(
        {"metadata": "memory://x/ledgers", "logPattern": "log-.*"}, streaming=False
    )
    assert len(await log_names(_ManyLogs(10_000), options)) == 10_000  # type: ignore[arg-type]
    with pytest.raises(ConfigError) as caught:
        await log_names(_ManyLogs(10_001), options)  # type: ignore[arg-type]
    assert str(caught.value) == "logPattern 'log-.*' matches 10001 logs; at most 10000 per query"


async def test_latest_means_what_it_means_for_a_log_reader():
    """A stream starting at "latest" starts where a log reader opened at "latest" does: after
    every acknowledged record, though the bookies' LAC is one behind until the next append."""
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST), SMALL)
        named = await logs.create("a")
        writer = await named.open_writer()
        appended = [await writer.append(b"r%d" % i) for i in range(3)]
        reader = await named.open_reader(LATEST)
        after_last = Position(appended[-1].ledger_id, appended[-1].entry_id + 1)
        assert await reader.seek() == after_last
        assert await LogView(logs).latest("a") == after_last
        spans, head = await LogView(logs).spans("a", after_last)
        assert spans == [] and head == after_last, "nothing past the LAC is planned"
        await reader.close()
        await writer.close()


async def test_a_move_plans_the_batch_it_ends_and_a_tight_limit_skips_logs():
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST), SMALL)
        a = await _log_with_rolls(logs, "a", 30)
        b = await _log_with_rolls(logs, "b", 10)
        view = LogView(logs)
        stream = source_options(
            {"metadata": "memory://x/ledgers", "log": "a,b", "startingPosition": "earliest"},
            streaming=True,
        )
        start = {"a": Position(a[0].ledger_id, 0), "b": Position(b[0].ledger_id, 0)}
        found = await move(view, stream, start, max_entries=25)
        assert found.spans == await spans_between(view, stream, start, found.ends)
        assert found.covered == 25 == sum(s.count for s in found.spans)
        # Fewer entries than busy logs: one log gets nothing this time and keeps its start
        # (before, the move failed with an IndexError).
        one = await move(view, stream, start, max_entries=1)
        assert one.covered == 1
        assert one.ends["b"] == start["b"] and one.ends["a"] == Position(a[0].ledger_id, 1)


async def test_spans_start_and_end_inside_record_batches():
    """A position with an index plans whole entries for the walk and marks the first span's
    first_index and the last span's end_index; pieces of a split keep them at their ends."""
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST), LogConfig())
        positions = await _log_with_rolls(logs, "a", 10)
        ledger = positions[0].ledger_id
        view = LogView(logs)
        spans, after = await view.spans("a", Position(ledger, 2, 5), Position(ledger, 7, 3))
        assert spans == [EntrySpan("a", ledger, 2, 7, True, first_index=5, end_index=3)]
        assert after == Position(ledger, 7, 3)
        spans, after = await view.spans("a", Position(ledger, 4, 1), Position(ledger, 4, 2))
        assert spans == [EntrySpan("a", ledger, 4, 4, True, first_index=1, end_index=2)]
        spans, after = await view.spans("a", Position(ledger, 3, 2), Position(ledger, 6))
        assert spans == [EntrySpan("a", ledger, 3, 5, True, first_index=2)]
        assert after == Position(ledger, 6)
        # Past the head: nothing, and the position after stays at the start, not before it.
        spans, after = await view.spans("a", Position(ledger, 10, 4))
        assert spans == [] and after == Position(ledger, 10, 4)
    pieces = split_spans([EntrySpan("a", 1, 0, 9, True, first_index=3, end_index=2)], 4)
    assert [(p.first, p.last, p.first_index, p.end_index) for p in pieces] == [
        (0, 3, 3, 0),
        (4, 7, 0, 0),
        (8, 9, 0, 2),
    ]
    limited = limit_spans({"a": [EntrySpan("a", 1, 0, 9, True, first_index=3, end_index=2)]}, 5)
    assert limited["a"] == [EntrySpan("a", 1, 0, 4, True, first_index=3)]


async def test_splits_hold_about_max_bytes_per_split():
    """Entries may hold one record or a batch of many: splits are cut by bytes too, from
    each log's average entry size (one ledger of it, sealed or open)."""
    from bkeeper.spark.plan import entry_caps

    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST), LogConfig())
        await _log_with_rolls(logs, "a", 10)  # one sealed ledger of 10 entries of 21 bytes
        named = await logs.create("b")
        writer = await named.open_writer()
        for _ in range(4):
            await writer.append(b"x" * 90)  # 100 bytes with the head
        view = LogView(logs)
        spans = (await view.spans("a", await view.earliest("a")))[0]
        spans += (await view.spans("b", await view.earliest("b")))[0]
        sizes = await view.entry_bytes(spans)
        assert sizes["a"] == 21.0
        assert sizes["b"] == 100.0  # up to the open ledger's LAC (3 entries confirmed)
        assert await view.entry_bytes(spans, {"a": 5.0, "b": 7.0}) == {"a": 5.0, "b": 7.0}
        await writer.close()
    caps = entry_caps({"a": 21.0, "b": 100.0}, 200)
    assert caps == {"a": 9, "b": 2}
    spans = [EntrySpan("a", 1, 0, 9), EntrySpan("b", 2, 0, 4), EntrySpan("c", 3, 0, 2)]
    groups = partition_spans(spans, 1000, caps)
    assert [[(s.log, s.first, s.last) for s in g] for g in groups] == [
        [("a", 0, 8)],
        [("a", 9, 9)],  # a ninth of a split, and b's 2 entries a whole one: apart
        [("b", 0, 1)],
        [("b", 2, 3)],
        [("b", 4, 4), ("c", 0, 2)],  # half a split, and c (no size known) 3 of 1,000 entries
    ]
