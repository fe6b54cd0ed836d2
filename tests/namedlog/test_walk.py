"""The walk over a log's ledger list (bkeeper.namedlog.walk) on the in-memory cluster: the ends,
the position at a time and the spans, on a log of several ledgers with an empty one, a
truncated head and a ledger whose metadata is gone."""

from __future__ import annotations

import asyncio

import pytest

from bkeeper.client.config import ClientConfig
from bkeeper.common.errors import BKeeperError
from bkeeper.namedlog import (
    LATEST,
    EntrySpan,
    LogConfig,
    LogWalk,
    LostRange,
    NamedLogs,
    Position,
    earliest,
    locate,
)
from bkeeper.testing.cluster import MemoryCluster
from bkeeper.testing.virtual_time import on_virtual_time

FAST = ClientConfig(add_timeout_ms=500, read_timeout_ms=500, long_poll_timeout_ms=200)
SMALL = LogConfig(roll_bytes=300)


def covered(spans: list[EntrySpan]) -> list[Position]:
    return [Position(s.ledger_id, e) for s in spans for e in range(s.first, s.last + 1)]


async def _build(logs: NamedLogs) -> tuple[list[Position], int]:
    """A log of several full ledgers, then an empty sealed ledger, then one more ledger;
    every writer closed. Returns the positions and the empty ledger's id."""
    named = await logs.create("a")
    writer = await named.open_writer()
    positions = [await writer.append(b"record-%04d" % i) for i in range(40)]
    await writer.close()
    empty = await named.open_writer()
    await empty.close()
    writer = await named.open_writer()
    positions += [await writer.append(b"later-%d" % i) for i in range(3)]
    await writer.close()
    return positions, empty.ledger_id


@on_virtual_time
async def test_ends_spans_and_time_over_several_ledgers_and_an_empty_one():
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST), SMALL)
        positions, empty_id = await _build(logs)
        walk, meta = logs.walk, await logs.log("a").metadata()
        ids = [x.ledger_id for x in meta.ledgers]
        assert len({p.ledger_id for p in positions}) > 3 and empty_id in ids
        assert empty_id not in {p.ledger_id for p in positions}

        assert earliest(meta) == Position(ids[0], 0)
        last = positions[-1]
        assert await walk.latest(meta) == Position(last.ledger_id, last.entry_id + 1)

        walked = await walk.spans("a", meta, earliest(meta))
        assert covered(walked.spans) == positions
        assert all(s.sealed and s.log == "a" for s in walked.spans)
        assert empty_id not in {s.ledger_id for s in walked.spans}
        assert walked.after == Position(last.ledger_id, last.entry_id + 1)
        assert walked.lost == []

        # Between two positions; an end in the empty ledger stops there.
        walked = await walk.spans("a", meta, positions[5], positions[30])
        assert covered(walked.spans) == positions[5:30]
        assert walked.after == positions[30]
        walked = await walk.spans("a", meta, positions[38], Position(empty_id, 0))
        assert covered(walked.spans) == positions[38:40]
        assert walked.after == Position(empty_id, 0)

        # A position past a sealed ledger's end means the next ledger's first record.
        end_of_first = Position(positions[0].ledger_id, 10_000)
        index = locate(meta, end_of_first)
        assert index == 0
        assert locate(meta, Position(ids[-1] + 1, 0)) is None
        walked = await walk.spans("a", meta, Position(empty_id, 0))
        assert covered(walked.spans) == positions[-3:]

        # The first record at or after a time; after everything: latest.
        reader = await logs.log("a").open_reader()
        records = [await reader.next(5) for _ in positions]
        await reader.close()
        stamp = records[20].timestamp_ms
        at = await walk.position_at(meta, stamp)
        first = positions[[r.timestamp_ms for r in records].index(stamp)]
        assert at == first
        assert await walk.position_at(meta, records[-1].timestamp_ms + 60_000) == (
            await walk.latest(meta)
        )


@on_virtual_time
async def test_latest_is_past_the_entries_appended_before_their_lac_is_known():
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST), SMALL)
        named = await logs.create("a")
        meta = await named.metadata()
        assert earliest(meta) == Position(0, 0)
        assert await logs.walk.latest(meta) == Position(0, 0)
        writer = await named.open_writer()
        appended = [await writer.append(b"r%d" % i) for i in range(3)]
        meta = await named.metadata()
        ledger_id = appended[-1].ledger_id
        # The LAC travels with the next append, so the bookies' LAC is one behind here:
        # spans (what a reader may read) stop at it, latest (where "from now on" starts) is
        # after the last acknowledged record.
        walked = await logs.walk.spans("a", meta, earliest(meta))
        assert covered(walked.spans) == appended[:2]
        assert not walked.spans[-1].sealed
        assert walked.after == Position(ledger_id, 2)
        assert await logs.walk.latest(meta) == Position(ledger_id, 3)
        assert await named.last_position() == appended[-1]
        reader = await named.open_reader(LATEST)
        await writer.append(b"new")
        await writer.close()
        record = await reader.next(5)
        assert record is not None and record.payload == b"new"
        await reader.close()


@on_virtual_time
async def test_truncated_head_and_a_gone_ledger_are_lost_ranges():
    async with MemoryCluster(3) as cluster:
        bk = await cluster.client(FAST)
        logs = NamedLogs(bk, SMALL)
        positions, _ = await _build(logs)
        named = logs.log("a")
        start = earliest(await named.metadata())
        ledger_ids = sorted({p.ledger_id for p in positions})
        cut = Position(ledger_ids[2], 0)
        assert await named.truncate(cut) == 2
        meta = await named.metadata()
        assert earliest(meta) == cut
        walked = await logs.walk.spans("a", meta, start)
        assert walked.lost == [LostRange(start, cut)]
        assert covered(walked.spans) == [p for p in positions if p >= cut]
        # From the truncation point on nothing is lost.
        walked = await logs.walk.spans("a", meta, cut)
        assert walked.lost == []

        # A ledger of the list whose metadata is gone: lost, and the walk goes on after it
        # (a new walk: one that saw the ledger sealed remembers its end).
        gone = ledger_ids[3]
        await bk.delete_ledger(gone)
        walked = await LogWalk(bk, SMALL.password).spans("a", meta, cut)
        assert walked.lost == [LostRange(Position(gone, 0), Position(gone + 1, 0))]
        assert covered(walked.spans) == [p for p in positions if p >= cut and p.ledger_id != gone]


@on_virtual_time
async def test_an_open_ledgers_end_is_read_from_its_bookies_only_while_its_handle_is_kept():
    """The walk keeps an open ledger's read handle (following its metadata): asking for its
    end again reads the LAC from the bookies and nothing from the metadata store (it works
    while the store is cut off); the seal comes through the watch; a ledger deleted while
    open is found gone at the next look."""
    async with MemoryCluster(4) as cluster:
        writing = NamedLogs(await cluster.client(FAST))
        writer = await (await writing.create("a")).open_writer()
        for i in range(3):
            await writer.append(b"r%d" % i)
        reader_bk = await cluster.client(FAST)
        walk = NamedLogs(reader_bk).walk
        ledger = writer.ledger_id
        first = await walk.ledger_end(ledger)
        assert first is not None and not first.sealed and first.last >= 1

        reader_bk.cluster.store.suspend()  # every call to the store fails now
        try:
            for i in range(3, 6):
                await writer.append(b"r%d" % i)
            moved = await walk.ledger_end(ledger)
            assert moved is not None and not moved.sealed and moved.last >= 4
        finally:
            reader_bk.cluster.store.resume()

        await writer.close()
        for _ in range(5):  # the watch's event reaches the kept handle
            await asyncio.sleep(0)
        sealed = await walk.ledger_end(ledger)
        assert sealed is not None and sealed.sealed and sealed.last == 5

        other = await writing.log("a").open_writer()  # a second open ledger, then deleted
        await other.append(b"x")
        await other.append(b"y")
        assert (await walk.ledger_end(other.ledger_id)) is not None
        await writing.bk.delete_ledger(other.ledger_id, fence=False)
        for _ in range(5):
            await asyncio.sleep(0)
        assert await walk.ledger_end(other.ledger_id) is None


@on_virtual_time
async def test_the_walk_keeps_at_most_open_kept_max_handles():
    async with MemoryCluster(4) as cluster:
        writing = NamedLogs(await cluster.client(FAST))
        writers = []
        for name in "abc":
            writer = await (await writing.create(name)).open_writer()
            await writer.append(b"r")
            await writer.append(b"s")
            writers.append(writer)
        reader_bk = await cluster.client(FAST)
        walk = LogWalk(reader_bk, LogConfig().password, open_kept_max=2)
        for writer in writers:
            assert await walk.ledger_end(writer.ledger_id) is not None
        reader_bk.cluster.store.suspend()
        try:
            for writer in writers[1:]:  # kept: no metadata read
                assert await walk.ledger_end(writer.ledger_id) is not None
            with pytest.raises(BKeeperError):  # let go of: opened again, from the store
                await walk.ledger_end(writers[0].ledger_id)
        finally:
            reader_bk.cluster.store.resume()
        for writer in writers:
            await writer.close()
