"""Relocating ledgers that break the placement policy, on demand (Java 4.17's
``relocateledgers``): ``bkeeper shell relocateledgers``.

For each ledger asked for (or every ledger): which segments break the client's placement
(:func:`~bkeeper.autorecovery.findings.placement_violations`), which live bookies to move
(:func:`~bkeeper.autorecovery.replicate.relocations`), and then the move itself through the
one repair path (:func:`~bkeeper.autorecovery.repair.replicate_ledger` with ``relocate``):
copy the moved bookie's entries to a bookie on a rack that mends the write quorums, then
compare-and-set the metadata. Open ledgers are never fenced for it: their last segment stays
as it is (its writer's ensemble changes follow the policy already), earlier ones move.

A dry run plans only. Outcomes are per ledger: ``adheres`` (nothing to do), ``planned``,
``moved``, ``cannot`` (breaks the policy, but no writable bookie can mend it: the racks
there are, named) or ``failed`` (the repair's reason).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from bkeeper.autorecovery.config import AutoRecoveryConfig
from bkeeper.autorecovery.findings import placement_violations
from bkeeper.autorecovery.recovery_adds import Throttle
from bkeeper.autorecovery.repair import replicate_ledger
from bkeeper.autorecovery.replicate import relocations
from bkeeper.client.bookkeeper import BookKeeper
from bkeeper.client.placement import Domains
from bkeeper.common.clock import default_clock
from bkeeper.common.errors import ConfigError, LedgerNotFoundError

__all__ = ["RELOCATIONS_IN_PARALLEL", "Relocation", "relocate_ledgers"]

#: Ledgers relocated at once by one command.
RELOCATIONS_IN_PARALLEL = 4


@dataclass(frozen=True)
class Relocation:
    """What was (or would be) done to one ledger."""

    ledger_id: int
    state: str  # adheres | planned | moved | cannot | failed
    #: first entries of the segments that break the policy
    violating: tuple[int, ...] = ()
    #: segment first entry -> {moved bookie: its new place}
    moves: dict[int, dict[str, str]] = field(default_factory=dict)
    entries: int = 0  # copied (planned, in a dry run)
    reason: str = ""


async def relocate_ledgers(
    bk: BookKeeper,
    config: AutoRecoveryConfig,
    *,
    ledger_ids: Iterable[int] | None = None,
    dry_run: bool = False,
    on_progress: Callable[[int, int], None] = lambda done, total: None,
) -> list[Relocation]:
    """Relocate (or plan, ``dry_run``) the ledgers that break ``bk``'s placement (module
    doc); ``ConfigError`` for a ledger asked for that does not exist, or when the client
    places at random (nothing to relocate to)."""
    domains = await bk.domains()
    if domains is None:
        raise ConfigError("placement is random: nothing to relocate (use rackaware or regionaware)")
    if ledger_ids is None:
        ids = [ledger_id async for ledger_id in bk.list_ledgers()]
    else:
        ids = sorted(set(ledger_ids))
        for ledger_id in ids:
            if not await bk.cluster.ledgers.exists(ledger_id):
                raise ConfigError(f"ledger: no ledger {ledger_id}")
    bookies = await bk.cluster.registry.bookies()
    racks_available = len({domains.rack(b) for b in bookies.writable | bookies.read_only})
    total = len(ids)
    on_progress(0, total)
    todo = iter(ids)
    results: dict[int, Relocation] = {}
    throttle = Throttle(config.rate_bytes_per_s, default_clock(), config.bytes_in_flight_max)

    async def one(ledger_id: int) -> Relocation:
        try:
            meta = await bk.ledger_metadata(ledger_id)
        except LedgerNotFoundError:
            return Relocation(ledger_id, "adheres", reason="deleted meanwhile")
        violating = placement_violations(meta, domains, racks_available)
        if not violating:
            return Relocation(ledger_id, "adheres")
        if not relocations(meta, domains, bookies.writable, racks_available):
            members = {str(b) for first in violating for b in meta.segments[first]}
            why = _why_not(domains, bookies.writable - members)
            return Relocation(ledger_id, "cannot", violating, reason=why)
        outcome = await replicate_ledger(
            bk, ledger_id, [], config, fence_open=False, dry_run=dry_run, throttle=throttle,
            relocate=True,
        )  # fmt: skip
        entries = outcome.plan.entries if dry_run and outcome.plan else outcome.entries_copied
        if not outcome.done:
            return Relocation(
                ledger_id, "failed", violating, outcome.replaced, entries, outcome.reason
            )
        state = "planned" if dry_run else "moved"
        return Relocation(ledger_id, state, violating, outcome.replaced, entries)

    async def worker() -> None:
        for ledger_id in todo:
            results[ledger_id] = await one(ledger_id)
            on_progress(len(results), total)

    async with asyncio.TaskGroup() as group:
        for _ in range(min(RELOCATIONS_IN_PARALLEL, max(total, 1))):
            group.create_task(worker())
    return [results[ledger_id] for ledger_id in ids]


def _why_not(domains: Domains, outside: Iterable[str]) -> str:
    """Why no move mends a ledger: where the writable bookies outside its ensembles are."""
    racks = sorted({domains.rack(b) for b in outside})
    where = f"on {', '.join(racks)}" if racks else "none"
    return (
        f"no writable bookie outside its ensembles is on a rack that mends it (those outside: "
        f"{where}); add bookies on other racks"
    )
