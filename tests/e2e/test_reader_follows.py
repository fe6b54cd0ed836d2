"""Readers follow their ledger's metadata (issue 22, part 1), with real bookie processes: a
tailing log reader keeps up, with no gap and no duplicate, while the writer's ensemble changes
twice (both bookies it was opened with stopped); later, both bookies of the sealed ledger are
replaced by auto-recovery's ``recover`` while a log reader and a read handle are part-way
through it, and both read on from the new bookies."""

from __future__ import annotations

import asyncio

import pytest

from bkeeper.autorecovery import admin
from bkeeper.autorecovery.config import AutoRecoveryConfig
from bkeeper.client import BookKeeper, ClientConfig
from bkeeper.namedlog import LogConfig, NamedLogs, Position

WRITER = ClientConfig(add_timeout_ms=2_000, explicit_lac_interval_ms=50)
READER = ClientConfig(read_timeout_ms=2_000, speculative_read_timeout_ms=300)
#: Reads a ledger five entries per request, one request at a time: part-way for a while.
SLOW_READER = ClientConfig(
    read_timeout_ms=2_000,
    speculative_read_timeout_ms=300,
    batch_read_entries_max=5,
    batch_reads_in_flight_max=1,
    read_ahead_entries_max=5,
)
LOG = LogConfig(ensemble_size=2, write_quorum=2, ack_quorum=2, tail_poll_ms=200)


async def take(reader, count: int, timeout_s: float = 60.0) -> list:
    records = []
    while len(records) < count:
        record = await reader.next(timeout_s)
        assert record is not None, f"{len(records)} of {count} records, then none in {timeout_s} s"
        records.append(record)
    return records


def bookies_of(meta) -> set[str]:
    return {str(b) for ensemble in meta.segments.values() for b in ensemble}


@pytest.mark.parametrize("real_cluster", [5], indirect=True)
async def test_readers_follow_ensemble_changes_and_replaced_bookies(real_cluster) -> None:
    payloads = [b"r%d" % i for i in range(30)]
    async with (
        BookKeeper(real_cluster.uri, WRITER) as writer_bk,
        BookKeeper(real_cluster.uri, READER) as reader_bk,
    ):
        named = await NamedLogs(writer_bk, LOG).create("follow")
        writer = await named.open_writer()
        reader = await NamedLogs(reader_bk, LOG).log("follow").open_reader()
        records = []
        for payload in payloads[:10]:
            await writer.append(payload)
        records += await take(reader, 10)  # tailing the open ledger, long-polling it
        first = [str(b) for b in (await writer_bk.ledger_metadata(writer.ledger_id)).last_ensemble]
        for round_, gone in enumerate(first):
            await asyncio.to_thread(real_cluster.stop, real_cluster.index_of(gone))
            for payload in payloads[10 * (round_ + 1) : 10 * (round_ + 2)]:
                await writer.append(payload)
            records += await take(reader, 10)
        ledger_id = writer.ledger_id
        meta = await writer_bk.ledger_metadata(ledger_id)
        assert len(meta.segments) == 3, "two ensemble changes"
        assert not set(first) & {str(b) for b in meta.last_ensemble}
        assert [r.payload for r in records] == payloads, "no gap, no duplicate, in order"
        assert [r.position for r in records] == [Position(ledger_id, i) for i in range(30)]
        await writer.close()
        assert await reader.next(0.5) is None
        await reader.close()

        # Later: the first segment's bookies come back, and are replaced one after the other
        # while readers are part-way through the sealed ledger.
        for gone in first:
            await asyncio.to_thread(real_cluster.start, real_cluster.index_of(gone))
        async with BookKeeper(real_cluster.uri, SLOW_READER) as slow_bk:
            handle = await slow_bk.open_ledger(ledger_id, LOG.password, recovery=False)
            from_handle = [e.entry_id async for e in handle.read(0, 4)]
            behind = await NamedLogs(slow_bk, LOG).log("follow").open_reader()
            records = await take(behind, 5)
            for gone in first:
                await asyncio.to_thread(real_cluster.stop, real_cluster.index_of(gone))
                outcomes = await admin.recover(writer_bk, [gone], AutoRecoveryConfig())
                assert [(o.ledger_id, o.done) for o in outcomes] == [(ledger_id, True)]
            assert not bookies_of(await writer_bk.ledger_metadata(ledger_id)) & set(first)

            records += await take(behind, 25)
            assert [r.payload for r in records] == payloads, "no gap, no duplicate, in order"
            assert await behind.next(0.5) is None
            await behind.close()
            from_handle += [e.entry_id async for e in handle.read(5, 29)]
            assert from_handle == list(range(30))
            assert not bookies_of(handle.metadata) & set(first)
