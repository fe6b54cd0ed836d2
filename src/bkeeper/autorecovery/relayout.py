"""Changing the replication (ensemble size, write and ack quorums) of a sealed ledger, online.

What Apache BookKeeper users ask for (BK#4664) and cannot do there: a ledger written with
``Qw=2`` kept on 3 bookies from now on. The ledger stays readable throughout: entries are
only ever added to bookies, never removed, and the metadata changes last, in one
compare-and-set; a reader holding the old metadata still finds every entry where the old
layout put it.

:func:`plan_relayout` (pure) decides, per segment: the new ensemble (the old one's first
``E`` members when it shrinks; the old one extended with bookies chosen by the client's
placement when it grows) and, per bookie, the entries it must receive: those its write sets
hold under the new layout (:func:`bkeeper.client.distribution.write_set`) that it did not
hold under the old. :func:`relayout_ledger` copies them (the re-replication machinery:
reads from the old replicas, recovery adds to the targets, each target made durable) and
then writes the metadata, refusing (``MetadataError``) if the ledger changed meanwhile.

Only closed ledgers: an open ledger's replication belongs to its writer (a named log's new
ledgers take the log's settings, ``bkeeper log config``); it is changed once sealed.
"""

from __future__ import annotations

import random
from collections.abc import Collection
from dataclasses import dataclass, replace

from bkeeper.autorecovery.config import AutoRecoveryConfig
from bkeeper.autorecovery.repair import copy_fragments
from bkeeper.autorecovery.replicate import Fragment
from bkeeper.client.bookkeeper import BookKeeper
from bkeeper.client.distribution import write_set
from bkeeper.client.placement import Domains, replace_bookie
from bkeeper.common.errors import ConfigError, MetadataError, NotEnoughBookiesError
from bkeeper.common.ids import BookieId
from bkeeper.common.rand import new_rng
from bkeeper.common.validate import check_quorum
from bkeeper.meta.ledger_metadata import LedgerMetadata, LedgerState

__all__ = ["Relayout", "RelayoutResult", "plan_relayout", "relayout_ledger"]

#: Placeholder ids of positions not chosen yet while an ensemble grows.
_UNCHOSEN = "\0unchosen-{}"


@dataclass(frozen=True)
class Relayout:
    """The change of one ledger: its metadata after, and the copies that must come first."""

    ledger_id: int
    before: LedgerMetadata
    after: LedgerMetadata
    copies: tuple[Fragment, ...]

    @property
    def entries(self) -> int:
        return sum(len(f.entry_ids) for f in self.copies)

    @property
    def changed(self) -> bool:
        return self.after != self.before


@dataclass(frozen=True)
class RelayoutResult:
    ledger_id: int
    state: str  # unchanged | planned | changed
    replication_before: tuple[int, int, int]
    replication_after: tuple[int, int, int]
    #: segment first entry -> its ensemble after
    ensembles: dict[int, tuple[str, ...]]
    entries: int  # copied (to copy, in a dry run)


def plan_relayout(
    ledger_id: int,
    meta: LedgerMetadata,
    ensemble_size: int,
    write_quorum: int,
    ack_quorum: int,
    writable: Collection[str],
    *,
    domains: Domains | None = None,
    rng: random.Random | None = None,
) -> Relayout:
    """The change of ``meta`` to ``ensemble_size``/``write_quorum``/``ack_quorum`` (module
    doc). ``ConfigError``: quorums that do not fit, or an open ledger;
    ``NotEnoughBookiesError``: too few writable bookies to grow an ensemble."""
    check_quorum(ensemble_size, write_quorum, ack_quorum)
    if meta.state is not LedgerState.CLOSED:
        raise ConfigError(
            f"ledger {ledger_id} is not closed: its writer owns its replication (a named log's "
            "new ledgers take the log's settings); change it once it is sealed"
        )
    rng = rng or new_rng()
    starts = list(meta.segments)
    segments: dict[int, tuple[BookieId, ...]] = {}
    copies: list[Fragment] = []
    for index, first in enumerate(starts):
        old = [str(b) for b in meta.segments[first]]
        new = _new_ensemble(old, ensemble_size, write_quorum, writable, domains, rng)
        segments[first] = tuple(BookieId(b) for b in new)
        last = starts[index + 1] - 1 if index + 1 < len(starts) else meta.last_entry_id
        needed: dict[int, list[int]] = {}
        for entry_id in range(first, last + 1):
            held = {old[p] for p in write_set(entry_id, len(old), meta.write_quorum)}
            for position in write_set(entry_id, ensemble_size, write_quorum):
                if new[position] not in held:
                    needed.setdefault(position, []).append(entry_id)
        for position, entry_ids in sorted(needed.items()):
            copies.append(Fragment(first, position, "", new[position], tuple(entry_ids)))
    after = replace(
        meta,
        ensemble_size=ensemble_size,
        write_quorum=write_quorum,
        ack_quorum=ack_quorum,
        segments=segments,
    )
    return Relayout(ledger_id, meta, after, tuple(copies))


def _new_ensemble(
    old: list[str],
    size: int,
    write_quorum: int,
    writable: Collection[str],
    domains: Domains | None,
    rng: random.Random,
) -> list[str]:
    if size <= len(old):
        return old[:size]
    new = old + [_UNCHOSEN.format(i) for i in range(len(old), size)]
    candidates = [b for b in writable if b not in old]
    for position in range(len(old), size):
        try:
            new[position] = replace_bookie(
                new, position, candidates, write_quorum, domains=domains, rng=rng
            )
        except NotEnoughBookiesError:
            raise NotEnoughBookiesError(
                f"an ensemble of {size} needs {size - len(old)} more bookies than the "
                f"{len(old)} it has: {len(candidates)} writable bookies outside it"
            ) from None
    return new


async def relayout_ledger(
    bk: BookKeeper,
    ledger_id: int,
    ensemble_size: int,
    write_quorum: int,
    ack_quorum: int,
    config: AutoRecoveryConfig,
    *,
    dry_run: bool = False,
) -> RelayoutResult:
    """Change ``ledger_id``'s replication (module doc); ``dry_run``: plan only."""
    versioned = await bk.cluster.ledgers.read(ledger_id)
    meta = versioned.value
    if meta.has_password is False:
        raise ConfigError(
            f"ledger {ledger_id}: no password in its metadata: its entries cannot be copied"
        )
    bookies = await bk.cluster.registry.bookies()
    plan = plan_relayout(
        ledger_id,
        meta,
        ensemble_size,
        write_quorum,
        ack_quorum,
        bookies.writable,
        domains=await bk.domains(),
    )
    before = (meta.ensemble_size, meta.write_quorum, meta.ack_quorum)
    after = (ensemble_size, write_quorum, ack_quorum)
    ensembles = {first: tuple(map(str, e)) for first, e in plan.after.segments.items()}
    if not plan.changed:
        return RelayoutResult(ledger_id, "unchanged", before, after, ensembles, 0)
    if dry_run:
        return RelayoutResult(ledger_id, "planned", before, after, ensembles, plan.entries)
    copied = await copy_fragments(bk, ledger_id, meta, versioned, plan.copies, config)
    current = await bk.cluster.ledgers.read(ledger_id)
    if current.value != meta:
        raise MetadataError(
            f"ledger {ledger_id} changed while its replication was being changed (an ensemble "
            "repaired, a relocation?): run it again"
        )
    await bk.cluster.ledgers.write(ledger_id, plan.after, current.version)
    return RelayoutResult(ledger_id, "changed", before, after, ensembles, copied)
