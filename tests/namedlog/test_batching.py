"""Record batching in the writer, the readers and the walk, on the in-memory cluster: each
record keeps its own position, timestamp, key and properties; limits, linger, compression and
append_many; starts inside a batch; format-1 entries of older writers alongside."""

from __future__ import annotations

import asyncio
import functools

import pytest

from bkeeper.client.config import ClientConfig
from bkeeper.common.errors import ConfigError, LogError, LogFencedError
from bkeeper.namedlog import LATEST, LogConfig, NamedLogs, Position
from bkeeper.namedlog.core import entry_envelopes
from bkeeper.testing.cluster import MemoryCluster
from bkeeper.testing.virtual_time import on_virtual_time

FAST = ClientConfig(add_timeout_ms=500, read_timeout_ms=500, long_poll_timeout_ms=200)
BATCHED = LogConfig(batching=True, batch_max_records=10, linger_ms=0, tail_poll_ms=100)


async def collect(reader, count: int, timeout_s: float = 10.0):
    records = []
    while len(records) < count:
        record = await reader.next(timeout_s)
        assert record is not None, f"only {len(records)} of {count} records arrived"
        records.append(record)
    return records


async def entry_counts(logs: NamedLogs, name: str) -> list[int]:
    """How many records each entry of the log holds, in log order."""
    counts = []
    for ledger in (await logs.log(name).metadata()).ledgers:
        handle = await logs.walk.open(ledger.ledger_id)
        assert handle is not None
        last = handle.metadata.last_entry_id
        if last >= 0:
            async for entry in handle.read(0, last):
                counts.append(entry_envelopes(entry.payload, 0, 0).record_count)
    return counts


@on_virtual_time
async def test_pipelined_appends_share_batches_and_keep_their_own_positions():
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST), BATCHED)
        named = await logs.create("log")
        writer = await named.open_writer()
        futures = [
            await writer.append_async(b"r%d" % i, key=b"k%d" % i, properties={"i": b"%d" % i})
            for i in range(25)
        ]
        positions = [await f for f in futures]
        await writer.close()
        ledger = positions[0].ledger_id
        assert positions == [Position(ledger, i // 10, i % 10) for i in range(25)]
        assert await entry_counts(logs, "log") == [10, 10, 5]
        records = await collect(await named.open_reader(), 25)
        assert [r.position for r in records] == positions
        assert [(r.payload, r.key, dict(r.properties)) for r in records] == [
            (b"r%d" % i, b"k%d" % i, {"i": b"%d" % i}) for i in range(25)
        ]
        assert await named.last_position() == Position(ledger, 2, 4)


@on_virtual_time
async def test_a_lone_record_is_a_format_1_entry_and_appends_one_at_a_time_are_not_held():
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST), BATCHED)
        named = await logs.create("log")
        writer = await named.open_writer()
        positions = [await writer.append(b"one-%d" % i) for i in range(3)]
        await writer.close()
        ledger = positions[0].ledger_id
        assert positions == [Position(ledger, i) for i in range(3)]
        handle = await logs.walk.open(ledger)
        assert (await handle.read_entry(0)).payload[0] == 1  # format 1


@on_virtual_time
async def test_batch_max_bytes_seals_and_a_larger_record_goes_alone():
    config = LogConfig(batching=True, batch_max_bytes=100, linger_ms=0)
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST), config)
        named = await logs.create("log")
        writer = await named.open_writer()
        # Each record is 4 + 10 + 20 = 34 bytes of body: two fit in 100, not three.
        futures = [await writer.append_async(b"x" * 20) for _ in range(5)]
        big = await writer.append_async(b"y" * 300)
        last = await writer.append_async(b"z" * 20)
        await asyncio.gather(*futures, big, last)
        await writer.close()
        assert await entry_counts(logs, "log") == [2, 2, 1, 1, 1]


@on_virtual_time
async def test_linger_holds_a_batch_until_it_passes_or_a_flush():
    config = LogConfig(batching=True, linger_ms=60_000)
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST), config)
        named = await logs.create("log")
        writer = await named.open_writer()
        first = await writer.append_async(b"a")
        await asyncio.sleep(0.05)  # not synchronisation: time for a send that must not happen
        assert not first.done()
        second = await writer.append_async(b"b")
        await writer.flush()
        assert first.done() and second.done()
        assert (await first).index == 0 and (await second).index == 1
        await writer.close()


@pytest.mark.parametrize("compression", ["zstd", "lz4"])
@on_virtual_time
async def test_compressed_batches_read_back(compression):
    config = LogConfig(batching=True, linger_ms=0, compression=compression)
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST), config)
        named = await logs.create("log")
        writer = await named.open_writer()
        payloads = [b"payload %d " % i * 10 for i in range(300)]
        positions = await writer.append_many(payloads)
        await writer.close()
        handle = await logs.walk.open(positions[0].ledger_id)
        entry = await handle.read_entry(0)
        assert entry.payload[:2] == bytes([2, 1 if compression == "zstd" else 2])
        assert len(entry.payload) < sum(map(len, payloads)) // 5  # it did compress
        records = await collect(await named.open_reader(), 300)
        assert [r.payload for r in records] == payloads
        assert [r.position for r in records] == positions


@on_virtual_time
async def test_append_many_fills_batches_in_order_and_returns_every_position():
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST), BATCHED)
        named = await logs.create("log")
        writer = await named.open_writer()
        lone = await writer.append_async(b"first")
        positions = await writer.append_many(
            [b"m%d" % i for i in range(23)], keys=[b"k"] * 23, properties=[None] * 23
        )
        await lone
        with pytest.raises(ConfigError, match="append_many: 2 keys for 3 payloads"):
            await writer.append_many([b"a", b"b", b"c"], keys=[b"k", b"k"])
        await writer.close()
        ledger = positions[0].ledger_id
        assert await lone == Position(ledger, 0, 0)
        expected = [Position(ledger, (i + 1) // 10, (i + 1) % 10) for i in range(23)]
        assert positions == expected
        records = await collect(await named.open_reader(), 24)
        assert [r.payload for r in records] == [b"first"] + [b"m%d" % i for i in range(23)]
        assert all(r.key == b"k" for r in records[1:])


@on_virtual_time
async def test_append_many_without_batching_writes_an_entry_each():
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST))
        named = await logs.create("log")
        writer = await named.open_writer()
        positions = await writer.append_many([b"a", b"b", b"c"])
        await writer.close()
        assert positions == [Position(positions[0].ledger_id, i) for i in range(3)]


@on_virtual_time
async def test_readers_start_inside_a_batch_and_resume_across_entries():
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST), BATCHED)
        named = await logs.create("log")
        writer = await named.open_writer()
        positions = await writer.append_many([b"%d" % i for i in range(30)])
        await writer.close()
        for start in (positions[13], positions[19], Position(positions[0].ledger_id, 1, 10)):
            reader = await named.open_reader(start)
            expected = [p for p in positions if p >= start and p.index < 10]
            got = await collect(reader, len(expected))
            assert [r.position for r in got] == expected
            await reader.close()
        reader = await named.open_reader()
        await collect(reader, 12)
        assert reader.position == Position(positions[0].ledger_id, 1, 2)
        await collect(reader, 8)
        assert reader.position == Position(positions[0].ledger_id, 2)  # an entry's end
        await reader.close()


@on_virtual_time
async def test_tailing_reader_gets_batches_as_they_come_and_old_entries_before_them():
    async with MemoryCluster(3) as cluster:
        client = await cluster.client(FAST)
        plain = NamedLogs(client, LogConfig(tail_poll_ms=100))
        named = await plain.create("log")
        old = await named.open_writer()  # a writer of before batching: format-1 entries
        for i in range(3):
            await old.append(b"old%d" % i)
        await old.close()
        logs = NamedLogs(client, BATCHED)
        reader = await logs.log("log").open_reader()
        writer = await logs.log("log").open_writer()
        positions = await writer.append_many([b"new%d" % i for i in range(15)])
        # Both batches went out before either was acknowledged: bookies learn that they
        # are (the LAC) with the next entry.
        tick = await writer.append(b"tick")
        got = await collect(reader, 3 + 15)
        await writer.close()
        got += await collect(reader, 1)
        assert [r.payload for r in got] == [b"old%d" % i for i in range(3)] + [
            b"new%d" % i for i in range(15)
        ] + [b"tick"]
        assert [r.position for r in got[3:]] == [*positions, tick]
        assert [r.position.index for r in got[:3]] == [0, 0, 0]
        await reader.close()


@on_virtual_time
async def test_latest_and_time_starts_with_batches():
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST), BATCHED)
        named = await logs.create("log")
        writer = await named.open_writer()
        await writer.append_many([b"before%d" % i for i in range(12)])
        reader = await named.open_reader(LATEST)
        cluster_time = logs.clock.wall_ms()
        await asyncio.sleep(0.01)  # not synchronisation: the next records' time must differ
        later = await writer.append_many([b"after%d" % i for i in range(4)])
        await writer.close()
        assert [r.payload for r in await collect(reader, 4)] == [b"after%d" % i for i in range(4)]
        meta = await named.metadata()
        assert await logs.walk.position_at(meta, cluster_time + 1) == later[0]
        await reader.close()


@on_virtual_time
async def test_spans_carry_the_indexes_of_starts_and_ends_inside_batches():
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST), BATCHED)
        named = await logs.create("log")
        writer = await named.open_writer()
        positions = await writer.append_many([b"%d" % i for i in range(30)])
        await writer.close()
        meta = await named.metadata()
        walked = await logs.walk.spans("log", meta, positions[13], positions[25])
        ((span,),) = [walked.spans]
        assert (span.first, span.first_index, span.last, span.end_index) == (1, 3, 2, 5)
        assert walked.after == positions[25]
        walked = await logs.walk.spans("log", meta, positions[13], positions[20])
        assert (walked.spans[0].last, walked.spans[0].end_index, walked.after) == (
            1,
            0,
            Position(positions[0].ledger_id, 2),
        )


@on_virtual_time
async def test_batching_options_are_checked():
    with pytest.raises(ConfigError, match="batch_max_records"):
        LogConfig(batch_max_records=0)
    with pytest.raises(ConfigError, match="batch_max_bytes"):
        LogConfig(batch_max_bytes=5 * 1024 * 1024)
    with pytest.raises(ConfigError, match="linger_ms"):
        LogConfig(linger_ms=-1)
    with pytest.raises(ConfigError, match="compression 'gzip'"):
        LogConfig(compression="gzip")


@on_virtual_time
async def test_appends_after_close_are_refused_and_pending_batches_were_sent():
    config = LogConfig(batching=True, linger_ms=60_000)
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST), config)
        named = await logs.create("log")
        writer = await named.open_writer()
        pending = [await writer.append_async(b"p%d" % i) for i in range(3)]
        await writer.close()  # seals and sends the lingering batch first
        assert [(await f).index for f in pending] == [0, 1, 2]
        with pytest.raises(LogError, match="closed"):
            await writer.append(b"late")


@on_virtual_time
async def test_a_batching_writer_fenced_mid_run_loses_nothing_acknowledged():
    """A sends 200 records; once 20 are acknowledged, B takes over (fencing A's ledger) while
    the rest may be in flight; then A sends 200 more. Every record sent after the takeover
    fails (A's ledger was fenced before they were sent); of the first 200, those acknowledged
    are a prefix and the rest fail as fenced; the log holds a prefix of the first 200 that
    includes every acknowledged one, then B's record."""
    async with MemoryCluster(3) as cluster:
        logs_a = NamedLogs(await cluster.client(FAST), BATCHED)
        logs_b = NamedLogs(await cluster.client(FAST), LogConfig(tail_poll_ms=100))
        named = await logs_a.create("log")
        a = await named.open_writer()
        outcomes: dict[int, Position | BaseException] = {}
        twenty_acked = asyncio.Event()

        def settle(i: int, future: asyncio.Future) -> None:
            outcomes[i] = future.exception() or future.result()
            if sum(isinstance(o, Position) for o in outcomes.values()) >= 20:
                twenty_acked.set()

        async def send(i: int) -> asyncio.Future | None:
            try:
                future = await a.append_async(b"a%d" % i)
            except LogError as exc:  # A learnt of the fence: refused at once
                outcomes[i] = exc
                return None
            future.add_done_callback(functools.partial(settle, i))
            return future

        futures = [await send(i) for i in range(200)]
        await asyncio.wait_for(twenty_acked.wait(), 10.0)
        b = await logs_b.log("log").open_writer()  # the takeover: A's ledger is fenced
        futures += [await send(i) for i in range(200, 400)]
        await asyncio.gather(*(f for f in futures if f is not None), return_exceptions=True)
        await b.append(b"b-first")
        await b.close()
        assert sorted(outcomes) == list(range(400))
        acked = sorted(i for i, o in outcomes.items() if isinstance(o, Position))
        assert 20 <= len(acked) <= 200, "no record sent after the takeover is acknowledged"
        assert acked == list(range(len(acked))), "the acknowledged records are a prefix"
        failed = {i: o for i, o in outcomes.items() if not isinstance(o, Position)}
        assert sorted(failed) == list(range(len(acked), 400)), "every later record fails"
        assert all(isinstance(e, LogFencedError) for e in failed.values()), failed
        reader = await logs_b.log("log").open_reader()
        last = await logs_b.log("log").last_position()
        got = []
        while not got or got[-1].position < last:
            record = await reader.next(10.0)
            assert record is not None
            got.append(record)
        payloads = [r.payload for r in got]
        assert payloads[-1] == b"b-first"
        from_a = payloads[:-1]
        assert len(acked) <= len(from_a) <= 200, "every acknowledged record, none sent after B"
        assert from_a == [b"a%d" % i for i in range(len(from_a))], "a prefix of what A sent"
        await reader.close()
