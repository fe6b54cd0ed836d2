"""Placement across failure domains on an in-memory cluster: clients place by the registered
locations, the placement check marks what breaks the policy, and the worker relocates it."""

from __future__ import annotations

import asyncio

from bkeeper.autorecovery.auditor import Auditor
from bkeeper.autorecovery.relocate import relocate_ledgers
from bkeeper.autorecovery.repair import replicate_ledger
from bkeeper.autorecovery.worker import ReplicationWorker
from bkeeper.client.config import ClientConfig
from bkeeper.client.placement import Domains, quorum_racks_short
from bkeeper.common.errors import NotEnoughBookiesError
from bkeeper.meta.ledger_metadata import LedgerMetadata
from bkeeper.testing.clock import FakeClock
from bkeeper.testing.cluster import MemoryCluster
from bkeeper.testing.virtual_time import on_virtual_time
from tests.autorecovery.test_worker import (
    CLIENT,
    CONFIG,
    PASSWORD,
    assert_replicated,
    members_of,
    new_urm,
    payload,
    running,
    wait_for,
)

#: bookie-i is on /rack-(i % 3)
RACKS = 3


async def register_racks(cluster: MemoryCluster) -> dict[str, str]:
    assert cluster.metadata is not None
    racks = {b.bookie_id: f"/rack-{i % RACKS}" for i, b in enumerate(cluster.bookies)}
    for bookie, rack in racks.items():
        await cluster.metadata.racks.set(bookie, rack)
    return racks


def spans(meta: LedgerMetadata, racks: dict[str, str]) -> list[int]:
    return [len({racks[str(b)] for b in ensemble}) for ensemble in meta.segments.values()]


@on_virtual_time
async def test_clients_place_every_write_quorum_on_two_racks_by_registered_locations() -> None:
    async with MemoryCluster(6) as cluster:
        racks = await register_racks(cluster)
        bk = await cluster.client(ClientConfig(enforce_min_racks=True))
        for _ in range(20):
            wh = await bk.create_ledger(3, 2, 2, password=PASSWORD)
            meta = await bk.ledger_metadata(wh.ledger_id)
            ensemble = [str(b) for b in meta.last_ensemble]
            assert quorum_racks_short(ensemble, 2, Domains(racks)) == [], ensemble
            await wh.close()
        # a random client ignores them (and can land a quorum on one rack)
        assert await (await cluster.client(ClientConfig(placement="random"))).domains() is None


@on_virtual_time
async def test_placement_check_marks_and_the_worker_relocates_onto_another_rack() -> None:
    async with MemoryCluster(6) as cluster:
        racks = await register_racks(cluster)
        bk = await cluster.client(CLIENT)
        await bk.cluster.underreplication.ensure_layout()
        # a ledger planted on one rack only (as after a rack lost and healed carelessly)
        rack0 = [b for b, r in racks.items() if r == "/rack-0"]
        wh = await bk.create_ledger(2, 2, 2, password=PASSWORD, bookies=rack0)
        await asyncio.gather(*[await wh.append_async(payload(wh.ledger_id, e)) for e in range(50)])
        await wh.close()
        lid = wh.ledger_id
        assert spans(await bk.ledger_metadata(lid), racks) == [1]
        clock = FakeClock()
        urm = await new_urm(bk, clock)
        report = await Auditor(bk, urm, CONFIG, clock=clock).placement_check()
        assert report.not_adhering == {lid: (0,)}
        assert set(report.marked) == {lid} and len(report.marked[lid]) == 1
        # the dry run plans the move; nothing changes
        dry = await replicate_ledger(bk, lid, [], CONFIG, dry_run=True, relocate=True)
        assert dry.done and len(dry.replaced[0]) == 1
        assert spans(await bk.ledger_metadata(lid), racks) == [1]
        worker = ReplicationWorker(
            await cluster.client(CLIENT), urm, "worker-1", CONFIG, clock=clock
        )
        async with running(worker):
            await wait_for(worker, lambda s: s.replicated == 1)
        meta = await assert_replicated(cluster, bk, lid, 50, set())
        assert spans(meta, racks) == [2]
        assert len(members_of(meta) & set(rack0)) == 1
        again = await Auditor(bk, urm, CONFIG, clock=clock).placement_check()
        assert again.not_adhering == {} and again.marked == {}


@on_virtual_time
async def test_enforced_placement_refuses_a_replacement_on_the_same_rack() -> None:
    async with MemoryCluster(4) as cluster:
        assert cluster.metadata is not None
        names = [b.bookie_id for b in cluster.bookies]
        for name, rack in zip(names, ["/r1", "/r2", "/r1", "/r1"], strict=True):
            await cluster.metadata.racks.set(name, rack)
        bk = await cluster.client(ClientConfig(enforce_min_racks=True, degraded_writes=False))
        wh = await bk.create_ledger(2, 2, 2, password=PASSWORD, bookies=[names[0], names[1]])
        await wh.append(b"one")
        await cluster.stop_bookie(cluster.bookie(names[1]))  # the only bookie on /r2
        try:
            await wh.append(b"two")
        except NotEnoughBookiesError as exc:
            assert "min_racks_per_write_quorum, enforced" in str(exc)
        else:
            raise AssertionError("a replacement on /r1 was taken although enforced")


@on_virtual_time
async def test_relocate_ledgers_says_when_no_rack_can_mend_a_ledger() -> None:
    async with MemoryCluster(4) as cluster:
        assert cluster.metadata is not None
        names = [b.bookie_id for b in cluster.bookies]
        for name in names:
            await cluster.metadata.racks.set(name, "/r1")
        bk = await cluster.client(CLIENT)
        # E3/Qw2 striped: write quorums {0,1}, {1,2}, {2,0}
        wh = await bk.create_ledger(3, 2, 2, password=PASSWORD, bookies=names[:3])
        await wh.append(b"x")
        await wh.close()
        # one rack in the whole cluster: one rack per quorum is all it can ask
        assert [r.state for r in await relocate_ledgers(bk, CONFIG)] == ["adheres"]
        await cluster.metadata.racks.set(names[2], "/r2")
        # quorum {0,1} is on /r1 alone; the only bookie on /r2 is in the ensemble already
        (result,) = await relocate_ledgers(bk, CONFIG)
        assert (result.state, result.violating) == ("cannot", (0,))
        assert result.reason == (
            "no writable bookie outside its ensembles is on a rack that mends it (those "
            "outside: on /r1); add bookies on other racks"
        )
        await cluster.metadata.racks.set(names[3], "/r3")  # a bookie on a third rack
        (planned,) = await relocate_ledgers(bk, CONFIG, dry_run=True)
        assert planned.state == "planned" and list(planned.moves[0].values()) == [names[3]]
        (moved,) = await relocate_ledgers(bk, CONFIG)
        assert moved.state == "moved" and moved.entries == 1


@on_virtual_time
async def test_a_bookie_back_lacking_entries_is_refilled_in_place_with_no_spare() -> None:
    """Three bookies, E3: a writer goes on degraded while one restarts, and marks the ledger
    for it once it is back. Replacing it would need a fourth bookie; the worker copies the
    entries it lacks to it instead, and the metadata keeps it."""
    async with MemoryCluster(3) as cluster:
        bk = await cluster.client(CLIENT)
        await bk.cluster.underreplication.ensure_layout()
        wh = await bk.create_ledger(3, 3, 2, password=PASSWORD)
        for e in range(30):
            await wh.append(payload(wh.ledger_id, e))
        restarting = cluster.bookies[2]
        await cluster.stop_bookie(restarting)
        for e in range(30, 80):  # on two copies: no spare to replace it
            await wh.append(payload(wh.ledger_id, e))
        await cluster.start_bookie(restarting)
        await wh.close()
        lid = wh.ledger_id
        before = await bk.ledger_metadata(lid)
        assert restarting.bookie_id in {str(b) for b in before.segments[max(before.segments)]}
        clock = FakeClock()
        urm = await new_urm(bk, clock)
        await urm.mark_underreplicated(lid, [restarting.bookie_id])
        worker = ReplicationWorker(
            await cluster.client(CLIENT), urm, "worker-1", CONFIG, clock=clock
        )
        async with running(worker):
            await wait_for(worker, lambda s: s.replicated == 1 or bool(s.waiting))
        assert worker.status.replicated == 1, worker.status
        after = await assert_replicated(cluster, bk, lid, 80, set())
        assert after.segments == before.segments  # nobody replaced
        assert [e async for e in urm.ledgers()] == []


@on_virtual_time
async def test_an_open_ledgers_bookie_taken_back_is_refilled_up_to_the_lac_unfenced() -> None:
    """The same while the ledger stays open: its writer takes the restarted bookie back and
    marks the ledger for the entries it missed; the worker copies those (all settled: up to
    the LAC) to it in place, without fencing the writer, which goes on."""
    async with MemoryCluster(3) as cluster:
        bk = await cluster.client(CLIENT)
        await bk.cluster.underreplication.ensure_layout()
        wh = await bk.create_ledger(3, 3, 2, password=PASSWORD)
        for e in range(20):
            await wh.append(payload(wh.ledger_id, e))
        restarting = cluster.bookies[1]
        await cluster.stop_bookie(restarting)
        for e in range(20, 60):
            await wh.append(payload(wh.ledger_id, e))
        await cluster.start_bookie(restarting)
        urm = await new_urm(bk, FakeClock())
        while await urm.get(wh.ledger_id) is None:  # taken back: the writer marks the gap
            await wh.append(payload(wh.ledger_id, wh.last_add_pushed + 1))
            await asyncio.sleep(0.5)
        written = wh.last_add_pushed + 1
        worker = ReplicationWorker(
            await cluster.client(CLIENT), urm, "worker-1", CONFIG, clock=FakeClock()
        )
        async with running(worker):
            await wait_for(worker, lambda s: s.replicated == 1 or bool(s.waiting))
        assert worker.status.replicated == 1, worker.status
        for e in range(written, written + 10):  # not fenced: the writer goes on
            await wh.append(payload(wh.ledger_id, e))
        await wh.close()
        await assert_replicated(cluster, bk, wh.ledger_id, written + 10, set())
