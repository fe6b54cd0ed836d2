"""What a writer does around degraded writes (``adding`` rule 5) besides the pipeline's
decisions: the log lines and metrics when it goes degraded or heals, queuing the ledger for
auto-recovery so that the entries a bookie missed while down are repaired (never silent),
and which bookies down answer again (to be taken back in their place).

Degraded writes (``ClientConfig.degraded_writes``; ``adding`` rule 5): a change that finds no
bookie to replace a failed one leaves it *down* while every write set keeps ``Qa`` bookies up;
the writer logs one warning, goes on, and every ``degraded_retry_interval_ms`` searches for
replacements in a task of its own
(:meth:`~bkeeper.client.write_handle.WriteHandle._search_replacements`), then changes the
ensemble once it found them (one info line). A bookie down that is registered writable and
accepts a connection again (restarted) is taken back instead, in its place. The explicit LAC
and ``force`` go to the bookies up.
"""

from __future__ import annotations

import logging

from bkeeper.client.add_effects import Effects
from bkeeper.client.context import ClientContext
from bkeeper.common.errors import BKeeperError

__all__ = ["answering_again", "log_degraded", "mark_gap"]

#: The writer's logger: these lines are the writer's, wherever the code that says them is.
log = logging.getLogger("bkeeper.client.write_handle")


def log_degraded(ctx: ClientContext, ledger_id: int, effects: Effects, ack_quorum: int) -> None:
    """Say that the writer of ``ledger_id`` took bookies back, went degraded or healed
    (``effects``), once each, and count it in the client's metrics."""
    metrics = ctx.metrics
    if effects.back:
        log.info(
            "ledger %d: bookie(s) %s answer again: taken back, adds go to them again",
            ledger_id,
            ", ".join(effects.back),
        )
    if effects.went_down:
        log.warning(
            "ledger %d: writing degraded: bookie(s) %s down and no bookie can replace them;"
            " entries complete with %d acks from the others of their write set; looking"
            " for a replacement every %d ms",
            ledger_id,
            ", ".join(effects.went_down),
            ack_quorum,
            ctx.config.degraded_retry_interval_ms,
        )
        if metrics is not None:
            metrics.writers_degraded.value += 1
    if effects.healed:
        log.info(
            "ledger %d: degraded writes ended: bookie(s) %s replaced or taken back",
            ledger_id,
            ", ".join(effects.healed),
        )
        if metrics is not None:
            metrics.writers_healed.value += 1


async def mark_gap(ctx: ClientContext, ledger_id: int, bookies: tuple[str, ...]) -> None:
    """Degraded writes ended: ``bookies`` (replaced, or taken back in their place) lack
    the entries written while they were down. The ledger is queued for auto-recovery
    with them as missing replicas, so the gap is repaired (or shown, with why it waits,
    in ``listunderreplicated``) and never silent: the auditor marks only bookies that
    left the registry, and one taken back never did for long, or at all."""
    mark = ctx.mark_underreplicated
    missing = ", ".join(bookies)
    if mark is None:
        log.warning(
            "ledger %d: bookie(s) %s lack the entries written while they were down; "
            "nothing to queue the ledger for auto-recovery with",
            ledger_id,
            missing,
        )
        return
    try:
        await mark(ledger_id, bookies)
    except BKeeperError as exc:
        log.warning(
            "ledger %d: bookie(s) %s lack the entries written while they were down, and "
            "queuing it for auto-recovery failed (%s): `bkeeper shell recover` or the "
            "replicas check repairs it",
            ledger_id,
            missing,
            exc,
        )
        return
    log.info(
        "ledger %d: queued for auto-recovery: bookie(s) %s lack the entries written while "
        "they were down",
        ledger_id,
        missing,
    )


async def answering_again(ctx: ClientContext, bookies: frozenset[str]) -> set[str]:
    """Those of ``bookies`` registered writable that accept a connection now."""
    try:
        candidates = bookies & await ctx.writable_bookies()
    except BKeeperError:
        return set()  # the metadata store away: the search finds nothing either
    back = set()
    for bookie in sorted(candidates):
        try:
            await ctx.pool.connection(bookie)
        except BKeeperError:
            continue  # registered, but dead (its session not expired yet)
        back.add(bookie)
    return back
