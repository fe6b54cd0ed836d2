"""Readers that stay open follow their ledger's metadata (issue 22, part 1), on the in-memory
cluster: a tailing reader keeps up while the writer's ensemble changes twice (every bookie it
was opened with gone), and a reader part-way through a sealed ledger goes on after both
bookies of that ledger were replaced by auto-recovery's ``recover``."""

from __future__ import annotations

import asyncio

from bkeeper.autorecovery import admin
from bkeeper.autorecovery.config import AutoRecoveryConfig
from bkeeper.client.bookkeeper import BookKeeper
from bkeeper.client.config import ClientConfig
from bkeeper.namedlog import LogConfig, NamedLogs, Position
from bkeeper.testing.cluster import MemoryCluster
from bkeeper.testing.virtual_time import on_virtual_time

CLIENT = ClientConfig(
    add_timeout_ms=500,
    read_timeout_ms=500,
    speculative_read_timeout_ms=100,
    long_poll_timeout_ms=300,
    explicit_lac_interval_ms=10,
)
#: A reader that reads a ledger five entries per request, one request at a time.
SLOW_READER = ClientConfig(
    read_timeout_ms=500,
    speculative_read_timeout_ms=100,
    long_poll_timeout_ms=300,
    batch_read_entries_max=5,
    batch_reads_in_flight_max=1,
    read_ahead_entries_max=5,
)
LOG = LogConfig(ensemble_size=2, write_quorum=2, ack_quorum=2, tail_poll_ms=100)


async def take(reader, count: int, timeout_s: float = 20.0) -> list:
    records = []
    while len(records) < count:
        record = await reader.next(timeout_s)
        assert record is not None, f"{len(records)} of {count} records, then none in {timeout_s} s"
        records.append(record)
    return records


async def give_cookie(bk: BookKeeper, bookie_id: str) -> None:
    """A cookie in the metadata store, as a real bookie writes one (memory bookies do not):
    ``recover`` only replaces bookies it knows."""
    await bk.cluster.store.create(bk.cluster.cookies.path(bookie_id), b"x", make_parents=True)


def bookies_of(meta) -> set[str]:
    return {str(b) for ensemble in meta.segments.values() for b in ensemble}


@on_virtual_time
async def test_a_tailing_reader_keeps_up_while_the_ensemble_changes_twice():
    async with MemoryCluster(4) as cluster:
        writer_bk = await cluster.client(CLIENT)
        named = await NamedLogs(writer_bk, LOG).create("log")
        writer = await named.open_writer()
        reader = await NamedLogs(await cluster.client(CLIENT), LOG).log("log").open_reader()
        payloads = [b"r%d" % i for i in range(30)]
        records = []
        for payload in payloads[:10]:
            await writer.append(payload)
        records += await take(reader, 10)  # tailing the open ledger now, long-polling it
        first = (await writer_bk.ledger_metadata(writer.ledger_id)).last_ensemble
        for round_, gone in enumerate(first):
            await cluster.stop_bookie(cluster.bookie(str(gone)))
            for payload in payloads[10 * (round_ + 1) : 10 * (round_ + 2)]:
                await writer.append(payload)
            records += await take(reader, 10)
        meta = await writer_bk.ledger_metadata(writer.ledger_id)
        assert len(meta.segments) == 3, "two ensemble changes"
        assert not set(map(str, first)) & set(map(str, meta.last_ensemble))
        assert [r.payload for r in records] == payloads, "no gap, no duplicate, in order"
        assert [r.position for r in records] == [Position(writer.ledger_id, i) for i in range(30)]
        assert await reader.next(0.3) is None
        await reader.close()
        await writer.close()


@on_virtual_time
async def test_a_reader_goes_on_after_a_sealed_ledgers_bookies_are_replaced():
    async with MemoryCluster(5) as cluster:
        bk = await cluster.client(CLIENT)
        named = await NamedLogs(bk, LOG).create("log")
        writer = await named.open_writer()
        payloads = [b"r%d" % i for i in range(20)]
        for payload in payloads:
            await writer.append(payload)
        await writer.close()
        ledger_id = writer.ledger_id
        ensemble = [str(b) for b in (await bk.ledger_metadata(ledger_id)).last_ensemble]

        reader_bk = await cluster.client(SLOW_READER)
        handle = await reader_bk.open_ledger(ledger_id, LOG.password, recovery=False)
        from_handle = [e.entry_id async for e in handle.read(0, 4)]
        reader = await NamedLogs(reader_bk, LOG).log("log").open_reader()
        records = await take(reader, 5)  # part-way through the sealed ledger

        for bookie_id in ensemble:  # both bookies of the ledger, one after the other
            await give_cookie(bk, bookie_id)
            await cluster.stop_bookie(cluster.bookie(bookie_id))
            outcomes = await admin.recover(bk, [bookie_id], AutoRecoveryConfig())
            assert [(o.ledger_id, o.done) for o in outcomes] == [(ledger_id, True)]
        assert not bookies_of(await bk.ledger_metadata(ledger_id)) & set(ensemble)

        records += await take(reader, 15)
        assert [r.payload for r in records] == payloads, "no gap, no duplicate, in order"
        assert await reader.next(0.3) is None
        # The handle opened before the replacement reads on from the new bookies.
        from_handle += [e.entry_id async for e in handle.read(5, 19)]
        assert from_handle == list(range(20))
        assert not bookies_of(handle.metadata) & set(ensemble)
        await reader.close()


@on_virtual_time
async def test_a_long_poll_goes_to_the_new_bookies_when_the_ensemble_changes_under_it():
    async with MemoryCluster(4) as cluster:
        bk = await cluster.client(CLIENT)
        writer = await bk.create_ledger(2, 2, 2)
        await writer.append(b"a")
        reader_bk = await cluster.client(CLIENT)
        handle = await reader_bk.open_ledger(writer.ledger_id, recovery=False)
        assert await handle.read_last_add_confirmed() in (-1, 0)
        lac = await handle.wait_last_add_confirmed(-1, 5_000)
        assert lac == 0
        assert handle.view.watching
        # A poll under way when both bookies it asks go: the writer moves on.
        poll = asyncio.ensure_future(handle.wait_last_add_confirmed(lac, 20_000))
        first = writer.metadata.last_ensemble
        for gone in first:
            await cluster.stop_bookie(cluster.bookie(str(gone)))
            await writer.append(b"b")
        assert await asyncio.wait_for(poll, 20) >= 1
        assert handle.view.updates >= 1
        assert not set(first) & set(handle.metadata.last_ensemble)
        while handle.last_add_confirmed < 2:  # the explicit LAC brings the last one
            await handle.wait_last_add_confirmed(handle.last_add_confirmed, 5_000)
        # (entry 0 went with the first two bookies; the new segments are read from the new)
        assert [e.data async for e in handle.read(1, 2)] == [b"b", b"b"]
        await writer.close()
        # Sealed: the watch ends and the handle knows its last entry.
        await asyncio.wait_for(_until(lambda: handle.is_closed), 20)
        assert handle.last_add_confirmed == 2
        assert not handle.view.watching
        await handle.close()


async def _until(condition) -> None:
    while not condition():
        await asyncio.sleep(0.01)


@on_virtual_time
async def test_watches_are_bounded_per_client_and_end_with_the_handle_or_the_client():
    async with MemoryCluster(3) as cluster:
        bk = await cluster.client(CLIENT)
        writer = await bk.create_ledger(3, 2, 2)
        await writer.append(b"a")
        reader_bk = await cluster.client(
            ClientConfig(long_poll_timeout_ms=50, metadata_watches_max=1)
        )
        first = await reader_bk.open_ledger(writer.ledger_id, recovery=False)
        second = await reader_bk.open_ledger(writer.ledger_id, recovery=False)
        await first.wait_last_add_confirmed(5, 50)
        await second.wait_last_add_confirmed(5, 50)
        assert first.view.watching
        assert not second.view.watching, "metadata_watches_max=1"
        await first.close()
        assert not first.view.watching
        await second.wait_last_add_confirmed(5, 50)
        assert second.view.watching
        await reader_bk.close()
        assert not second.view.watching
        await writer.close()
