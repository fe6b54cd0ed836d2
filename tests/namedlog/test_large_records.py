"""Records larger than a chunk on the in-memory cluster: the writer cuts them into chunk entries
(batching on and off), one position per record; the tailing reader, the walk and consumers
(exclusive and shared) get them whole; starts inside a record read it whole; a record whose
writer stopped between chunks is skipped and counted, never returned in part."""

from __future__ import annotations

import asyncio
import logging

import pytest

from bkeeper.client.config import ClientConfig
from bkeeper.common.errors import ConfigError
from bkeeper.namedlog import LATEST, LogConfig, NamedLogs, Position, create_ledger
from bkeeper.namedlog.core import (
    CHUNK_BYTES_MIN,
    RECORD_BYTES_MAX,
    decode_chunk,
    encode_chunks,
    encode_record,
)
from bkeeper.testing.cluster import MemoryCluster
from bkeeper.testing.virtual_time import on_virtual_time

FAST = ClientConfig(
    add_timeout_ms=500, read_timeout_ms=500, long_poll_timeout_ms=200, explicit_lac_interval_ms=20
)
CHUNK = CHUNK_BYTES_MIN
PLAIN = LogConfig(chunk_bytes=CHUNK, tail_poll_ms=100)
BATCHED = LogConfig(chunk_bytes=CHUNK, batching=True, linger_ms=0, tail_poll_ms=100)


def big(tag: int, size: int = 3 * CHUNK + 100) -> bytes:
    return bytes([tag % 256]) * size


async def collect(reader, count: int, timeout_s: float = 10.0):
    records = []
    while len(records) < count:
        record = await reader.next(timeout_s)
        assert record is not None, f"only {len(records)} of {count} records arrived"
        records.append(record)
    return records


@pytest.mark.parametrize("config", [PLAIN, BATCHED], ids=["plain", "batched"])
@on_virtual_time
async def test_large_records_go_in_chunks_and_come_back_whole_at_one_position_each(config):
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST), config)
        named = await logs.create("log")
        writer = await named.open_writer()
        payloads = [b"small-0", big(1), b"small-2", big(3, 5 * CHUNK), b"small-4"]
        futures = [
            await writer.append_async(p, key=b"k%d" % i, properties={"i": b"%d" % i})
            for i, p in enumerate(payloads)
        ]
        positions = [await f for f in futures]
        await writer.close()
        ledger = positions[0].ledger_id
        # One entry per small record (batches of one), four and six entries for the large ones;
        # each record's position is its last entry's.
        assert positions == [Position(ledger, e) for e in (0, 4, 5, 11, 12)]
        handle = await logs.walk.open(ledger)
        heads = [decode_chunk((await handle.read_entry(e)).payload, ledger, e) for e in range(13)]
        assert [h.chunk_index if h else None for h in heads] == [
            None, 0, 1, 2, 3, None, 0, 1, 2, 3, 4, 5, None,
        ]  # fmt: skip
        reader = await named.open_reader()
        records = await collect(reader, 5)
        assert [r.position for r in records] == positions
        assert [(r.payload, r.key, dict(r.properties)) for r in records] == [
            (p, b"k%d" % i, {"i": b"%d" % i}) for i, p in enumerate(payloads)
        ]
        assert [r.chunks for r in records] == [1, 4, 1, 6, 1]
        assert reader.position == Position(ledger, 13)
        assert reader.incomplete_records == 0
        await reader.close()
        assert await named.last_position() == positions[-1]


@on_virtual_time
async def test_append_many_with_a_large_record_keeps_order_and_positions():
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST), BATCHED)
        named = await logs.create("log")
        writer = await named.open_writer()
        positions = await writer.append_many([b"a", b"b", big(2), b"c"])
        await writer.close()
        ledger = positions[0].ledger_id
        # a and b share a batch; the large record's four chunks follow; then c.
        assert positions == [Position(ledger, 0, 0), Position(ledger, 0, 1), Position(ledger, 4),
                             Position(ledger, 5)]  # fmt: skip
        records = await collect(await named.open_reader(), 4)
        assert [r.payload for r in records] == [b"a", b"b", big(2), b"c"]


@on_virtual_time
async def test_a_record_larger_than_the_limit_is_refused_before_anything_is_written():
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST), LogConfig())
        named = await logs.create("log")
        writer = await named.open_writer()
        with pytest.raises(ConfigError, match=rf"{RECORD_BYTES_MAX + 1} bytes.*RECORD_BYTES_MAX"):
            await writer.append(bytes(RECORD_BYTES_MAX - 9))
        assert writer._handle.length == 0  # nothing was sent
        position = await writer.append(b"after")  # the writer goes on
        await writer.close()
        assert position.entry_id == 0


@on_virtual_time
async def test_a_chunk_size_out_of_bounds_is_refused():
    with pytest.raises(ConfigError, match="chunk_bytes"):
        LogConfig(chunk_bytes=CHUNK - 1)
    with pytest.raises(ConfigError, match="chunk_bytes"):
        LogConfig(chunk_bytes=4 * 1024 * 1024 + 1)


@on_virtual_time
async def test_a_start_inside_a_large_record_reads_it_from_its_first_chunk():
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST), PLAIN)
        named = await logs.create("log")
        writer = await named.open_writer()
        positions = [await writer.append(p) for p in (b"before", big(1), b"after")]
        await writer.close()
        ledger = positions[0].ledger_id
        for start in (1, 2, 4):  # its first, a middle and its last chunk (its position)
            reader = await named.open_reader(Position(ledger, start))
            records = await collect(reader, 2)
            assert [r.payload for r in records] == [big(1), b"after"], start
            assert reader.incomplete_records == 0
            await reader.close()


@on_virtual_time
async def test_a_tailing_reader_gets_a_large_record_appended_after_it_opened():
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST), PLAIN)
        named = await logs.create("log")
        writer = await named.open_writer()
        await writer.append(b"old")
        reader = await named.open_reader(LATEST)
        position = await writer.append(big(7, 8 * CHUNK))
        (record,) = await collect(reader, 1)
        assert (record.position, record.payload, record.chunks) == (position, big(7, 8 * CHUNK), 9)
        await reader.close()
        await writer.close()


async def _cut_ledger(logs: NamedLogs, entries: list[bytes]) -> int:
    """A sealed ledger holding ``entries`` (written with the ledger API, as a writer that
    died between chunks would leave it)."""
    handle = await create_ledger(logs.bk, logs.config)
    for data in entries:
        await handle.append(data)
    await handle.close()
    return handle.ledger_id


@on_virtual_time
async def test_a_record_whose_writer_stopped_between_chunks_is_skipped_and_counted(caplog):
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST), PLAIN)
        named = await logs.create("log")
        chunks = encode_chunks(encode_record(big(9), 1), CHUNK)
        assert len(chunks) == 4
        plain = [encode_record(b"p%d" % i, 1) for i in range(3)]
        # Ledger A: a record, the first two chunks of another (the writer died), then a new
        # writer's ledger B: a record, and three chunks of four at its end.
        first = await _cut_ledger(logs, [plain[0], *chunks[:2]])
        second = await _cut_ledger(logs, [plain[1], *chunks, plain[2], *chunks[:3]])
        await named.append_ledgers([first, second])
        reader = await named.open_reader()
        with caplog.at_level(logging.WARNING, "bkeeper.namedlog.reader"):
            records = await collect(reader, 4)
            assert await reader.next(0.5) is None  # nothing more: never a record in part
        assert [r.payload for r in records] == [b"p0", b"p1", big(9), b"p2"]
        assert [r.position for r in records] == [
            Position(first, 0), Position(second, 0), Position(second, 4), Position(second, 5),
        ]  # fmt: skip
        assert reader.incomplete_records == 2
        warned = [r.getMessage() for r in caplog.records]
        assert any(f"ledger {first}, entries 1..2 (2 of 4 chunks)" in m for m in warned), warned
        assert any(f"ledger {second}, entries 6..8 (3 of 4 chunks)" in m for m in warned)
        await reader.close()
        # The log's last record is the last whole one.
        assert await named.last_position() == Position(second, 5)


@on_virtual_time
async def test_consumers_get_large_records_whole_and_an_ack_covers_every_chunk():
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST), PLAIN)
        named = await logs.create("log")
        writer = await named.open_writer()
        positions = [await writer.append(p) for p in (big(1), b"x", big(2))]
        await writer.close()
        consumer = await named.subscribe("sub", ack_flush_ms=10)
        records = [await consumer.receive(5.0) for _ in range(3)]
        assert [r.payload for r in records] == [big(1), b"x", big(2)]
        consumer.ack_individual(positions[2])  # out of order: every chunk of it
        consumer.ack(positions[0])
        await consumer.flush()
        ledger = positions[0].ledger_id
        assert consumer.state.mark == Position(ledger, 3)
        assert consumer.state.acked == ((ledger, 5, 8),)
        await consumer.close()
        again = await named.subscribe("sub")
        (record,) = [await again.receive(5.0)]
        assert record.payload == b"x"  # the large records are not delivered again
        assert await again.receive(0.3) is None
        again.ack(record.position)
        await again.flush()
        assert again.state.mark == Position(ledger, 8)
        await again.close()


@on_virtual_time
async def test_a_consumer_that_restarts_gets_an_unacknowledged_large_record_again_whole():
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST), PLAIN)
        named = await logs.create("log")
        writer = await named.open_writer()
        await writer.append(b"a")
        await writer.append(big(5))
        await writer.close()
        consumer = await named.subscribe("sub")
        first = await consumer.receive(5.0)
        consumer.ack(first.position)
        await consumer.receive(5.0)  # the large record, not acknowledged
        await consumer.close()
        again = await named.subscribe("sub")
        record = await again.receive(5.0)
        assert (record.payload, record.chunks) == (big(5), 4)
        await again.close()


@on_virtual_time
async def test_a_shared_claim_of_a_large_record_is_taken_over_whole():
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST), PLAIN)
        named = await logs.create("log")
        writer = await named.open_writer()
        position = await writer.append(big(3))
        await writer.close()
        slow = await named.subscribe("sub", mode="shared", consumer_id="slow", ack_timeout_ms=50)
        record = await slow.receive(5.0)
        assert record.payload == big(3)
        (claim,) = slow.state.claims
        assert (claim.first, claim.last) == (position.entry_id - 3, position.entry_id)
        other = await named.subscribe("sub", mode="shared", consumer_id="other", ack_timeout_ms=50)
        again = await other.receive(5.0)  # taken over once slow's claim expired
        assert (again.position, again.payload) == (position, big(3))
        other.ack_individual(again.position)
        await other.flush()
        assert other.state.mark == position
        await other.close()
        await slow.close()


@on_virtual_time
async def test_a_start_by_time_finds_a_large_record_and_an_operator_ack_covers_its_chunks():
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST), PLAIN)
        named = await logs.create("log")
        writer = await named.open_writer()
        await writer.append(b"early")
        await asyncio.sleep(0.01)  # a later millisecond for the large record
        position = await writer.append(big(4))
        await writer.append(b"late")
        await writer.close()
        everything = await collect(await named.open_reader(), 3)
        stamp = everything[1].timestamp_ms
        assert everything[0].timestamp_ms < stamp
        reader = await named.open_reader(stamp)
        assert [r.payload for r in await collect(reader, 2)] == [big(4), b"late"]
        await reader.close()
        consumer = await named.subscribe("ops")
        await consumer.ack_up_to(position, individual=True)  # not delivered: the entry is read
        ledger = position.ledger_id
        assert consumer.state.acked == ((ledger, 1, 4),)
        await consumer.close()
        again = await named.subscribe("ops")  # (a consumer reads the runs acked when it opens)
        record = await again.receive(5.0)
        assert record.payload == b"early"  # the large record is not delivered: acknowledged
        assert (await again.receive(5.0)).payload == b"late"
        await again.close()


@on_virtual_time
async def test_an_ack_of_a_delivered_large_record_reads_none_of_its_chunks_again():
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST), PLAIN)
        named = await logs.create("log")
        writer = await named.open_writer()
        await writer.append(big(6, 8 * CHUNK))
        await writer.close()
        consumer = await named.subscribe("sub", ack_flush_ms=60_000)
        record = await consumer.receive(5.0)
        assert record.chunks == 9
        consumer.ack_individual(record.position)
        before = sum(b.requests for b in cluster.bookies)
        await consumer.flush()  # the record counts of its entries are known: no entry read
        assert sum(b.requests for b in cluster.bookies) == before
        assert consumer.state.mark == record.position
        await consumer.close()


@on_virtual_time
async def test_chunks_fit_a_client_whose_frames_are_smaller_than_chunk_bytes():
    frame = 256 * 1024
    small = ClientConfig(
        add_timeout_ms=500, read_timeout_ms=500, long_poll_timeout_ms=200,
        max_frame_bytes=frame, batch_read_bytes_max=128 * 1024,
    )  # fmt: skip
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(small), LogConfig())  # chunk_bytes: 4 MiB
        named = await logs.create("log")
        writer = await named.open_writer()
        position = await writer.append(big(8, 1024 * 1024))  # over a frame, under chunk_bytes
        await writer.close()
        handle = await logs.walk.open(position.ledger_id)
        sizes = [len((await handle.read_entry(e)).payload) for e in range(position.entry_id + 1)]
        assert max(sizes) < frame and len(sizes) == 5
        (record,) = await collect(await named.open_reader(), 1)
        assert (record.payload, record.chunks) == (big(8, 1024 * 1024), 5)
