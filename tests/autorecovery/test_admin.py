"""The operator operations of :mod:`bkeeper.autorecovery.admin` in an in-memory cluster:
recover by hand (dry run, for real, one ledger), the listings, and every refusal."""

from __future__ import annotations

import asyncio

import pytest

from bkeeper.autorecovery import admin
from bkeeper.autorecovery.config import AutoRecoveryConfig
from bkeeper.autorecovery.decommission_status import AuditState, LedgerState
from bkeeper.autorecovery.service import AutoRecovery
from bkeeper.client.bookkeeper import BookKeeper
from bkeeper.common.errors import BKeeperError, CallTimeoutError, ConfigError
from bkeeper.meta.election import LeaderElection
from bkeeper.meta.underreplication import auditor_election
from bkeeper.testing.cluster import MemoryCluster
from bkeeper.testing.virtual_time import LoopClock, on_virtual_time

PASSWORD = b"pw"
CONFIG = AutoRecoveryConfig()
#: A participant that polls fast, so a scenario does not wait on the idle pauses.
RECOVERY = AutoRecoveryConfig(idle_poll_interval_ms=20, failed_ledger_retry_delay_ms=50)


async def write(bk: BookKeeper, count: int, entries: int = 10) -> list[int]:
    ids = []
    for _ in range(count):
        handle = await bk.create_ledger(3, 2, 2, password=PASSWORD)
        for entry_id in range(entries):
            await handle.append(b"entry-%d" % entry_id)
        await handle.close()
        ids.append(handle.ledger_id)
    return ids


async def give_cookie(bk: BookKeeper, bookie_id: str) -> None:
    """A cookie in the metadata store, as a real bookie writes one (memory bookies do not)."""
    await bk.cluster.store.create(bk.cluster.cookies.path(bookie_id), b"x", make_parents=True)


def members(meta: object) -> set[str]:
    return {str(b) for ensemble in meta.segments.values() for b in ensemble}  # type: ignore[attr-defined]


@on_virtual_time
async def test_recover_plans_then_moves_every_ledger_off_a_lost_bookie() -> None:
    async with MemoryCluster(4) as cluster:
        bk = await cluster.client()
        ledgers = await write(bk, 4)
        lost = cluster.bookies[1].bookie_id
        await give_cookie(bk, lost)
        await cluster.stop_bookie(cluster.bookies[1])
        needing = [lid for lid in ledgers if lost in members(await bk.ledger_metadata(lid))]
        assert needing  # 4 ledgers on 3 of 4 bookies: some use it

        seen: list[tuple[int, int]] = []
        plan = await admin.recover(
            bk, [lost], CONFIG, dry_run=True, on_progress=lambda d, t: seen.append((d, t))
        )
        assert [o.ledger_id for o in plan] == needing
        assert all(o.done and o.entries_copied == 0 for o in plan)
        assert seen[0] == (0, len(needing)) and seen[-1] == (len(needing), len(needing))
        assert [lid for lid in needing if lost in members(await bk.ledger_metadata(lid))] == needing

        outcomes = await admin.recover(bk, [lost], CONFIG)
        assert [(o.ledger_id, o.done) for o in outcomes] == [(lid, True) for lid in needing]
        for ledger_id in ledgers:
            assert lost not in members(await bk.ledger_metadata(ledger_id))
            reader = await bk.open_ledger(ledger_id, PASSWORD, recovery=False)
            assert [e.data async for e in reader.read(0, 9)] == [b"entry-%d" % i for i in range(10)]
        assert await admin.recover(bk, [lost], CONFIG) == []  # nothing left to do (it has a cookie)


@on_virtual_time
async def test_recover_one_ledger_and_the_mistakes() -> None:
    async with MemoryCluster(4) as cluster:
        bk = await cluster.client()
        ledgers = await write(bk, 2)
        meta = await bk.ledger_metadata(ledgers[0])
        on = sorted(members(meta))[0]
        off = next(b.bookie_id for b in cluster.bookies if b.bookie_id not in members(meta))
        with pytest.raises(ConfigError, match=r"^unknown bookie nobody:1: not registered"):
            await admin.recover(bk, ["nobody:1"], CONFIG)
        with pytest.raises(ConfigError, match=r"^ledger: no ledger 999999$"):
            await admin.recover(bk, [on], CONFIG, ledger_id=999_999)
        with pytest.raises(ConfigError, match=rf"^ledger {ledgers[0]} holds no entries on {off}$"):
            await admin.recover(bk, [off], CONFIG, ledger_id=ledgers[0])
        with pytest.raises(ConfigError, match=r"^bookies: "):
            await admin.recover(bk, [], CONFIG)
        [outcome] = await admin.recover(bk, [on], CONFIG, ledger_id=ledgers[0])
        assert outcome.done and outcome.ledger_id == ledgers[0]
        assert on not in members(await bk.ledger_metadata(ledgers[0]))


@on_virtual_time
async def test_listings_status_and_trigger_audit() -> None:
    async with MemoryCluster(3) as cluster:
        bk = await cluster.client()
        urm = bk.cluster.underreplication
        await urm.ensure_layout()
        await urm.mark_underreplicated(5, ["a:1"])
        await urm.mark_underreplicated(6, ["b:1", "a:1"])
        assert await urm.try_lock(6, "worker-1:0")
        rows = await admin.under_replicated(urm)
        assert [(r.ledger_id, r.missing_replicas, r.worker) for r in rows] == [
            (5, ("a:1",), None),
            (6, ("b:1", "a:1"), "worker-1:0"),
        ]
        assert [r.ledger_id for r in await admin.under_replicated(urm, "b:1")] == [6]
        assert await admin.under_replicated(urm, "c:1") == []

        await urm.disable()
        with pytest.raises(BKeeperError, match="auto-recovery is disabled"):
            await admin.trigger_audit(urm)
        await urm.enable()
        with pytest.raises(BKeeperError, match="no auditor is elected"):
            await admin.trigger_audit(urm)
        election: LeaderElection = auditor_election(bk.cluster.store, bk.cluster.root, "aud:1")
        async with election:
            await election.wait_leadership(10)
            assert await admin.trigger_audit(urm) == "aud:1"
            assert await urm.lost_bookie_recovery_delay_s() == 0
            await urm.set_lost_bookie_recovery_delay_s(9)
            assert await admin.trigger_audit(urm) == "aud:1"
            assert await urm.lost_bookie_recovery_delay_s() == 9  # rewritten as it was
            status = await admin.auto_recovery_status(urm)
        assert status == admin.AutoRecoveryStatus(True, "aud:1", 9, ((6, "worker-1:0"),), 2)


@on_virtual_time
async def test_decommission_refusals_a_bookie_no_ledger_needs_and_the_timeout() -> None:
    async with MemoryCluster(4) as cluster:
        bk = await cluster.client()
        [ledger] = await write(bk, 1)
        running = cluster.bookies[0].bookie_id
        with pytest.raises(BKeeperError, match=rf"^bookie {running} is still registered \(writ"):
            await admin.decommission(bk, running, timeout_s=5)
        with pytest.raises(ConfigError, match=r"^unknown bookie nobody:1"):
            await admin.decommission(bk, "nobody:1", timeout_s=5)
        used = members(await bk.ledger_metadata(ledger))
        [unused] = [b for b in cluster.bookies if b.bookie_id not in used]
        await give_cookie(bk, unused.bookie_id)
        await cluster.stop_bookie(unused)
        report = await admin.decommission(bk, unused.bookie_id, timeout_s=5)
        assert report == admin.DecommissionReport(unused.bookie_id, 0, True)
        assert unused.bookie_id not in await bk.cluster.cookies.bookie_ids()

        needed = next(b for b in cluster.bookies if b.bookie_id in used)
        await cluster.stop_bookie(needed)
        with pytest.raises(BKeeperError, match="no auditor is elected"):
            await admin.decommission(bk, needed.bookie_id, timeout_s=5)
        # An auditor that never repairs anything: the wait ends at the timeout.
        async with auditor_election(bk.cluster.store, bk.cluster.root, "aud:1") as election:
            await election.wait_leadership(10)
            with pytest.raises(CallTimeoutError, match=r"1 of 1 ledgers still need it after 0.2 s"):
                await admin.decommission(bk, needed.bookie_id, timeout_s=0.2, poll_interval_s=0.05)


@on_virtual_time
async def test_decommission_triggers_again_when_its_trigger_met_an_auditor_that_was_gone() -> None:
    """The trigger is a write that only a live, watching auditor acts on. Written while the
    elected auditor was a dead process (its vote not expired yet), or before the next one
    watched, it was lost: the next auditor read the delay (an hour) as it stood, and the
    decommission waited until its timeout with no ledger queued."""
    async with MemoryCluster(4) as cluster:
        bk, dead_bk, live_bk = [await cluster.client() for _ in range(3)]
        ledgers = await write(bk, 3)
        urm = bk.cluster.underreplication
        await urm.ensure_layout()
        await urm.set_lost_bookie_recovery_delay_s(3600)
        lost = next(iter(members(await bk.ledger_metadata(ledgers[0]))))
        dead = auditor_election(dead_bk.cluster.store, dead_bk.cluster.root, "dead:1")
        await dead.start()
        await dead.wait_leadership(10)  # elected, and never audits: a process gone silent
        async with AutoRecovery(live_bk, "live:1", RECOVERY):
            await give_cookie(bk, lost)
            await cluster.stop_bookie(next(b for b in cluster.bookies if b.bookie_id == lost))
            decommission = asyncio.create_task(
                admin.decommission(bk, lost, timeout_s=20, poll_interval_s=0.05)
            )
            await asyncio.sleep(0.3)  # its trigger is written while the dead one is elected
            await dead.aclose()  # its session ends: the live participant is elected
            report = await decommission
        assert report.bookie_id == lost and report.ledgers >= 1
        for ledger_id in ledgers:
            assert lost not in members(await bk.ledger_metadata(ledger_id))


@on_virtual_time
async def test_decommission_triggers_again_while_no_ledger_moves() -> None:
    """A trigger written just before a newly elected auditor watches is lost too, with the
    same auditor elected before and after: so no ledger moving for ``retrigger_s`` writes
    the trigger again."""
    async with MemoryCluster(4) as cluster:
        bk = await cluster.client()
        [ledger] = await write(bk, 1)
        urm = bk.cluster.underreplication
        await urm.ensure_layout()
        needed = next(iter(members(await bk.ledger_metadata(ledger))))
        await give_cookie(bk, needed)
        await cluster.stop_bookie(next(b for b in cluster.bookies if b.bookie_id == needed))
        delay_node = f"{bk.cluster.root}/underreplication/lostBookieRecoveryDelay"
        async with auditor_election(bk.cluster.store, bk.cluster.root, "aud:1") as election:
            await election.wait_leadership(10)  # an auditor that never repairs anything
            with pytest.raises(CallTimeoutError):
                await admin.decommission(
                    bk, needed, timeout_s=1.0, poll_interval_s=0.05, retrigger_s=0.2
                )
        _data, version = await bk.cluster.store.get(delay_node)
        assert version >= 3  # created by the first trigger, then written again, and again


@on_virtual_time
async def test_decommission_says_where_each_ledger_stands_and_what_blocks_it() -> None:
    """One ledger moves; the other is on every bookie (E4 of 4): none can replace the lost
    one. The decommission's status says so while it waits, with the worker's reason, and
    its timeout names that ledger, the reason and what to do."""
    async with MemoryCluster(4) as cluster:
        bk, worker_bk = await cluster.client(), await cluster.client()
        [movable] = await write(bk, 1)
        handle = await bk.create_ledger(4, 2, 2, password=PASSWORD)
        for entry_id in range(10):
            await handle.append(b"entry-%d" % entry_id)
        await handle.close()
        stuck = handle.ledger_id
        lost = sorted(members(await bk.ledger_metadata(movable)))[0]
        await give_cookie(bk, lost)
        await cluster.stop_bookie(next(b for b in cluster.bookies if b.bookie_id == lost))
        seen: list[admin.DecommissionStatus] = []
        async with AutoRecovery(worker_bk, "ar:1", RECOVERY):
            with pytest.raises(CallTimeoutError) as timed_out:
                await admin.decommission(
                    bk, lost, timeout_s=30, poll_interval_s=0.5, audit_settle_s=2,
                    on_status=seen.append, clock=LoopClock(),
                )  # fmt: skip
        last = seen[-1]
        assert last.rows[movable].state is LedgerState.MOVED
        row = last.rows[stuck]
        assert (row.state, row.reason_kind, row.reason_worker) == (
            LedgerState.BLOCKED, "no_candidate", "ar:1",
        )  # fmt: skip
        why = f"no candidate bookie for {lost} (segment at entry 0): 3 writable, 3 already in"
        assert row.reason is not None and row.reason.startswith(why)
        assert row.remedy is not None and row.remedy.startswith("add 1 writable bookie outside")
        assert last.audit is AuditState.RAN and last.auditor == "ar:1"
        # it said so while it ran, not only at the end
        first_blocked = next(i for i, s in enumerate(seen) if s.rows[stuck].state == "blocked")
        assert first_blocked < len(seen) - 10
        message = str(timed_out.value)
        assert message.startswith(f"bookie {lost}: 1 of 2 ledgers still need it after 30 s")
        assert f"; ledger {stuck} blocked: {why}" in message
        assert "add 1 writable bookie outside its ensemble" in message
        assert lost in await bk.cluster.cookies.bookie_ids()  # not decommissioned


@on_virtual_time
async def test_decommission_reports_each_ledger_on_its_way_off_the_bookie() -> None:
    async with MemoryCluster(4) as cluster:
        bk, worker_bk = await cluster.client(), await cluster.client()
        ledgers = await write(bk, 4)
        lost = sorted(members(await bk.ledger_metadata(ledgers[0])))[0]
        needing = [lid for lid in ledgers if lost in members(await bk.ledger_metadata(lid))]
        await give_cookie(bk, lost)
        await cluster.stop_bookie(next(b for b in cluster.bookies if b.bookie_id == lost))
        seen: list[admin.DecommissionStatus] = []
        async with AutoRecovery(worker_bk, "ar:1", RECOVERY):
            report = await admin.decommission(
                bk, lost, timeout_s=30, poll_interval_s=0.05, on_status=seen.append,
                clock=LoopClock(),
            )  # fmt: skip
        assert report.ledgers == len(needing) and report.cookie_deleted
        assert [(r.ledger_id, r.state) for r in report.rows] == [
            (lid, LedgerState.MOVED) for lid in needing
        ]
        assert all(r.since_ms is not None for r in report.rows)
        assert sorted(seen[0].rows) == needing  # every ledger from the first status on
        assert seen[-1].moved == len(needing)
