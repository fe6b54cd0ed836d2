"""More of BookKeeper's client scenarios on the in-memory cluster: LAC piggyback, long poll and
explicit LAC (§3 rows 12-14, acceptance (f)), close (row 5), adds that cannot reach a quorum
(row 8), reads with a failed bookie (row 16) and opens after a bookie crash (row 22)."""

from __future__ import annotations

import asyncio

import pytest

from bkeeper.client.config import ClientConfig
from bkeeper.common.errors import (
    BKeeperError,
    LedgerClosedError,
    LedgerFencedError,
    NotEnoughBookiesError,
)
from bkeeper.meta.ledger_metadata import LedgerState
from bkeeper.testing.cluster import MemoryCluster
from bkeeper.wire.messages import AddRequest

FAST = ClientConfig(add_timeout_ms=300, read_timeout_ms=300, speculative_read_timeout_ms=50)


async def test_lac_is_piggybacked_and_long_polled():  # rows 13, 14, (f)
    async with MemoryCluster(3) as cluster:
        writer = await (await cluster.client(FAST)).create_ledger(3, 3, 2, password=b"pw")
        for i in range(10):
            await writer.append(b"%d" % i)
        reader = await (await cluster.client(FAST)).open_ledger(
            writer.ledger_id, b"pw", recovery=False
        )
        # Without explicit LAC the bookies know LAC = last - 1 (carried by the last entry).
        assert await reader.read_last_add_confirmed() == 8
        entries = [e async for e in reader.read(0, 8)]
        assert [e.data for e in entries] == [b"%d" % i for i in range(9)]
        assert reader.last_add_confirmed == 8

        async def append_later() -> None:
            await asyncio.sleep(0.05)
            await writer.append(b"10")

        appending = asyncio.create_task(append_later())
        started = asyncio.get_running_loop().time()
        lac = await asyncio.wait_for(reader.wait_last_add_confirmed(8, 5_000), 5)
        assert lac == 9 and asyncio.get_running_loop().time() - started < 2
        await appending
        # Nothing new: the long poll returns the current LAC at its timeout.
        assert await reader.wait_last_add_confirmed(9, 100) == 9


async def test_long_poll_works_with_a_bookie_down():  # row 13
    async with MemoryCluster(4) as cluster:
        writer = await (await cluster.client(FAST)).create_ledger(3, 3, 2, password=b"pw")
        await writer.append(b"0")
        reader = await (await cluster.client(FAST)).open_ledger(
            writer.ledger_id, b"pw", recovery=False
        )
        await cluster.crash(
            cluster.bookies.index(cluster.bookie(writer.ensemble[0])), restart=False
        )
        waiting = asyncio.create_task(reader.wait_last_add_confirmed(-1, 3_000))
        await asyncio.sleep(0.05)
        await writer.append(b"1")
        assert await asyncio.wait_for(waiting, 5) >= 0


async def test_explicit_lac_lets_readers_see_the_last_entry():  # row 12, (f)
    async with MemoryCluster(3) as cluster:
        config = ClientConfig(add_timeout_ms=300, read_timeout_ms=300, explicit_lac_interval_ms=20)
        writer = await (await cluster.client(config)).create_ledger(3, 3, 2, password=b"pw")
        for i in range(5):
            await writer.append(b"%d" % i)
        reader = await (await cluster.client(FAST)).open_ledger(
            writer.ledger_id, b"pw", recovery=False
        )
        deadline = asyncio.get_running_loop().time() + 5
        while await reader.read_explicit_last_add_confirmed() < 4:
            assert asyncio.get_running_loop().time() < deadline, "explicit LAC never arrived"
            await asyncio.sleep(0.02)
        assert await reader.read_last_add_confirmed() == 4
        assert (await reader.read_entry(4)).data == b"4"


async def test_close_semantics():  # row 5
    async with MemoryCluster(3) as cluster:
        bk = await cluster.client(FAST)
        writer = await bk.create_ledger(3, 3, 2, password=b"pw")
        futures = [await writer.append_async(b"x" * 10) for _ in range(20)]
        await writer.close()  # pending adds complete first
        assert all(f.done() and f.result() == i for i, f in enumerate(futures))
        meta = await bk.ledger_metadata(writer.ledger_id)
        assert (meta.state, meta.last_entry_id, meta.length) == (LedgerState.CLOSED, 19, 200)
        await writer.close()  # twice is fine
        with pytest.raises(LedgerClosedError):
            await writer.append(b"late")

        # Closed by a recovering reader at the same end: close still succeeds.
        second = await bk.create_ledger(3, 3, 2, password=b"pw")
        for _ in range(3):
            await second.append(b"y")
        other = await cluster.client(FAST)
        await other.open_ledger(second.ledger_id, b"pw")
        with pytest.raises(LedgerFencedError):
            await second.append(b"fenced")
        with pytest.raises(BKeeperError):  # the writer learnt it was fenced
            await second.close()
        closed = await bk.ledger_metadata(second.ledger_id)
        assert closed.state is LedgerState.CLOSED and closed.last_entry_id == 2


async def test_adds_that_cannot_reach_a_quorum_fail_in_bounded_time():  # row 8
    async with MemoryCluster(3) as cluster:
        writer = await (await cluster.client(FAST)).create_ledger(3, 3, 2, password=b"pw")
        await writer.append(b"ok")
        for index in (1, 2):
            cluster.fault(index, AddRequest, drop=True, serve_dropped=False)
        started = asyncio.get_running_loop().time()
        with pytest.raises((NotEnoughBookiesError, BKeeperError)):
            await asyncio.wait_for(writer.append(b"stuck"), 10)
        assert asyncio.get_running_loop().time() - started < 5
        with pytest.raises(BKeeperError):
            await asyncio.wait_for(writer.append(b"later"), 10)


async def test_reads_and_opens_after_a_bookie_crash():  # rows 16, 22
    async with MemoryCluster(3) as cluster:
        bk = await cluster.client(FAST)
        writer = await bk.create_ledger(3, 3, 2, password=b"pw")
        for i in range(30):
            await writer.append(b"%d" % i)
        await cluster.crash(0, restart=False)
        plain = await (await cluster.client(FAST)).open_ledger(
            writer.ledger_id, b"pw", recovery=False
        )
        lac = await asyncio.wait_for(plain.read_last_add_confirmed(), 5)
        assert lac == 28
        assert [e.data async for e in plain.read(0, lac)] == [b"%d" % i for i in range(29)]
        recovered = await (await cluster.client(FAST)).open_ledger(writer.ledger_id, b"pw")
        assert recovered.metadata.last_entry_id == 29
        assert [e.data async for e in recovered.read()] == [b"%d" % i for i in range(30)]
        with pytest.raises(BKeeperError):
            await recovered.read_entry(30)
