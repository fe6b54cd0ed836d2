"""The checks of a verification run after its faults are healed, beyond its history: every
entry a fault damaged is whole again on its bookie, and every ledger's replicas hold their
entries once auto-recovery had ``settle_s`` to repair them."""

from __future__ import annotations

import asyncio

from bkeeper.autorecovery.auditor import Auditor
from bkeeper.autorecovery.config import AutoRecoveryConfig
from bkeeper.autorecovery.replicas import list_ledger
from bkeeper.client.bookkeeper import BookKeeper
from bkeeper.client.distribution import write_set
from bkeeper.common.errors import BKeeperError, LedgerNotFoundError
from bkeeper.testing.entry_log_faults import FlippedEntries
from bkeeper.testing.sandbox import Sandbox
from bkeeper.verify.check import Verdict
from bkeeper.verify.status import RunStatus
from bkeeper.verify.workload import start_client

__all__ = ["audit_and_settle", "check_flipped", "check_listed", "check_replication"]


async def check_listed(uri: str, ledger_ids: list[int], verdict: Verdict) -> list[int]:
    """Every ledger of a named log's list exists (a list naming a deleted ledger is how a
    roll whose answer was lost, taken for failed, showed: readers pass over a gone ledger,
    as retention deletes them); the ones that do."""
    found = []
    async with await start_client(uri) as bk:
        for ledger_id in ledger_ids:
            try:
                await bk.ledger_metadata(ledger_id)
            except LedgerNotFoundError:
                verdict.violate(_gone(ledger_id))
            else:
                found.append(ledger_id)
    return found


def _gone(ledger_id: int) -> str:
    return f"ledger {ledger_id} is gone (no metadata), yet the workload's log still names it"


async def check_flipped(
    sandbox: Sandbox, flipped: list[tuple[int, FlippedEntries]], verdict: Verdict
) -> None:
    """Each entry a ``corrupt-entry-log`` fault damaged on a bookie is whole there again
    (read from that bookie alone, its digest checked), unless the bookie no longer has to
    hold it (its ledger gone, or the entry's write set changed)."""
    if not flipped:
        return
    async with await start_client(sandbox.metadata_uri) as bk:
        for index, damaged in flipped:
            host, port = sandbox.bookie_address(index)
            bookie = f"{host}:{port}"
            try:
                meta = await bk.ledger_metadata(damaged.ledger_id)
            except LedgerNotFoundError:
                continue  # deleted since (the kv store truncates its log)
            handle = await bk.open_ledger(damaged.ledger_id, meta.password, recovery=False)
            try:
                for entry_id in damaged.entry_ids:
                    ensemble = [str(b) for b in meta.ensemble_for(entry_id)]
                    members = write_set(entry_id, meta.ensemble_size, meta.write_quorum)
                    if bookie not in [ensemble[i] for i in members]:
                        continue
                    try:
                        await handle.read_entry_from(bookie, entry_id)
                    except BKeeperError as exc:
                        verdict.violate(
                            f"ledger {damaged.ledger_id} entry {entry_id}: bookie {bookie} "
                            f"still lacks a whole copy after its entry log was damaged: {exc}"
                        )
            finally:
                await handle.close()


async def audit_and_settle(bk: BookKeeper, settle_s: float, verdict: Verdict) -> None:
    """The auditor's replicas check over the cluster, once; then the workers have
    ``settle_s`` to repair what it marked, and a ledger still marked is a violation."""
    urm = bk.cluster.underreplication
    await urm.ensure_layout()
    await Auditor(bk, urm, AutoRecoveryConfig()).replicas_check()
    deadline = asyncio.get_running_loop().time() + settle_s
    while asyncio.get_running_loop().time() < deadline:
        if not [x async for x in urm.ledger_ids()]:
            break
        await asyncio.sleep(1.0)
    marked = sorted([x async for x in urm.ledger_ids()])
    if marked:
        verdict.violate(
            f"{len(marked)} ledgers still marked under-replicated {settle_s:g} s after "
            f"the faults stopped: {marked[:10]}"
        )


async def check_replication(
    uri: str,
    ledger_ids: list[int],
    settle_s: float,
    verdict: Verdict,
    gone_ok: bool = False,
    *,
    audit: bool = True,
    status: RunStatus | None = None,
) -> None:
    """``gone_ok``: a ledger deleted meanwhile is skipped (else its absence is an error).
    ``audit``: run the auditor's replicas check over the cluster and give the workers
    ``settle_s`` first (on verify's own cluster; someone else's is its own auditor's)."""
    status = status or RunStatus()
    async with await start_client(uri) as bk:
        if audit:
            status.enter("settling: auto-recovery repairs what the faults left", settle_s)
            await audit_and_settle(bk, settle_s, verdict)
        status.enter(f"checking the replicas of {len(ledger_ids)} ledgers")
        live = (await bk.cluster.registry.bookies()).writable
        lists = asyncio.Semaphore(32)
        for ledger_id in ledger_ids:
            try:
                meta = await bk.ledger_metadata(ledger_id)
            except LedgerNotFoundError:
                if not gone_ok:
                    verdict.violate(_gone(ledger_id))
                continue
            shortfall, unknown, _asked = await list_ledger(bk, ledger_id, meta, live, lists)
            if shortfall:
                verdict.violate(
                    f"ledger {ledger_id}: replicas lack entries after repair: "
                    f"{dict(shortfall.lacking)}"
                )
            if unknown:
                verdict.violate(f"ledger {ledger_id}: replicas could not list entries: {unknown}")
