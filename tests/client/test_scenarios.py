"""Client scenarios on the in-memory cluster (real handlers and storage, no TCP)."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from bkeeper.client.config import ClientConfig
from bkeeper.common.errors import (
    ClientClosedError,
    LedgerFencedError,
    NotEnoughBookiesError,
    UnauthorizedAccessError,
)
from bkeeper.meta.ledger_metadata import LedgerState
from bkeeper.testing.cluster import MemoryCluster
from bkeeper.testing.virtual_time import on_virtual_time
from bkeeper.wire.codes import StatusCode
from bkeeper.wire.messages import AddRequest, ReadRequest

FAST = ClientConfig(add_timeout_ms=300, read_timeout_ms=300, speculative_read_timeout_ms=50)


async def read_all(handle) -> list[bytes]:
    return [e.data async for e in handle.read()]


@on_virtual_time
async def test_write_close_open_read():
    async with MemoryCluster(3) as cluster:
        bk = await cluster.client()
        wh = await bk.create_ledger(3, 3, 2, password=b"pw", custom_metadata={"app": b"x"})
        ids = await asyncio.gather(*(wh.append(b"e%d" % i) for i in range(100)))
        assert ids == list(range(100))
        await wh.close()
        meta = await bk.ledger_metadata(wh.ledger_id)
        assert meta.state is LedgerState.CLOSED and meta.last_entry_id == 99
        assert meta.custom_metadata["app"] == b"x"
        rh = await bk.open_ledger(wh.ledger_id, b"pw")
        assert await read_all(rh) == [b"e%d" % i for i in range(100)]


@on_virtual_time
async def test_striping_puts_each_entry_on_its_write_set():
    async with MemoryCluster(5) as cluster:
        bk = await cluster.client()
        wh = await bk.create_ledger(5, 2, 2, password=b"pw")
        for i in range(10):
            await wh.append(b"%d" % i)
        ensemble = wh.ensemble
        for entry in range(10):
            holders = {
                b.bookie_id
                for b in cluster.bookies
                if b.storage is not None
                and b.storage.ledger_exists(wh.ledger_id)
                and entry in b.storage.list_entries(wh.ledger_id)
            }
            assert holders == {ensemble[entry % 5], ensemble[(entry + 1) % 5]}


@on_virtual_time
async def test_recovery_fences_the_old_writer():  # scenario (a), §3 row 1
    async with MemoryCluster(3) as cluster:
        writer = await cluster.client()
        reader = await cluster.client()
        wh = await writer.create_ledger(3, 3, 2, password=b"pw")
        for i in range(10):
            await wh.append(b"%d" % i)
        rh = await reader.open_ledger(wh.ledger_id, b"pw")
        assert rh.metadata.last_entry_id == 9
        with pytest.raises(LedgerFencedError):
            await wh.append(b"late")
        assert await read_all(rh) == [b"%d" % i for i in range(10)]


@on_virtual_time
async def test_no_recovery_open_does_not_fence():
    async with MemoryCluster(3) as cluster:
        bk = await cluster.client()
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        for i in range(5):
            await wh.append(b"%d" % i)
        rh = await bk.open_ledger(wh.ledger_id, b"pw", recovery=False)
        assert await rh.read_last_add_confirmed() == 3  # piggybacked LAC: last - 1
        await wh.append(b"5")
        assert [e.data async for e in rh.read(0, 3)] == [b"0", b"1", b"2", b"3"]


async def wait_until(condition, timeout_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition never held"
        await asyncio.sleep(0.005)


@pytest.mark.parametrize("found_first", [False, True])
@on_virtual_time
async def test_recovery_keeps_exactly_the_acknowledged_prefix(found_first: bool):  # (b)
    """Entry 20 reaches only bookie 0: never acknowledged. Recovery decides each entry on
    the first answers that settle it: two "absent" answers end the ledger at 19; the entry
    found on bookie 0 first is re-replicated and kept (BookKeeper allows either)."""
    async with MemoryCluster(3) as cluster:
        writer = await cluster.client(FAST)
        wh = await writer.create_ledger(3, 3, 2, password=b"pw")
        for i in range(20):
            await wh.append(b"%d" % i)
        cluster.fault(1, AddRequest, error=StatusCode.EIO)
        cluster.fault(2, AddRequest, error=StatusCode.EIO)
        late = asyncio.ensure_future(wh.append(b"unacked"))
        await wait_until(lambda: cluster.bookies[0].storage.last_entry_id(wh.ledger_id) == 20)
        cluster.heal(1)
        cluster.heal(2)
        slow = [1, 2] if found_first else [0]  # whose reads answer last
        for index in slow:
            cluster.fault(index, ReadRequest, delay_s=0.3)
        reader = await cluster.client(ClientConfig(read_timeout_ms=2_000))
        rh = await reader.open_ledger(wh.ledger_id, b"pw")
        for index in slow:
            cluster.heal(index)
        expected = [b"%d" % i for i in range(20)] + ([b"unacked"] if found_first else [])
        assert rh.metadata.last_entry_id == len(expected) - 1
        assert await read_all(rh) == expected
        late.cancel()


@on_virtual_time
async def test_concurrent_recoveries_converge():  # (c)
    async with MemoryCluster(3) as cluster:
        writer = await cluster.client()
        wh = await writer.create_ledger(3, 3, 2, password=b"pw")
        for i in range(30):
            await wh.append(b"%d" % i)
        readers = [await cluster.client() for _ in range(4)]
        handles = await asyncio.gather(*(r.open_ledger(wh.ledger_id, b"pw") for r in readers))
        assert {h.metadata.last_entry_id for h in handles} == {29}
        assert {h.metadata.length for h in handles} == {sum(len(b"%d" % i) for i in range(30))}


@on_virtual_time
async def test_ensemble_change_keeps_acknowledged_entries():  # (d), §3 row 6
    async with MemoryCluster(4) as cluster:
        bk = await cluster.client(FAST)
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        for i in range(10):
            await wh.append(b"%d" % i)
        victim = cluster.bookies.index(cluster.bookie(wh.ensemble[0]))
        await cluster.stop_bookie(cluster.bookies[victim])
        for i in range(10, 30):
            await wh.append(b"%d" % i)
        assert cluster.bookies[victim].bookie_id not in wh.ensemble
        meta = wh.metadata
        assert len(meta.segments) == 2
        await wh.close()
        rh = await bk.open_ledger(wh.ledger_id, b"pw")
        assert await read_all(rh) == [b"%d" % i for i in range(30)]


@on_virtual_time
async def test_not_enough_bookies_fails_adds():
    """With degraded writes off (see test_degraded_scenarios.py for them on)."""
    async with MemoryCluster(3) as cluster:
        bk = await cluster.client(dataclasses.replace(FAST, degraded_writes=False))
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        await wh.append(b"0")
        await cluster.stop_bookie(cluster.bookies[0])
        with pytest.raises(NotEnoughBookiesError):
            await wh.append(b"1")


@on_virtual_time
async def test_qa_minus_one_failures_lose_nothing():  # (e)
    async with MemoryCluster(3) as cluster:
        bk = await cluster.client(FAST)
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        for i in range(50):
            await wh.append(b"%d" % i)
        await cluster.crash(0, restart=False)
        reader = await cluster.client(FAST)
        rh = await reader.open_ledger(wh.ledger_id, b"pw")
        assert await read_all(rh) == [b"%d" % i for i in range(50)]


@on_virtual_time
async def test_wrong_password_is_unauthorized():
    async with MemoryCluster(3) as cluster:
        bk = await cluster.client()
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        await wh.append(b"x")
        with pytest.raises(UnauthorizedAccessError):
            await bk.open_ledger(wh.ledger_id, b"bad")


@on_virtual_time
async def test_slow_replica_triggers_speculative_read():  # §3 row 15
    async with MemoryCluster(3) as cluster:
        bk = await cluster.client(FAST)
        wh = await bk.create_ledger(3, 3, 3, password=b"pw")
        for i in range(5):
            await wh.append(b"%d" % i)
        await wh.close()
        rh = await bk.open_ledger(wh.ledger_id, b"pw")
        first = cluster.bookies.index(cluster.bookie(rh.metadata.last_ensemble[0]))
        cluster.fault(first, ReadRequest, delay_s=30.0)
        assert (await rh.read_entry(0)).data == b"0"
        # answered by another replica while the first one's answer is still 30 s away
        assert cluster.requests_in_flight() == 1


@on_virtual_time
async def test_digest_mismatch_is_a_bad_replica():  # (l)
    async with MemoryCluster(3) as cluster:
        bk = await cluster.client(FAST)
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        await wh.append(b"good")
        await wh.close()
        rh = await bk.open_ledger(wh.ledger_id, b"pw")
        first = cluster.bookies.index(cluster.bookie(rh.metadata.last_ensemble[0]))
        fault = cluster.fault(first, ReadRequest, corrupt=True)
        before = cluster.bookies[first].requests
        assert (await rh.read_entry(0)).data == b"good"  # the corrupt replica was skipped
        assert cluster.bookies[first].requests == before + 1
        assert fault.applied == 1  # its one answer was the corrupt one


@on_virtual_time
async def test_client_closed_errors():  # §3 row 20
    async with MemoryCluster(3) as cluster:
        bk = await cluster.client()
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        await wh.append(b"x")
        await bk.close()
        with pytest.raises(ClientClosedError):
            await wh.append(b"y")
        with pytest.raises(ClientClosedError):
            await bk.create_ledger(3, 3, 2)
        with pytest.raises(ClientClosedError):
            await bk.open_ledger(wh.ledger_id, b"pw")


@on_virtual_time
async def test_recovery_with_a_hung_bookie_does_not_wait_per_entry():  # §3 rows 1, 2, 4
    async with MemoryCluster(4) as cluster:
        bk = await cluster.client(FAST)
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        hung = cluster.bookies.index(cluster.bookie(wh.ensemble[1]))
        cluster.fault(hung, None, drop=True, serve_dropped=False)
        futures = [await wh.append_async(b"%d" % i) for i in range(500)]
        ids = await asyncio.gather(*futures)  # Qa = 2 is met without the hung bookie
        assert ids == list(range(500))
        reader = await cluster.client(FAST)
        # One silent bookie must cost a few read timeouts (300 ms) in all, not one per entry
        # (500 entries x 300 ms would be 150 s).
        rh = await asyncio.wait_for(reader.open_ledger(wh.ledger_id, b"pw"), 10)
        assert rh.metadata.last_entry_id == 499
        assert await read_all(rh) == [b"%d" % i for i in range(500)]
        with pytest.raises(LedgerFencedError):
            await wh.append(b"fenced")


@pytest.mark.parametrize("batch", [1, 3, 13])
@on_virtual_time
async def test_recovery_batch_sizes_find_the_same_end(batch: int):  # §3 row 2
    async with MemoryCluster(3) as cluster:
        bk = await cluster.client(FAST)
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        for i in range(40):
            await wh.append(b"%d" % i)
        # Entry 40 reaches one bookie only: not acknowledged, not part of the recovered ledger.
        cluster.fault(1, AddRequest, error=StatusCode.EIO)
        cluster.fault(2, AddRequest, error=StatusCode.EIO)
        pending = await wh.append_async(b"40")
        await wait_until(lambda: cluster.bookies[0].storage.last_entry_id(wh.ledger_id) == 40)
        cluster.heal(1)
        cluster.heal(2)
        cluster.fault(0, ReadRequest, delay_s=0.3)  # the two "absent" answers come first
        reader = await cluster.client(
            ClientConfig(read_timeout_ms=2_000, recovery_batch_entries=batch)
        )
        rh = await reader.open_ledger(wh.ledger_id, b"pw")
        cluster.heal(0)
        assert rh.metadata.last_entry_id == 39
        assert await read_all(rh) == [b"%d" % i for i in range(40)]
        pending.cancel()


@on_virtual_time
async def test_a_bookie_that_connects_late_still_gets_every_entry_of_its_write_set() -> None:
    """Qw = 3, Qa = 2: entries the two fast bookies acknowledged while the third was still
    connecting are written to the third too once it is up (not left with two replicas)."""
    async with MemoryCluster(3) as cluster:
        bk = await cluster.client(FAST)
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        late = cluster.bookie(wh.ensemble[2])
        late.connect_delay_s = 0.2
        ids = await asyncio.gather(*[wh.append(b"e%d" % i) for i in range(20)])
        assert ids == list(range(20))
        for _ in range(500):  # until the late bookie got its 20 adds (5 s at most)
            if late.requests >= 20:
                break
            await asyncio.sleep(0.01)
        await wh.close()
        assert late.storage is not None
        for i in range(20):
            body = bytes(late.storage.read_entry(wh.ledger_id, i))
            assert body.endswith(b"e%d" % i), (i, body)


@on_virtual_time
async def test_a_small_pipeline_does_not_give_up_on_a_bookie_that_connects_late() -> None:
    """``pending_adds_max`` bounds adds not yet acknowledged; entries the two fast bookies
    acknowledged while the third was still connecting are no longer pending. Before: more
    than ``pending_adds_max`` of them waiting for the connection counted the third bookie as
    failed, silently, and with no spare bookie the writer failed (the Spark sink's flake:
    "1 failed to answer this writer" with client.pending_adds_max=16). Entry ids follow the
    appends' call order (before: woken appends that found no room queued again behind later
    ones)."""
    async with MemoryCluster(3) as cluster:
        config = ClientConfig(add_timeout_ms=5_000, read_timeout_ms=300, pending_adds_max=4)
        bk = await cluster.client(config)
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        late = cluster.bookie(wh.ensemble[2])
        late.connect_delay_s = 0.2
        ids = await asyncio.gather(*[wh.append(b"e%d" % i) for i in range(40)])
        assert ids == list(range(40))
        await wh.close()  # waits for the late bookie's connection: it gets its copies
        assert wh.metadata.segments == {0: wh.ensemble}
        assert late.storage is not None
        for i in range(40):
            body = bytes(late.storage.read_entry(wh.ledger_id, i))
            assert body.endswith(b"e%d" % i), (i, body)


@on_virtual_time
async def test_append_many_in_call_order_with_single_appends():
    config = ClientConfig(pending_adds_max=8)
    async with MemoryCluster(5) as cluster:
        bk = await cluster.client(config)
        wh = await bk.create_ledger(5, 3, 2, password=b"pw")  # striped: E > Qw
        with pytest.raises(ValueError, match="pending_adds_max"):
            await wh.append_many([b"x"] * 9)
        with pytest.raises(ValueError, match="not 0"):
            await wh.append_many([])
        # a batch that must wait for room is not overtaken by a later single append
        first = [await wh.append_async(b"a%d" % i) for i in range(6)]
        batch = asyncio.ensure_future(wh.append_many([b"b%d" % i for i in range(5)]))
        await asyncio.sleep(0)  # the batch now waits for room for 5
        single = asyncio.ensure_future(wh.append(b"c"))
        assert await asyncio.gather(*first) == list(range(6))
        assert await batch == range(6, 11)
        assert await single == 11
        await wh.close()
        rh = await bk.open_ledger(wh.ledger_id, b"pw")
        expected = [b"a%d" % i for i in range(6)] + [b"b%d" % i for i in range(5)] + [b"c"]
        assert await read_all(rh) == expected
        for entry in range(12):  # each entry on exactly its write set
            holders = {
                b.bookie_id
                for b in cluster.bookies
                if b.storage is not None
                and b.storage.ledger_exists(wh.ledger_id)
                and entry in b.storage.list_entries(wh.ledger_id)
            }
            ensemble = wh.ensemble
            assert holders == {ensemble[(entry + i) % 5] for i in range(3)}


@on_virtual_time
async def test_a_long_poll_brings_the_next_entry_with_the_lac():
    async with MemoryCluster(3) as cluster:
        bk = await cluster.client()
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        assert [await wh.append(b"e%d" % i) for i in range(3)] == [0, 1, 2]
        tail = await (await cluster.client()).open_ledger(wh.ledger_id, b"pw", recovery=False)
        lac = await tail.read_last_add_confirmed()  # 1: entry 2's LAC is not known yet
        polled = asyncio.ensure_future(tail.wait_last_add_confirmed(lac, timeout_ms=30_000))
        assert await wh.append(b"e3") == 3  # carries LAC 2
        assert await asyncio.wait_for(polled, 30) >= lac + 1
        asked = sum(b.requests for b in cluster.bookies)
        assert [e.data async for e in tail.read(lac + 1, lac + 1)] == [b"e%d" % (lac + 1)]
        assert sum(b.requests for b in cluster.bookies) == asked  # no round trip for it
        assert [e.data async for e in tail.read(0, lac + 1)] == [b"e%d" % i for i in range(lac + 2)]


@on_virtual_time
async def test_an_idle_writer_does_not_tick_and_its_next_add_still_times_out() -> None:
    """An open ledger nobody appends to woke its writer every ``timeout_check_interval_ms``
    (ten times a second, for every open ledger of a client); its timeout checks now pause
    while nothing is pending, and resume with the next append: a bookie that then does not
    answer is blamed an add timeout later, as before."""
    async with MemoryCluster(4) as cluster:
        bk = await cluster.client(FAST)
        wh = await bk.create_ledger(3, 3, 3, password=b"pw")
        assert await wh.append(b"before") == 0
        ticks = 0
        tick = wh._adds.tick

        def counted(now: float) -> object:
            nonlocal ticks
            ticks += 1
            return tick(now)

        wh._adds.tick = counted  # type: ignore[method-assign]
        await asyncio.sleep(60.0)
        assert ticks <= 1  # before: 600
        silent = wh.ensemble[0]
        cluster.fault(cluster.bookies.index(cluster.bookie(silent)), AddRequest, drop=True)
        assert await asyncio.wait_for(wh.append(b"after"), 30) == 1
        assert silent not in wh.ensemble  # timed out, replaced by the spare
        assert 3 <= ticks <= 30
        await wh.close()
