"""A writer's metadata updates: a new segment (ensemble change) and the seal (close).

:func:`change_ensemble` runs the rounds of an ensemble change the
:class:`~bkeeper.client.adding.AddPipeline` asks for: quarantine the failed bookies
(client-wide, ``bookie_quarantine_time_ms``), choose replacements position by position
(placement: never a bookie that failed during this change, a quarantined one only when no
other is left), write the segment, report it. A degraded writer (``AddPipeline`` rule 5)
searches with :func:`replacement_ensemble` first, while its entries go on completing, and
passes what it found as ``chosen``: the first round takes it if it replaces the same bookies.
A change that finds no replacement raises ``NotEnoughBookiesError`` (the writer goes on
degraded, or fails).

Both go through :func:`bkeeper.common.cas.cas_update`, with ``metadata_retries_max`` rounds:

* **new segment**: written at the version the writer holds. A lost compare-and-set re-reads:
  a ledger no longer OPEN is being recovered by another client, and the writer is fenced
  (``LedgerFencedError``); an OPEN one gets the segment on the fresh version.
* **seal**: CLOSED with last entry = LAC and the length up to it. A ledger found CLOSED at the
  same entry is success; CLOSED elsewhere is ``LedgerClosedError``; IN_RECOVERY is
  ``LedgerFencedError``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from bkeeper.client.adding import AddPipeline, Replacement
from bkeeper.client.context import ClientContext
from bkeeper.common.cas import cas_update
from bkeeper.common.errors import LedgerClosedError, LedgerFencedError
from bkeeper.meta.ledger_metadata import LedgerMetadata, LedgerState
from bkeeper.meta.store import Versioned

__all__ = ["change_ensemble", "replacement_ensemble", "seal", "write_segment"]

log = logging.getLogger(__name__)


async def change_ensemble(
    ctx: ClientContext,
    adds: AddPipeline,
    versioned: Versioned[LedgerMetadata],
    on_new_segment: Callable[[Versioned[LedgerMetadata], list[int]], None],
    chosen: tuple[str, ...] | None = None,
) -> None:
    """Replace the bookies ``adds`` has seen fail, round by round, until none is left; after
    each segment is written, ``on_new_segment(metadata written, positions changed)``. Raises
    what stopped the change (the writer then fails with it, or goes on degraded).
    ``chosen``: the new ensemble a degraded writer's search found (module doc)."""
    ledger_id, write_quorum = adds.ledger_id, versioned.value.write_quorum
    while (replacement := adds.begin_replacement()) is not None:
        old, first = adds.ensemble, replacement.first_entry
        log.info("ledger %d: replacing %s from entry %d", ledger_id, replacement.failed, first)
        ctx.quarantine_bookies(replacement.failed)
        if chosen is not None and _replaces(old, chosen, replacement.failed):
            new = chosen
        else:
            new = await replacement_ensemble(ctx, old, replacement, write_quorum)
        chosen = None
        versioned = await write_segment(ctx, ledger_id, versioned, first, new)
        changed = [p for p, bookie in enumerate(new) if old[p] != bookie]
        replaced = {old[p]: new[p] for p in changed}
        log.info("ledger %d: ensemble change at entry %d: %s", ledger_id, first, replaced)
        on_new_segment(versioned, changed)


def _replaces(old: tuple[str, ...], new: tuple[str, ...], failed: frozenset[str]) -> bool:
    """Whether ``new`` is ``old`` with exactly the bookies of ``failed`` replaced."""
    return len(new) == len(old) and all(
        (o in failed) == (o != n) and n not in failed for o, n in zip(old, new, strict=True)
    )


async def replacement_ensemble(
    ctx: ClientContext, ensemble: tuple[str, ...], replacement: Replacement, write_quorum: int
) -> tuple[str, ...]:
    """``ensemble`` with every bookie of ``replacement.failed`` replaced by a placement choice
    (``NotEnoughBookiesError`` if one has none)."""
    new = list(ensemble)
    exclude = set(replacement.exclude)
    for position, bookie in enumerate(ensemble):
        if bookie in replacement.failed:
            new[position] = await ctx.replacement(tuple(new), position, write_quorum, exclude)
    return tuple(new)


async def write_segment(
    ctx: ClientContext,
    ledger_id: int,
    versioned: Versioned[LedgerMetadata],
    first_entry: int,
    ensemble: tuple[str, ...],
) -> Versioned[LedgerMetadata]:
    """Add the segment ``ensemble`` from ``first_entry``; the metadata written."""

    async def read() -> Versioned[LedgerMetadata]:
        current = await ctx.ledgers.read(ledger_id)
        if current.value.state is not LedgerState.OPEN:
            raise LedgerFencedError(
                f"ledger {ledger_id} is {current.value.state.name}: another client is recovering it"
            )
        return current

    async def attempt(held: Versioned[LedgerMetadata]) -> Versioned[LedgerMetadata]:
        meta = held.value.with_new_segment(first_entry, ensemble)
        return await ctx.ledgers.write(ledger_id, meta, held.version)

    return await cas_update(
        read,
        attempt,
        what=f"ledger {ledger_id}: ensemble change",
        attempts_max=ctx.config.metadata_retries_max,
        current=versioned,
    )


async def seal(
    ctx: ClientContext,
    ledger_id: int,
    versioned: Versioned[LedgerMetadata],
    last_entry: int,
    length: int,
) -> Versioned[LedgerMetadata]:
    """Close the ledger at ``last_entry`` (``length`` bytes); the metadata written."""

    async def read() -> Versioned[LedgerMetadata]:
        return await ctx.ledgers.read(ledger_id)

    async def attempt(held: Versioned[LedgerMetadata]) -> Versioned[LedgerMetadata]:
        meta = held.value
        if meta.state is LedgerState.CLOSED:
            if meta.last_entry_id == last_entry:
                return held
            raise LedgerClosedError(
                f"ledger {ledger_id} was closed by another client at entry "
                f"{meta.last_entry_id}, this writer confirmed {last_entry}"
            )
        if meta.state is LedgerState.IN_RECOVERY:
            raise LedgerFencedError(f"ledger {ledger_id} is being recovered")
        return await ctx.ledgers.write(ledger_id, meta.closed(last_entry, length), held.version)

    return await cas_update(
        read,
        attempt,
        what=f"ledger {ledger_id}: close",
        attempts_max=ctx.config.metadata_retries_max,
        current=versioned,
    )
