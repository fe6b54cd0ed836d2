"""The replication worker repairs marked ledgers (in-memory cluster: real handlers, storage and
metadata driver; a fake clock decides grace periods and retry delays)."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Callable

import pytest

from bkeeper.autorecovery import worker as worker_module
from bkeeper.autorecovery.config import AutoRecoveryConfig
from bkeeper.autorecovery.expected import expected_entries
from bkeeper.autorecovery.repair import replicate_ledger
from bkeeper.autorecovery.worker import ReplicationWorker, WorkerStatus
from bkeeper.client.bookkeeper import BookKeeper
from bkeeper.client.config import ClientConfig
from bkeeper.common.errors import ConnectionLossError, LedgerFencedError, LedgerNotFoundError
from bkeeper.meta.layout import ur_ledger_path
from bkeeper.meta.ledger_metadata import LedgerMetadata, LedgerState
from bkeeper.meta.underreplication import UnderreplicatedLedger, UnderReplicationManager
from bkeeper.testing.clock import FakeClock
from bkeeper.testing.cluster import Fault, MemoryCluster
from bkeeper.testing.virtual_time import LoopClock, on_virtual_time
from bkeeper.wire.codes import StatusCode
from bkeeper.wire.messages import AddRequest

PASSWORD = b"secret"
CLIENT = ClientConfig(add_timeout_ms=60_000, read_timeout_ms=2_000)
CONFIG = AutoRecoveryConfig(
    idle_poll_interval_ms=2,
    failed_ledger_retry_delay_ms=10_000,
    open_ledger_grace_period_ms=30_000,
    entries_in_flight_max=16,
)
WAIT_S = 30.0  # generous: a bound on a hang, never a timing assertion


def payload(ledger_id: int, entry_id: int) -> bytes:
    return b"%d/%05d:" % (ledger_id, entry_id) + bytes([entry_id % 251]) * (100 + entry_id % 37)


async def write_ledger(
    bk: BookKeeper, sizes: tuple[int, int, int], entries: int, *, close: bool = True
) -> int:
    wh = await bk.create_ledger(*sizes, password=PASSWORD)
    await asyncio.gather(*[await wh.append_async(payload(wh.ledger_id, e)) for e in range(entries)])
    if close:
        await wh.close()
    return wh.ledger_id


async def assert_replicated(
    cluster: MemoryCluster, bk: BookKeeper, ledger_id: int, entries: int, gone: set[str]
) -> LedgerMetadata:
    """Every entry of the ledger is stored by every bookie of its write set in the current
    metadata, none of them ``gone``, and reads back byte-identical."""
    meta = await bk.ledger_metadata(ledger_id)
    assert meta.is_closed and meta.last_entry_id == entries - 1
    members = {str(b) for ensemble in meta.segments.values() for b in ensemble}
    assert not members & gone
    for bookie_id in members:
        storage = cluster.bookie(bookie_id).storage
        assert storage is not None
        held = list(expected_entries(meta, bookie_id, meta.last_entry_id))
        stored = set(storage.list_entries(ledger_id))
        assert not [e for e in held if e not in stored], bookie_id
        for entry_id in held:
            assert storage.read_entry(ledger_id, entry_id).endswith(payload(ledger_id, entry_id))
    rh = await bk.open_ledger(ledger_id, PASSWORD, recovery=False)
    got = [bytes(e.payload) async for e in rh.read(0, entries - 1)]
    assert got == [payload(ledger_id, e) for e in range(entries)]
    return meta


def members_of(meta: LedgerMetadata) -> set[str]:
    return {str(b) for ensemble in meta.segments.values() for b in ensemble}


@contextlib.asynccontextmanager
async def running(worker: ReplicationWorker) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(worker.run())
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def wait_for(worker: ReplicationWorker, check: Callable[[WorkerStatus], bool]) -> None:
    await asyncio.wait_for(worker.wait_for(check), WAIT_S)


async def new_urm(bk: BookKeeper, clock: FakeClock) -> UnderReplicationManager:
    urm = UnderReplicationManager(bk.cluster.store, bk.cluster.root, clock=clock)
    await urm.ensure_layout()
    return urm


async def lose_and_mark(
    cluster: MemoryCluster, lid: int, lost: str
) -> tuple[FakeClock, BookKeeper, UnderReplicationManager]:
    """Stop bookie ``lost`` and mark ``lid`` under-replicated for it; a fake clock, and a
    client and under-replication manager for a worker, on that clock."""
    await cluster.stop_bookie(cluster.bookie(lost))
    clock = FakeClock()
    worker_bk = await cluster.client(CLIENT)
    urm = await new_urm(worker_bk, clock)
    await urm.mark_underreplicated(lid, [lost])
    return clock, worker_bk, urm


def hang_adds(cluster: MemoryCluster, bookie_ids: set[str]) -> dict[str, Fault]:
    """Adds to these bookies are stored but never answered."""
    return {
        b: cluster.fault(cluster.bookies.index(cluster.bookie(b)), AddRequest, drop=True)
        for b in bookie_ids
    }


@on_virtual_time
async def test_worker_repairs_full_and_striped_ledgers() -> None:
    async with MemoryCluster(6) as cluster:
        bk = await cluster.client(CLIENT)
        ledgers = [await write_ledger(bk, (3, 3, 2), 120) for _ in range(4)]
        ledgers += [await write_ledger(bk, (5, 3, 2), 130) for _ in range(3)]
        # the lost bookie: one of the first full ledger's that the first striped one has too
        full = members_of(await bk.ledger_metadata(ledgers[0]))
        striped = members_of(await bk.ledger_metadata(ledgers[4]))
        lost = sorted(full & striped)[0]
        # one more with two segments: its first ensemble loses that bookie while it is written
        wh = await bk.create_ledger(3, 3, 2, password=PASSWORD)
        while lost not in members_of(await bk.ledger_metadata(wh.ledger_id)):
            await wh.close()  # placement is random: try again (half the ensembles have it)
            wh = await bk.create_ledger(3, 3, 2, password=PASSWORD)
        for e in range(40):
            await wh.append(payload(wh.ledger_id, e))
        await cluster.stop_bookie(cluster.bookie(lost))
        for e in range(40, 90):
            await wh.append(payload(wh.ledger_id, e))
        await wh.close()
        two_segments = wh.ledger_id
        assert len((await bk.ledger_metadata(two_segments)).segments) == 2
        ledgers.append(two_segments)
        counts = {lid: 120 for lid in ledgers[:4]} | {lid: 130 for lid in ledgers[4:7]}
        counts[two_segments] = 90

        worker_bk = await cluster.client(CLIENT)
        clock = FakeClock()
        urm = await new_urm(worker_bk, clock)
        on_lost = []
        for lid in ledgers:
            if lost in members_of(await bk.ledger_metadata(lid)):
                await urm.mark_underreplicated(lid, [lost])
                on_lost.append(lid)
        assert {ledgers[0], ledgers[4], two_segments} <= set(on_lost)
        worker = ReplicationWorker(worker_bk, urm, "worker-1", CONFIG, clock=clock)
        async with running(worker):
            await wait_for(worker, lambda s: s.replicated == len(on_lost))
        assert [e async for e in urm.ledgers()] == []
        assert await urm.locked() == []
        for lid in ledgers:
            meta = await assert_replicated(cluster, bk, lid, counts[lid], {lost})
            assert meta.state is LedgerState.CLOSED
        # only the lost bookie's positions changed, in its segments only
        status = worker.status
        assert status.failures == 0 and status.in_progress == () and status.waiting == ()
        assert status.entries_copied > 0 and status.bytes_copied > status.entries_copied * 100


@on_virtual_time
async def test_replicate_ledger_dry_run_and_unmarked_lost_bookies() -> None:
    async with MemoryCluster(5) as cluster:
        bk = await cluster.client(CLIENT)
        lid = await write_ledger(bk, (3, 3, 2), 50)
        meta = await bk.ledger_metadata(lid)
        lost = str(meta.segments[0][1])
        await cluster.stop_bookie(cluster.bookie(lost))
        plan_only = await replicate_ledger(bk, lid, None, CONFIG, dry_run=True)
        assert plan_only.done and plan_only.entries_copied == 0
        assert plan_only.plan is not None and plan_only.plan.entries == 50
        assert list(plan_only.replaced) == [0] and list(plan_only.replaced[0]) == [lost]
        assert await bk.ledger_metadata(lid) == meta  # nothing written
        outcome = await replicate_ledger(bk, lid, None, CONFIG, rng=random.Random(5))
        assert outcome.done, outcome.reason
        assert outcome.entries_copied == 50 and outcome.bytes_copied > 50 * 100
        new = await assert_replicated(cluster, bk, lid, 50, {lost})
        assert new.segments[0][1] == outcome.replaced[0][lost]
        assert [new.segments[0][0], new.segments[0][2]] == [
            meta.segments[0][0],
            meta.segments[0][2],
        ]
        # nothing left to do: done without copying
        again = await replicate_ledger(bk, lid, None, CONFIG)
        assert again.done and again.entries_copied == 0 and again.replaced == {}


@on_virtual_time
async def test_target_lost_during_repair_another_is_chosen_next_round() -> None:
    async with MemoryCluster(5) as cluster:
        bk = await cluster.client(CLIENT)
        lid = await write_ledger(bk, (3, 3, 2), 60)
        meta = await bk.ledger_metadata(lid)
        lost = str(meta.segments[0][0])
        await cluster.stop_bookie(cluster.bookie(lost))
        free = {b.bookie_id for b in cluster.bookies} - members_of(meta)
        faults = hang_adds(cluster, free)
        clock = FakeClock()
        urm = await new_urm(bk, clock)
        await urm.mark_underreplicated(lid, [lost])
        worker = ReplicationWorker(await cluster.client(CLIENT), urm, "w", CONFIG, clock=clock)
        async with running(worker):
            await wait_for(worker, lambda s: s.in_progress == (lid,))
            while not any(f.applied for f in faults.values()):
                await asyncio.sleep(0.001)  # the copy reaches the target: a condition, polled
            (target,) = [b for b, f in faults.items() if f.applied]
            for b in free:
                cluster.heal(cluster.bookies.index(cluster.bookie(b)))
            await cluster.stop_bookie(cluster.bookie(target))  # the target dies mid-copy
            status = await asyncio.wait_for(worker.wait_for(lambda s: s.failures == 1), WAIT_S)
            assert status.waiting == (lid,) and status.replicated == 0
            assert target in status.last_failure
            assert status.bytes_in_flight == 0  # the failed copy holds none of the window
            # no answer came: the sink sent exactly its in-flight limit, then waited
            assert faults[target].applied == CONFIG.entries_in_flight_max
            entry = await urm.get(lid)
            assert entry is not None and entry.missing_replicas == (lost,)
            assert await bk.ledger_metadata(lid) == meta  # not changed
            clock.advance(CONFIG.failed_ledger_retry_delay_ms / 1000.0)
            await wait_for(worker, lambda s: s.replicated == 1)
        (other,) = free - {target}
        new = await assert_replicated(cluster, bk, lid, 60, {lost, target})
        assert other in members_of(new)


@on_virtual_time
async def test_worker_killed_holding_a_lock_gives_the_ledger_to_another() -> None:
    async with MemoryCluster(5) as cluster:
        bk = await cluster.client(CLIENT)
        lid = await write_ledger(bk, (3, 3, 2), 40)
        meta = await bk.ledger_metadata(lid)
        lost = str(meta.segments[0][2])
        await cluster.stop_bookie(cluster.bookie(lost))
        free = {b.bookie_id for b in cluster.bookies} - members_of(meta)
        faults = hang_adds(cluster, free)
        clock = FakeClock()
        bk_a = await cluster.client(CLIENT)
        urm_a = await new_urm(bk_a, clock)
        await urm_a.mark_underreplicated(lid, [lost])
        worker_a = ReplicationWorker(bk_a, urm_a, "worker-a", CONFIG, clock=clock)
        task_a = asyncio.create_task(worker_a.run())
        await wait_for(worker_a, lambda s: s.in_progress == (lid,))
        while not any(f.applied for f in faults.values()):
            await asyncio.sleep(0.001)
        urm_b = await new_urm(await cluster.client(CLIENT), clock)
        assert await urm_b.locked() == [(lid, "worker-a")]
        assert not await urm_b.try_lock(lid, "worker-b")
        # worker a dies: its session ends first (a killed process), then its tasks
        await bk_a.cluster.store.aclose()
        task_a.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task_a
        assert await urm_b.locked() == []
        for b in free:
            cluster.heal(cluster.bookies.index(cluster.bookie(b)))
        worker_bk = await cluster.client(CLIENT)
        urm_b = await new_urm(worker_bk, clock)
        worker_b = ReplicationWorker(worker_bk, urm_b, "worker-b", CONFIG, clock=clock)
        async with running(worker_b):
            await wait_for(worker_b, lambda s: s.replicated == 1)
        assert await urm_b.get(lid) is None
        await assert_replicated(cluster, bk, lid, 40, {lost})


@on_virtual_time
async def test_ledger_deleted_while_being_repaired_is_unmarked() -> None:
    async with MemoryCluster(5) as cluster:
        bk = await cluster.client(CLIENT)
        lid = await write_ledger(bk, (3, 3, 2), 40)
        meta = await bk.ledger_metadata(lid)
        lost = str(meta.segments[0][0])
        await cluster.stop_bookie(cluster.bookie(lost))
        free = {b.bookie_id for b in cluster.bookies} - members_of(meta)
        faults = hang_adds(cluster, free)
        clock = FakeClock()
        worker_bk = await cluster.client(CLIENT)
        urm = await new_urm(worker_bk, clock)
        await urm.mark_underreplicated(lid, [lost])
        worker = ReplicationWorker(worker_bk, urm, "w", CONFIG, clock=clock)
        async with running(worker):
            await wait_for(worker, lambda s: s.in_progress == (lid,))
            while not any(f.applied for f in faults.values()):
                await asyncio.sleep(0.001)
            await bk.delete_ledger(lid)
            (target,) = [b for b, f in faults.items() if f.applied]
            await cluster.stop_bookie(cluster.bookie(target))  # the copy fails now
            status = await asyncio.wait_for(worker.wait_for(lambda s: s.replicated == 1), WAIT_S)
        assert status.failures == 0 and status.waiting == ()
        assert await urm.get(lid) is None
        with pytest.raises(LedgerNotFoundError):
            await bk.ledger_metadata(lid)


@on_virtual_time
async def test_ledger_deleted_before_it_is_taken_is_unmarked() -> None:
    async with MemoryCluster(4) as cluster:
        bk = await cluster.client(CLIENT)
        lid = await write_ledger(bk, (3, 3, 2), 10)
        await bk.delete_ledger(lid)
        clock = FakeClock()
        urm = await new_urm(bk, clock)
        await urm.mark_underreplicated(lid, ["bookie-0:3181"])
        outcome = await replicate_ledger(bk, lid, ["bookie-0:3181"], CONFIG)
        assert outcome.done and outcome.reason == "the ledger was deleted"
        worker = ReplicationWorker(await cluster.client(CLIENT), urm, "w", CONFIG, clock=clock)
        async with running(worker):
            await wait_for(worker, lambda s: s.replicated == 1)
        assert await urm.get(lid) is None


@pytest.mark.parametrize("marked_with_ctime", [True, False])
@on_virtual_time
async def test_open_ledger_is_fenced_only_after_the_grace_period(marked_with_ctime: bool) -> None:
    """A mark without its ctime (older writers of the format): the grace period counts
    from when the worker first saw it."""
    async with MemoryCluster(5) as cluster:
        bk = await cluster.client(CLIENT)
        wh = await bk.create_ledger(3, 3, 2, password=PASSWORD)
        lid = wh.ledger_id
        for e in range(30):
            await wh.append(payload(lid, e))
        meta = await bk.ledger_metadata(lid)
        lost = str(meta.segments[0][1])
        await cluster.stop_bookie(cluster.bookie(lost))
        clock = FakeClock()
        worker_bk = await cluster.client(CLIENT)
        urm = await new_urm(worker_bk, clock)
        if marked_with_ctime:
            await urm.mark_underreplicated(lid, [lost])
        else:
            path = ur_ledger_path(worker_bk.cluster.root, lid)
            await worker_bk.cluster.store.create(
                path, b'replica: "%s"' % lost.encode(), make_parents=True
            )
            clock.advance(3600.0)  # marked long ago, for all the worker can tell
        worker = ReplicationWorker(worker_bk, urm, "w", CONFIG, clock=clock)
        async with running(worker):
            status = await asyncio.wait_for(
                worker.wait_for(lambda s: s.waiting == (lid,) and not s.in_progress), WAIT_S
            )
            assert status.failures == 0 and status.replicated == 0
            # the writer is left alone: the ledger is open, no bookie fenced it
            assert (await bk.ledger_metadata(lid)).state is LedgerState.OPEN
            for bookie_id in members_of(meta) - {lost}:
                storage = cluster.bookie(bookie_id).storage
                assert storage is not None and not storage.is_fenced(lid)
            assert await urm.get(lid) is not None and await urm.locked() == []
            clock.advance(CONFIG.open_ledger_grace_period_ms / 1000.0 - 1.0)
            await asyncio.wait_for(worker.wait_for(lambda s: s.waiting == (lid,)), WAIT_S)
            assert (await bk.ledger_metadata(lid)).state is LedgerState.OPEN
            clock.advance(1.0)
            await wait_for(worker, lambda s: s.replicated == 1)
        await assert_replicated(cluster, bk, lid, 30, {lost})
        with pytest.raises(LedgerFencedError):
            await wh.append(payload(lid, 30))


@on_virtual_time
async def test_open_ledger_earlier_segments_are_repaired_without_fencing() -> None:
    async with MemoryCluster(5) as cluster:
        bk = await cluster.client(CLIENT)
        wh = await bk.create_ledger(3, 3, 2, password=PASSWORD)
        lid = wh.ledger_id
        for e in range(20):
            await wh.append(payload(lid, e))
        lost = str((await bk.ledger_metadata(lid)).segments[0][0])
        await cluster.stop_bookie(cluster.bookie(lost))
        for e in range(20, 30):
            await wh.append(payload(lid, e))  # the writer replaces the lost bookie
        assert len((await bk.ledger_metadata(lid)).segments) == 2
        outcome = await replicate_ledger(bk, lid, [lost], CONFIG, fence_open=False)
        assert outcome.done and list(outcome.replaced) == [0], outcome.reason
        meta = await bk.ledger_metadata(lid)
        assert meta.state is LedgerState.OPEN and lost not in members_of(meta)
        for e in range(30, 35):
            await wh.append(payload(lid, e))  # the writer goes on
        await wh.close()
        await assert_replicated(cluster, bk, lid, 35, {lost})


class ReleaseFailsOnce(UnderReplicationManager):
    """Its first lock release fails as one does while ZooKeeper is away (the session, and
    so the lock, survives the outage)."""

    failed = False

    async def release(self, ledger_id: int) -> None:
        if not self.failed:
            self.failed = True
            raise ConnectionLossError("ZooKeeper: disconnected (reconnecting)")
        await super().release(ledger_id)


@pytest.mark.parametrize("release_fails", [False, True])
@on_virtual_time
async def test_not_enough_bookies_keeps_the_ledger_marked_and_retries(release_fails: bool) -> None:
    """With ``release_fails``, found by ``bkeeper verify`` (seed 20297: ZooKeeper killed for
    3.8 s while workers repaired): a release that failed left the lock held by the worker's
    own live session, and its scans skipped locked ledgers, so 21 ledgers stayed marked."""
    async with MemoryCluster(5) as cluster:
        bk = await cluster.client(CLIENT)
        spare = cluster.bookies[3:]
        for bookie in spare:
            await cluster.stop_bookie(bookie)
        lid = await write_ledger(bk, (3, 3, 2), 25)  # on bookies 0, 1, 2
        lost = "bookie-0:3181"
        await cluster.stop_bookie(cluster.bookie(lost))
        clock = FakeClock()
        worker_bk = await cluster.client(CLIENT)
        kind = ReleaseFailsOnce if release_fails else UnderReplicationManager
        urm = kind(worker_bk.cluster.store, worker_bk.cluster.root, clock=clock)
        await urm.ensure_layout()
        await urm.mark_underreplicated(lid, [lost])
        worker = ReplicationWorker(worker_bk, urm, "w", CONFIG, clock=clock)
        async with running(worker):
            status = await asyncio.wait_for(worker.wait_for(lambda s: s.failures == 1), WAIT_S)
            assert "no candidate bookie for bookie-0:3181" in status.last_failure
            assert status.waiting == (lid,)
            held = [x for x, _ in await urm.locked()]
            assert await urm.get(lid) is not None and held == ([lid] if release_fails else [])
            await cluster.start_bookie(spare[0])
            clock.advance(CONFIG.failed_ledger_retry_delay_ms / 1000.0)
            await wait_for(worker, lambda s: s.replicated == 1)
        assert await urm.get(lid) is None and await urm.locked() == []
        meta = await assert_replicated(cluster, bk, lid, 25, {lost})
        assert spare[0].bookie_id in members_of(meta)


@on_virtual_time
async def test_disabled_worker_stays_idle() -> None:
    async with MemoryCluster(5) as cluster:
        bk = await cluster.client(CLIENT)
        lid = await write_ledger(bk, (3, 3, 2), 10)
        lost = str((await bk.ledger_metadata(lid)).segments[0][0])
        await cluster.stop_bookie(cluster.bookie(lost))
        clock = FakeClock()
        urm = await new_urm(bk, clock)
        await urm.disable()
        await urm.mark_underreplicated(lid, [lost])
        worker = ReplicationWorker(await cluster.client(CLIENT), urm, "w", CONFIG, clock=clock)
        async with running(worker):
            await wait_for(worker, lambda s: not s.enabled)
            assert await urm.locked() == [] and await urm.get(lid) is not None
            await urm.enable()
            await wait_for(worker, lambda s: s.replicated == 1)
        await assert_replicated(cluster, bk, lid, 10, {lost})


@on_virtual_time
async def test_target_refusing_recovery_adds_fails_the_attempt_and_changes_nothing() -> None:
    async with MemoryCluster(5) as cluster:
        bk = await cluster.client(CLIENT)
        lid = await write_ledger(bk, (3, 3, 2), 30)
        meta = await bk.ledger_metadata(lid)
        lost = str(meta.segments[0][0])
        await cluster.stop_bookie(cluster.bookie(lost))
        for bookie_id in {b.bookie_id for b in cluster.bookies} - members_of(meta):
            index = cluster.bookies.index(cluster.bookie(bookie_id))
            cluster.fault(index, AddRequest, error=StatusCode.EREADONLY)
        outcome = await replicate_ledger(bk, lid, [lost], CONFIG)
        assert not outcome.done and not outcome.awaits_fencing
        assert "EREADONLY" in outcome.reason and outcome.replaced == {}
        assert await bk.ledger_metadata(lid) == meta


class _SlowLocks(UnderReplicationManager):
    """Taking a lock takes a while (as over a busy metadata store); counts the lanes taking
    locks at once and every ledger handed out."""

    def __init__(self, bk: BookKeeper, clock: FakeClock) -> None:
        super().__init__(bk.cluster.store, bk.cluster.root, clock=clock)
        self.taking = 0
        self.taking_max = 0
        self.taken: list[int] = []

    async def lock(self, ledger_id: int, holder: str) -> UnderreplicatedLedger | None:
        self.taking += 1
        self.taking_max = max(self.taking_max, self.taking)
        try:
            await asyncio.sleep(0.01)
            entry = await super().lock(ledger_id, holder)
        finally:
            self.taking -= 1
        if entry is not None:
            self.taken.append(ledger_id)
        return entry


@on_virtual_time
async def test_lanes_take_ledgers_at_once_and_never_the_same_one_twice() -> None:
    async with MemoryCluster(5) as cluster:
        bk = await cluster.client(CLIENT)
        ledgers = [await write_ledger(bk, (3, 3, 2), 5) for _ in range(12)]
        lost = str((await bk.ledger_metadata(ledgers[0])).segments[0][0])
        await cluster.stop_bookie(cluster.bookie(lost))
        clock = FakeClock()
        urm = _SlowLocks(bk, clock)
        await urm.ensure_layout()
        on_lost = [lid for lid in ledgers if lost in members_of(await bk.ledger_metadata(lid))]
        for lid in on_lost:
            await urm.mark_underreplicated(lid, [lost])
        config = AutoRecoveryConfig(
            idle_poll_interval_ms=2, ledgers_in_parallel=4, entries_in_flight_max=16
        )
        worker = ReplicationWorker(await cluster.client(CLIENT), urm, "w", config, clock=clock)
        async with running(worker):
            await wait_for(worker, lambda s: s.replicated == len(on_lost))
        # every lane took its own ledgers (one taker for all would never take two at once)
        assert urm.taking_max > 1
        assert sorted(urm.taken) == sorted(on_lost)
        assert [e async for e in urm.ledgers()] == [] and await urm.locked() == []


@on_virtual_time
async def test_a_marked_bookie_that_came_back_is_not_replaced() -> None:
    """Marked while it restarted (delay 0): once it is registered again the mark goes,
    nothing is copied and the ensemble stays (before: its replicas were copied elsewhere, or
    with no spare bookie the ledger stayed marked for ever)."""
    async with MemoryCluster(4) as cluster:
        bk = await cluster.client(CLIENT)
        lid = await write_ledger(bk, (3, 3, 2), 10)
        before = await bk.ledger_metadata(lid)
        back = str(before.segments[0][0])
        clock = FakeClock()
        urm = await new_urm(bk, clock)
        await urm.mark_underreplicated(lid, [back])  # it is registered: it came back
        worker = ReplicationWorker(await cluster.client(CLIENT), urm, "w", CONFIG, clock=clock)
        async with running(worker):
            await wait_for(worker, lambda s: s.replicated == 1)
        assert await urm.get(lid) is None
        assert (await bk.ledger_metadata(lid)).segments == before.segments
        assert worker.status.entries_copied == 0


@on_virtual_time
async def test_a_registered_bookie_that_lost_its_entries_is_replaced() -> None:
    """A live bookie that lacks entries it should hold (check-all-ledgers or the replicas
    check marked it) is not "back with its data": its part is copied to another bookie and
    the ledger is whole again (before: the mark was dropped and nothing copied)."""
    async with MemoryCluster(4) as cluster:
        bk = await cluster.client(CLIENT)
        lid = await write_ledger(bk, (3, 3, 2), 10)
        before = await bk.ledger_metadata(lid)
        emptied = str(before.segments[0][1])
        storage = cluster.bookie(emptied).storage
        assert storage is not None
        storage.delete_ledger(lid)
        clock = FakeClock()
        urm = await new_urm(bk, clock)
        await urm.mark_underreplicated(lid, [emptied])
        worker = ReplicationWorker(await cluster.client(CLIENT), urm, "w", CONFIG, clock=clock)
        async with running(worker):
            await wait_for(worker, lambda s: s.replicated == 1)
        assert await urm.get(lid) is None
        after = await assert_replicated(cluster, bk, lid, 10, gone={emptied})
        assert worker.status.entries_copied == 10
        assert len(members_of(after) - members_of(before)) == 1


@on_virtual_time
async def test_a_lagging_registry_view_is_read_again_before_giving_up() -> None:
    """The worker's registry watch may not have seen a bookie that just joined: a plan that
    finds no target with the followed set reads the registry once more (before: the ledger
    failed and waited the retry delay, 10 s)."""
    async with MemoryCluster(4) as cluster:
        bk = await cluster.client(CLIENT)
        spare = cluster.bookies[3]
        await cluster.stop_bookie(spare)
        lid = await write_ledger(bk, (3, 3, 2), 10)
        lost = str((await bk.ledger_metadata(lid)).segments[0][0])
        await cluster.stop_bookie(cluster.bookie(lost))
        stale = await bk.cluster.registry.bookies()  # the view before the spare came back
        await cluster.start_bookie(spare)
        outcome = await replicate_ledger(bk, lid, [lost], CONFIG, bookies=stale)
        assert outcome.done, outcome.reason
        assert outcome.replaced == {0: {lost: spare.bookie_id}}


@on_virtual_time
async def test_open_ledger_without_a_candidate_is_not_fenced_and_says_why() -> None:
    """The sandbox's case (3 bookies, E3/Qw3/Qa2, one killed): past its grace period the
    open ledger was fenced although no bookie could take the lost one's place, and its
    writer (the KV leader) stopped. Now it is left open with the reason recorded; when a
    fourth bookie registers it is tried again at once (no retry delay passes on the clock),
    but its writer is given the grace period again to replace the lost bookie itself (it
    may be writing on without it): fenced only once that is over, then repaired, and the
    reason is gone."""
    async with MemoryCluster(4) as cluster:
        spare = cluster.bookies[3]
        await cluster.stop_bookie(spare)
        bk = await cluster.client(CLIENT)
        wh = await bk.create_ledger(3, 3, 2, password=PASSWORD)
        lid = wh.ledger_id
        for e in range(20):
            await wh.append(payload(lid, e))
        lost = "bookie-2:3181"
        clock, worker_bk, urm = await lose_and_mark(cluster, lid, lost)
        clock.advance(CONFIG.open_ledger_grace_period_ms / 1000.0 + 1.0)  # grace is over
        worker = ReplicationWorker(worker_bk, urm, "w", CONFIG, clock=clock)
        async with running(worker):
            status = await wait_for_status(worker, lambda s: s.blocked == ((lid, "no_candidate"),))
            assert status.replicated == 0 and status.waiting == (lid,)
            reason = await urm.blocked(lid)
            assert reason is not None and (reason.kind, reason.worker) == ("no_candidate", "w")
            assert reason.detail == (
                f"no candidate bookie for {lost} (segment at entry 0): 2 writable, 2 already "
                "in the ensemble"
            )
            # not fenced: its writer is left alone
            assert (await bk.ledger_metadata(lid)).state is LedgerState.OPEN
            for bookie in cluster.bookies[:2]:
                assert bookie.storage is not None and not bookie.storage.is_fenced(lid)
            await cluster.start_bookie(spare)
            await wait_for_status(worker, lambda s: s.blocked == ((lid, "awaiting_writer"),))
            assert (await bk.ledger_metadata(lid)).state is LedgerState.OPEN  # grace again
            clock.advance(CONFIG.open_ledger_grace_period_ms / 1000.0 + 1.0)
            await wait_for(worker, lambda s: s.replicated == 1 and not s.blocked)
        assert await urm.get(lid) is None and await urm.blocked(lid) is None
        await assert_replicated(cluster, bk, lid, 20, {lost})
        with pytest.raises(LedgerFencedError):
            await wh.append(payload(lid, 20))


@on_virtual_time
async def test_a_blocked_reason_is_recorded_once_per_change(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Each retry finds the same reason: recorded and logged once, not per attempt."""
    async with MemoryCluster(4) as cluster:
        await cluster.stop_bookie(cluster.bookies[3])
        bk = await cluster.client(CLIENT)
        lid = await write_ledger(bk, (3, 3, 2), 10)
        lost = "bookie-0:3181"
        clock, worker_bk, urm = await lose_and_mark(cluster, lid, lost)
        worker = ReplicationWorker(worker_bk, urm, "w", CONFIG, clock=clock)
        first_ms = clock.wall_ms()

        def failed(times: int) -> Callable[[WorkerStatus], bool]:
            return lambda status: status.failures == times

        with caplog.at_level("INFO", logger="bkeeper.autorecovery.worker"):
            async with running(worker):
                for attempts in (1, 2, 3):
                    await wait_for(worker, failed(attempts))
                    clock.advance(CONFIG.failed_ledger_retry_delay_ms / 1000.0)
        said = [r for r in caplog.records if f"ledger {lid} stays under-replicated" in r.message]
        assert len(said) == 1 and "no_candidate" in said[0].message
        reason = await urm.blocked(lid)
        assert reason is not None and reason.since_ms == first_ms  # since the first attempt


async def wait_for_status(
    worker: ReplicationWorker, check: Callable[[WorkerStatus], bool]
) -> WorkerStatus:
    return await asyncio.wait_for(worker.wait_for(check), WAIT_S)


def count_scans(worker: ReplicationWorker) -> Callable[[], int]:
    """Count the worker's scans of the queue; the count so far."""
    scans = 0
    scan = worker._scan

    async def counted() -> None:
        nonlocal scans
        scans += 1
        await scan()

    worker._scan = counted  # type: ignore[method-assign]
    return lambda: scans


@on_virtual_time
async def test_an_idle_worker_polls_once_an_interval_not_once_per_lane(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Where the queue cannot be watched (here: more directories than a worker watches),
    eight lanes of an idle worker scanned the queue together, eight metadata scans a second
    per bookie on an idle cluster; one lane scans now, the others wait for it."""
    monkeypatch.setattr(worker_module, "WATCHED_DIRECTORIES_MAX", 0)
    async with MemoryCluster(3) as cluster:
        bk = await cluster.client(CLIENT)
        urm = await new_urm(bk, FakeClock())
        config = AutoRecoveryConfig(idle_poll_interval_ms=1_000, ledgers_in_parallel=8)
        worker = ReplicationWorker(bk, urm, "idle", config, clock=FakeClock())
        scans = count_scans(worker)
        with caplog.at_level("INFO", logger="bkeeper.autorecovery.worker"):
            async with running(worker):
                await asyncio.sleep(10.5)
        assert 10 <= scans() <= 12  # one a second (it was 8 a second: 88)
        said = [r.message for r in caplog.records if "looking at the queue every" in r.message]
        assert said == [
            "replication worker idle: looking at the queue every 1000 ms (over 0 directories)"
        ]


@on_virtual_time
async def test_an_idle_worker_waits_for_the_queue_to_change() -> None:
    """Workers listed the queue and read the disable flag every idle interval, every bookie
    on an idle cluster; now the queue's watches wake them (as Java's workers): no scan while
    nothing changes, a mark taken at once rather than at the next interval, the disable flag
    seen both ways, a lock released by another worker taken."""
    async with MemoryCluster(4) as cluster:
        bk = await cluster.client(CLIENT)
        ledgers = [await write_ledger(bk, (3, 3, 2), 10) for _ in range(2)]
        urm = await new_urm(bk, FakeClock())
        config = AutoRecoveryConfig(idle_poll_interval_ms=60_000)
        worker = ReplicationWorker(
            await cluster.client(CLIENT), urm, "idle", config, clock=LoopClock()
        )
        scans = count_scans(worker)
        loop = asyncio.get_running_loop()
        async with running(worker):
            await asyncio.sleep(600.0)
            assert scans() <= 2  # polling: 10
            await urm.disable()
            await wait_for(worker, lambda s: not s.enabled)
            await asyncio.sleep(60.0)
            await urm.enable()
            await wait_for(worker, lambda s: s.enabled)
            await asyncio.sleep(600.0)
            idle_scans = scans()
            lost = str((await bk.ledger_metadata(ledgers[0])).segments[0][1])
            await cluster.stop_bookie(cluster.bookie(lost))
            await urm.mark_underreplicated(ledgers[1], [lost])
            assert await urm.try_lock(ledgers[1], "another worker")
            await urm.mark_underreplicated(ledgers[0], [lost])
            marked_at = loop.time()
            await wait_for(worker, lambda s: s.replicated == 1)
            assert loop.time() - marked_at < 5.0  # polling: up to a minute
            await asyncio.sleep(600.0)
            assert worker.status.replicated == 1  # the other is locked
            await urm.release(ledgers[1])
            released_at = loop.time()
            await wait_for(worker, lambda s: s.replicated == 2)
            assert loop.time() - released_at < 5.0
        assert idle_scans <= 4  # polling: 21
        for lid in ledgers:
            await assert_replicated(cluster, bk, lid, 10, {lost})
