"""Auto-recovery's metrics: the queue as the auditor counts it, and the worker's repairs."""

from __future__ import annotations

import dataclasses

from bkeeper.autorecovery.service import AutoRecovery
from bkeeper.common.metrics_export import exposition_text, new_registry
from bkeeper.meta.underreplication import BlockedReason
from bkeeper.testing.cluster import MemoryCluster
from tests.autorecovery.test_service import CONFIG, PASSWORD, WAIT_S, wait_for
from tests.common.test_metrics import samples


def scrape(recovery: AutoRecovery) -> dict:
    return samples(exposition_text(new_registry(lambda: [recovery.metrics.metric_set])))


async def _ledgers(writer, count: int) -> list[int]:
    ledgers = []
    for _ in range(count):
        handle = await writer.create_ledger(3, 2, 2, password=PASSWORD)
        for entry_id in range(20):
            await handle.append(b"entry-%d" % entry_id)
        await handle.close()
        ledgers.append(handle.ledger_id)
    return ledgers


async def test_the_auditor_counts_the_queue():
    async with MemoryCluster(3) as cluster:
        writer, runner, other = [await cluster.client() for _ in range(3)]
        ledgers = await _ledgers(writer, 4)
        urm = writer.cluster.underreplication
        await urm.ensure_layout()
        await urm.disable()  # nobody repairs them: they stay queued
        for ledger_id in ledgers[:3]:
            await urm.mark_underreplicated(ledger_id, ["gone-bookie:3181"])
        async with AutoRecovery(runner, "recovery-1:0", CONFIG) as recovery:
            await recovery.wait_auditor(WAIT_S)

            async def counted() -> bool:
                return scrape(recovery)[("bkeeper_autorecovery_under_replicated_ledgers", ())] == 3

            await wait_for(counted, "the queue counted")
            assert scrape(recovery)[("bkeeper_autorecovery_auditor", ())] == 1
            async with AutoRecovery(other, "recovery-2:0", CONFIG) as follower:
                got = scrape(follower)
                assert got[("bkeeper_autorecovery_auditor", ())] == 0
                assert got[("bkeeper_autorecovery_under_replicated_ledgers", ())] == 0


async def test_repairs_are_counted():
    async with MemoryCluster(4) as cluster:
        writer, runner = await cluster.client(), await cluster.client()
        ledgers = await _ledgers(writer, 4)
        first = await writer.ledger_metadata(ledgers[0])
        lost = str(next(iter(first.segments.values()))[0])  # at least one ledger holds it
        holding = []
        for ledger_id in ledgers:
            meta = await writer.ledger_metadata(ledger_id)
            if any(lost in map(str, ensemble) for ensemble in meta.segments.values()):
                holding.append(ledger_id)
        async with AutoRecovery(runner, "recovery-1:0", CONFIG) as recovery:
            await recovery.wait_auditor(WAIT_S)
            await cluster.stop_bookie(cluster.bookie(lost))

            async def repaired() -> bool:
                return recovery.worker_status.replicated == len(holding) and not [
                    e async for e in writer.cluster.underreplication.ledgers()
                ]

            await wait_for(repaired, "every ledger repaired")
            got = scrape(recovery)
            assert got[("bkeeper_autorecovery_rereplicated_ledgers_total", ())] == len(holding)
            copied = got[("bkeeper_autorecovery_rereplicated_bytes_total", ())]
            assert copied == recovery.worker_status.bytes_copied
            assert holding and copied > 0


async def test_the_auditor_counts_blocked_ledgers_by_why_and_prunes_stale_reasons():
    async with MemoryCluster(3) as cluster:
        writer, runner, other = [await cluster.client() for _ in range(3)]
        urm = writer.cluster.underreplication
        await urm.ensure_layout()
        await urm.disable()  # nobody repairs them: they stay queued with their reasons
        for ledger_id in (1, 2, 3):
            await urm.mark_underreplicated(ledger_id, ["gone-bookie:3181"])
        kinds = {1: "no_candidate", 2: "no_candidate", 3: "awaiting_writer", 9: "error"}
        for ledger_id, kind in kinds.items():  # 9: not queued (repaired by a Java worker)
            await urm.set_blocked(ledger_id, BlockedReason(kind, "why", 1, "w"))
        async with AutoRecovery(runner, "recovery-1:0", CONFIG) as recovery:
            await recovery.wait_auditor(WAIT_S)

            async def counted() -> bool:
                return scrape(recovery).get(BLOCKED_NO_CANDIDATE) == 2

            await wait_for(counted, "the blocked ledgers counted")
            got = scrape(recovery)
            assert (
                got[("bkeeper_autorecovery_blocked_ledgers", (("reason", "awaiting_writer"),))] == 1
            )
            assert got[("bkeeper_autorecovery_blocked_ledgers", (("reason", "error"),))] == 0
            assert await urm.blocked_ids() == {1, 2, 3}  # 9's reason removed
            async with AutoRecovery(other, "recovery-2:0", CONFIG) as follower:
                assert scrape(follower)[BLOCKED_NO_CANDIDATE] == 0  # only the auditor counts


BLOCKED_NO_CANDIDATE = ("bkeeper_autorecovery_blocked_ledgers", (("reason", "no_candidate"),))


async def test_the_auditor_reports_placement_violations_until_they_are_relocated():
    async with MemoryCluster(4) as cluster:
        assert cluster.metadata is not None
        names = [b.bookie_id for b in cluster.bookies]
        for name, rack in zip(names, ["/r1", "/r1", "/r2", "/r2"], strict=True):
            await cluster.metadata.racks.set(name, rack)
        writer, runner = [await cluster.client() for _ in range(2)]
        handle = await writer.create_ledger(2, 2, 2, password=PASSWORD, bookies=names[:2])
        await handle.append(b"on one rack")
        await handle.close()
        await writer.cluster.underreplication.ensure_layout()
        config = dataclasses.replace(CONFIG, placement_check_interval_s=0.5)
        async with AutoRecovery(runner, "recovery-1:0", config) as recovery:
            await recovery.wait_auditor(WAIT_S)
            key = ("bkeeper_autorecovery_placement_violations", ())

            async def found() -> bool:
                return scrape(recovery)[key] == 1

            await wait_for(found, "the violation counted")

            async def relocated() -> bool:
                return scrape(recovery)[key] == 0

            await wait_for(relocated, "the ledger relocated by the worker")
        meta = await writer.ledger_metadata(handle.ledger_id)
        assert {str(b) for b in meta.segments[0]} & set(names[2:])
