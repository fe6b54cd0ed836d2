"""Ensembles, placement and back-pressure on the in-memory cluster (issue 20, item 7).

What docs/client.md says about when a bookie is replaced and where its replacement comes
from, one test per claim: a slow bookie is kept while the others make Qa, a bookie is blamed
only for adds still short of Qa, pending adds wait for a slot, rack-aware placement spreads
write sets over racks, read-only bookies never join an ensemble, ``ensemble_changes_max``
holds, an ensemble change that races a recovery fences the writer, and closing the client
fails what is pending. Every await that could hang is bounded.
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from bkeeper.client.config import ClientConfig
from bkeeper.common.errors import (
    ClientClosedError,
    LedgerClosedError,
    LedgerFencedError,
)
from bkeeper.meta.ledger_metadata import LedgerState
from bkeeper.testing.cluster import MemoryCluster
from bkeeper.testing.virtual_time import on_virtual_time
from bkeeper.wire.codes import Protocol, StatusCode
from bkeeper.wire.messages import AddRequest, ReadRequest
from tests.client.test_scenarios_more import bounded, read_all

FAST = ClientConfig(
    add_timeout_ms=300,
    read_timeout_ms=300,
    speculative_read_timeout_ms=50,
    timeout_check_interval_ms=20,
)
PROTOCOLS = pytest.mark.parametrize("protocol", [Protocol.V2, Protocol.V3], ids=["v2", "v3"])


def index_of(cluster: MemoryCluster, bookie_id: str) -> int:
    return cluster.bookies.index(cluster.bookie(bookie_id))


async def until(condition, what: str, limit_s: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    async def wait() -> None:
        while not condition():
            await asyncio.sleep(0.01)

    try:
        await asyncio.wait_for(wait(), limit_s)
    except TimeoutError:
        raise AssertionError(f"{what} within {limit_s} s") from None


def entries_on(cluster: MemoryCluster, index: int, ledger_id: int) -> list[int]:
    storage = cluster.bookies[index].storage
    assert storage is not None
    if not storage.ledger_exists(ledger_id):
        return []
    return sorted(storage.list_entries(ledger_id))


@PROTOCOLS
@on_virtual_time
async def test_a_bookie_slower_than_the_add_timeout_is_kept_while_qa_holds(protocol: Protocol):
    async with MemoryCluster(4) as cluster:
        bk = await cluster.client(dataclasses.replace(FAST, protocol=protocol))
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        ensemble = wh.ensemble
        slow = index_of(cluster, ensemble[1])
        cluster.fault(slow, AddRequest, delay_s=1.0)  # > add_timeout_ms (0.3 s)
        for i in range(20):
            assert await bounded(wh.append(b"%d" % i)) == i
        # Every one of its answers comes a second late, long after the add timeout:
        await until(lambda: entries_on(cluster, slow, wh.ledger_id) == list(range(20)), "served")
        assert wh.ensemble == ensemble
        assert wh.metadata.segments == {0: ensemble}
        await bounded(wh.close())
        assert wh.metadata.last_entry_id == 19


@PROTOCOLS
@on_virtual_time
async def test_bookies_are_blamed_only_for_adds_short_of_qa(protocol: Protocol):
    async with MemoryCluster(5) as cluster:
        bk = await cluster.client(dataclasses.replace(FAST, protocol=protocol))
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        ensemble = wh.ensemble
        assert await bounded(wh.append(b"0")) == 0
        slow = [index_of(cluster, b) for b in ensemble[1:]]
        for index in slow:
            cluster.fault(index, AddRequest, delay_s=5.0)
        # Entry 1 cannot make Qa in time: both silent bookies go, the spares take over.
        assert await bounded(wh.append(b"1")) == 1
        spares = {b.bookie_id for b in cluster.bookies} - set(ensemble)
        assert wh.ensemble[0] == ensemble[0] and set(wh.ensemble[1:]) == spares
        assert wh.metadata.segments == {0: ensemble, 1: wh.ensemble}
        await bounded(wh.close())
        reader = await cluster.client(FAST)
        rh = await bounded(reader.open_ledger(wh.ledger_id, b"pw"))
        assert await read_all(rh) == [b"0", b"1"]


@PROTOCOLS
@on_virtual_time
async def test_a_cancelled_append_does_not_stall_the_pipeline(protocol: Protocol):
    async with MemoryCluster(3) as cluster:
        bk = await cluster.client(dataclasses.replace(FAST, protocol=protocol))
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        for index in range(3):
            cluster.fault(index, AddRequest, delay_s=0.1)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(wh.append(b"given up on"), 0.01)
        for index in range(3):
            cluster.heal(index)
        # The add the caller stopped waiting for still completes, first.
        assert await bounded(wh.append(b"next")) == 1
        assert wh.last_add_confirmed == 1
        assert len(wh.metadata.segments) == 1
        await bounded(wh.close())
        assert wh.metadata.last_entry_id == 1


@on_virtual_time
async def test_pending_adds_wait_for_a_slot():
    config = dataclasses.replace(FAST, pending_adds_max=2, add_timeout_ms=60_000)
    async with MemoryCluster(4) as cluster:
        bk = await cluster.client(config)
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        hung = [index_of(cluster, b) for b in wh.ensemble[:2]]
        for index in hung:
            cluster.fault(index, AddRequest, drop=True, serve_dropped=False)
        first = [await bounded(wh.append_async(b"%d" % i)) for i in range(2)]
        third = asyncio.ensure_future(wh.append_async(b"2"))
        for _ in range(20):
            await asyncio.sleep(0)
        assert not third.done() and wh.pending_adds == 2
        # A hung bookie goes away: its adds move to the spare, complete, and free the slots.
        await cluster.stop_bookie(cluster.bookies[hung[0]])
        assert await bounded(asyncio.gather(*first)) == [0, 1]
        assert await bounded(await bounded(third)) == 2
        assert cluster.bookies[hung[0]].bookie_id not in wh.ensemble


RACKS = {f"bookie-{i}:3181": f"/rack-{i % 3}" for i in range(6)}


@on_virtual_time
async def test_rack_aware_placement_spreads_every_write_set_over_racks():
    config = dataclasses.replace(FAST, placement="rackaware", racks=RACKS)
    async with MemoryCluster(6) as cluster:
        bk = await cluster.client(config)
        for _ in range(20):
            wh = await bk.create_ledger(3, 3, 2, password=b"pw")
            assert sorted(RACKS[b] for b in wh.ensemble) == ["/rack-0", "/rack-1", "/rack-2"]
        # A replacement comes from the rack the write set lacks: the failed bookie's partner.
        gone = wh.ensemble[0]
        partner = next(b for b in RACKS if RACKS[b] == RACKS[gone] and b != gone)
        await cluster.stop_bookie(cluster.bookie(gone))
        assert await bounded(wh.append(b"x")) == 0
        assert wh.ensemble == (partner, *wh.metadata.segments[0][1:])


@on_virtual_time
async def test_read_only_bookies_never_join_an_ensemble():
    async with MemoryCluster(4) as cluster:
        read_only = cluster.bookies[3]
        assert read_only.registration is not None
        await read_only.registration.set_read_only(True)
        bk = await cluster.client(FAST)
        writable = {b.bookie_id for b in cluster.bookies[:3]}
        for _ in range(10):
            wh = await bk.create_ledger(3, 3, 2, password=b"pw")
            assert set(wh.ensemble) == writable
        assert await bounded(wh.append(b"0")) == 0
        await cluster.stop_bookie(cluster.bookie(wh.ensemble[0]))
        # Not the read-only bookie: the writer goes on degraded with the two left.
        assert await bounded(wh.append(b"1")) == 1
        assert wh.degraded == {wh.ensemble[0]}
        assert read_only.bookie_id not in wh.metadata.last_ensemble


@on_virtual_time
async def test_ensemble_changes_max_is_enforced():
    config = dataclasses.replace(FAST, ensemble_changes_max=1)
    async with MemoryCluster(5) as cluster:
        bk = await cluster.client(config)
        wh = await bk.create_ledger(3, 3, 3, password=b"pw")
        assert await bounded(wh.append(b"0")) == 0
        await cluster.stop_bookie(cluster.bookie(wh.ensemble[0]))
        assert await bounded(wh.append(b"1")) == 1  # the one change allowed
        await cluster.stop_bookie(cluster.bookie(wh.ensemble[1]))
        with pytest.raises(LedgerClosedError, match="more than 1 ensemble changes"):
            await bounded(wh.append(b"2"))
        assert len(wh.metadata.segments) == 2
        with pytest.raises(LedgerClosedError):
            await bounded(wh.append(b"3"))


@on_virtual_time
async def test_an_ensemble_change_that_races_a_recovery_fences_the_writer():
    async with MemoryCluster(4) as cluster:
        writer = await cluster.client(FAST)
        wh = await writer.create_ledger(3, 3, 2, password=b"pw")
        for i in range(5):
            assert await bounded(wh.append(b"%d" % i)) == i
        # The reader's recovery marks the ledger IN_RECOVERY, then its fencing reads hang.
        for index in range(4):
            cluster.fault(index, ReadRequest, drop=True, serve_dropped=False)
        reader = await cluster.client(FAST)
        recovery = asyncio.ensure_future(reader.open_ledger(wh.ledger_id, b"pw"))

        async def state() -> LedgerState:
            return (await writer.ledger_metadata(wh.ledger_id)).state

        for _ in range(200):
            if await state() is LedgerState.IN_RECOVERY:
                break
            await asyncio.sleep(0.01)
        assert await state() is LedgerState.IN_RECOVERY
        # Now a bookie fails the writer's next add: its ensemble change loses the CAS.
        cluster.fault(index_of(cluster, wh.ensemble[0]), AddRequest, error=StatusCode.EIO)
        with pytest.raises(LedgerFencedError, match="another client is recovering it"):
            await bounded(wh.append(b"5"))
        assert len((await writer.ledger_metadata(wh.ledger_id)).segments) == 1
        with pytest.raises(LedgerFencedError):
            await bounded(wh.append(b"6"))
        recovery.cancel()
        for index in range(4):
            cluster.heal(index)
        rh = await bounded(reader.open_ledger(wh.ledger_id, b"pw"))
        assert rh.metadata.state is LedgerState.CLOSED
        # Entry 5 reached the two other bookies but was never acknowledged (no add completes
        # during an ensemble change): recovery keeps it, as BookKeeper may.
        assert rh.metadata.last_entry_id == 5
        assert await read_all(rh) == [b"%d" % i for i in range(6)]


@on_virtual_time
async def test_closing_the_client_fails_pending_adds():
    config = dataclasses.replace(FAST, add_timeout_ms=60_000)
    async with MemoryCluster(3) as cluster:
        bk = await cluster.client(config)
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        assert await bounded(wh.append(b"0")) == 0
        for index in range(2):
            cluster.fault(index, AddRequest, drop=True, serve_dropped=False)
        pending = [await bounded(wh.append_async(b"%d" % i)) for i in range(1, 4)]
        assert wh.pending_adds == 3
        await bounded(bk.close())
        for future in pending:
            with pytest.raises(ClientClosedError, match="the client is closed"):
                await bounded(future)
        with pytest.raises(ClientClosedError):
            await wh.append(b"4")
