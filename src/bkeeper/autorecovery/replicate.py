"""The repair plan of one ledger that lost bookies (pure: metadata and bookie sets in, plan out).

For every segment with a lost bookie in its ensemble, :func:`plan_repair` picks a replacement
and lists the entries the lost bookie held there (:mod:`bkeeper.autorecovery.expected`): the
entries the replacement must receive before the metadata may name it.

Rules:

* Targets are writable bookies only (read-only bookies stay sources, never targets), never a
  lost bookie, never a member of the segment's ensemble (the ensemble as already changed by
  this plan: two lost bookies of one segment get two different targets); chosen by
  :func:`bkeeper.client.placement.replace_bookie` (random, or rack- or region-aware with
  ``domains``).
* A registered writable member that lacks entries and that no bookie can replace (back from
  a restart after its writers went on without it: degraded writes on a cluster of E
  bookies, no spare) is refilled in place (``refill``): the entries it lacks are copied to
  it, its place in the metadata kept.
* Placement repair (:func:`relocations`): a live member of a segment whose write quorums span
  too few racks is moved as a lost one is replaced (its entries copied to a bookie on a
  rack that mends it, then the metadata changed); only in segments a repair may change,
  never a reason to fence an open ledger. The moved bookie keeps its copies (nothing reads
  them any more; they go with the ledger).
* Entries: a closed ledger's segments hold entries up to its last entry; an open (or
  in-recovery) ledger's last segment is still being written and is not planned: a lost bookie
  there needs the ledger fenced and sealed first (:func:`last_segment_lost`), after which it is
  planned as closed. Its earlier segments hold every entry up to the next segment's first.
* A segment with no entries (past the end) needs no copy, only the metadata change: it is
  planned when a target is available and skipped otherwise (nothing there can be lost).
  A segment with entries and no possible target raises :class:`NotEnoughBookiesError`.

:func:`missing_replacements` is the decision taken before anything is done, fencing included:
a ledger some lost bookie of which has no possible replacement (every writable bookie is lost
or in that segment's ensemble already) is left as it is, open or not, with the reason. The
last segment of a ledger not closed counts as holding entries on each of its bookies (the
writer may be adding them): fencing it only to find no target would stop its writer for
nothing. (Java's worker fences anyway after its grace period.) Rack-aware placement falls
back to any bookie when racks run out (:mod:`bkeeper.client.placement`), so placement never
blocks a repair by itself.

:func:`apply_plan` is the compare-and-set's decision: it applies each replacement to the
metadata as it is now, only where the lost bookie still holds that position.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from bkeeper.autorecovery.expected import Stripe, stripes_of
from bkeeper.client.placement import Domains, placement_moves, replace_bookie
from bkeeper.common.errors import NotEnoughBookiesError
from bkeeper.common.ids import BookieId
from bkeeper.common.rand import new_rng
from bkeeper.meta.ledger_metadata import LedgerMetadata, LedgerState

__all__ = [
    "BlockKind",
    "Fragment",
    "RepairPlan",
    "apply_plan",
    "last_segment_lost",
    "lost_bookies",
    "missing_replacements",
    "plan_repair",
    "relocations",
]


class BlockKind(StrEnum):
    """Why a marked ledger is not repaired yet (the ``kind`` of its recorded reason)."""

    NO_CANDIDATE = "no_candidate"  # no writable bookie can replace a lost one
    AWAITING_WRITER = "awaiting_writer"  # open, last segment lost: in its grace period
    NO_PASSWORD = "no_password"  # its metadata lacks the password a copy needs
    REPLICAS_UNREADABLE = "replicas_unreadable"  # no surviving replica served an entry
    TARGET_FAILED = "target_failed"  # the chosen target refused or lost the copies
    ERROR = "error"  # anything else (metadata store away, a race lost, a bug)


@dataclass(frozen=True)
class Fragment:
    """What replacing ``lost`` at ``position`` of the segment starting at ``segment`` takes:
    copying ``entry_ids`` (ascending; empty for a segment without entries) to ``target``."""

    segment: int
    position: int
    lost: str
    target: str
    entry_ids: Sequence[int] = field(hash=False)


@dataclass(frozen=True)
class RepairPlan:
    """The fragments of one ledger to repair, and the ensembles they lead to."""

    ledger_id: int
    fragments: tuple[Fragment, ...]
    #: segment first entry -> its ensemble once every fragment of the segment is applied
    ensembles: Mapping[int, tuple[str, ...]]
    #: a lost bookie sits in the last segment of a ledger not closed: fence and seal first
    needs_fencing: bool = False

    @property
    def replaced(self) -> dict[int, dict[str, str]]:
        """Segment first entry -> {lost bookie: its replacement}."""
        replaced: dict[int, dict[str, str]] = {}
        for fragment in self.fragments:
            replaced.setdefault(fragment.segment, {})[fragment.lost] = fragment.target
        return replaced

    @property
    def entries(self) -> int:
        """Entries to copy in all."""
        return sum(len(fragment.entry_ids) for fragment in self.fragments)


def lost_bookies(meta: LedgerMetadata, available: Collection[str]) -> tuple[str, ...]:
    """The members of ``meta``'s ensembles not in ``available`` (writable and read-only
    bookies), sorted."""
    members = {str(bookie) for ensemble in meta.segments.values() for bookie in ensemble}
    return tuple(sorted(members - set(available)))


def last_segment_lost(meta: LedgerMetadata, lost: Collection[str]) -> bool:
    """True when ``meta`` is not closed and a ``lost`` bookie is in its last segment."""
    if meta.state is LedgerState.CLOSED:
        return False
    return any(str(bookie) in lost for bookie in meta.last_ensemble)


def missing_replacements(
    meta: LedgerMetadata, lost: Collection[str], writable: Collection[str]
) -> str | None:
    """Why ``meta`` cannot be repaired with ``writable`` bookies (module doc), naming the
    first segment short of candidates; None when every lost bookie that must be replaced
    can be. Decided before any fencing."""
    lost_set = {str(bookie) for bookie in lost}
    writable_set = {str(bookie) for bookie in writable}
    starts = list(meta.segments)
    closed = meta.state is LedgerState.CLOSED
    last_entry = meta.last_entry_id if closed else starts[-1] - 1
    stripes = _stripes_by_segment(meta, lost_set, last_entry)
    for segment in starts:
        ensemble = [str(bookie) for bookie in meta.segments[segment]]
        open_tail = not closed and segment == starts[-1]
        needing = [
            bookie
            for bookie in ensemble
            if bookie in lost_set and (open_tail or _holds_entries(stripes.get((segment, bookie))))
        ]
        members = set(ensemble)
        if len(writable_set - lost_set - members) >= len(needing):
            continue
        lacking = len(writable_set & lost_set)  # registered, but lost: never a target
        also_lost = f", {lacking} lacking entries" if lacking else ""
        return (
            f"no candidate bookie for {', '.join(needing)} (segment at entry {segment}): "
            f"{len(writable_set)} writable, {len((writable_set & members) - lost_set)} already "
            f"in the ensemble{also_lost}"
        )
    return None


def _holds_entries(stripe: Stripe | None) -> bool:
    return stripe is not None and next(stripe.entry_ids(), None) is not None


def plan_repair(
    ledger_id: int,
    meta: LedgerMetadata,
    lost: Collection[str],
    writable: Collection[str],
    *,
    racks: Mapping[str, str] | None = None,
    domains: Domains | None = None,
    moves: Mapping[int, Collection[str]] | None = None,
    refill: Mapping[str, Collection[int]] | None = None,
    rng: random.Random | None = None,
) -> RepairPlan:
    """The plan replacing every ``lost`` bookie of ``meta``'s segments (module doc);
    :class:`NotEnoughBookiesError` when a segment holding entries has no possible target.
    ``moves``: segment first entry -> live members to move too (placement repair,
    :func:`relocations`): planned as lost ones, in that segment only. ``refill``: writable
    members that lack entries (back from a restart after their writers went on without
    them) -> the entry ids they lack: copied to themselves, in place, the metadata unchanged
    (fragments whose ``target`` is their ``lost``)."""
    rng = rng or new_rng()
    if domains is None and racks:
        domains = Domains(racks)
    moves = moves or {}
    lost_set = {str(bookie) for bookie in lost}
    moving = {str(bookie) for bookies in moves.values() for bookie in bookies}
    candidates = [str(bookie) for bookie in writable if str(bookie) not in lost_set | moving]
    starts = list(meta.segments)
    closed = meta.state is LedgerState.CLOSED
    last_entry = meta.last_entry_id if closed else starts[-1] - 1
    planned = starts if closed else starts[:-1]
    stripes = _stripes_by_segment(meta, lost_set | moving, last_entry)
    fragments: list[Fragment] = []
    ensembles: dict[int, tuple[str, ...]] = {}
    for segment in planned:
        ensemble = [str(bookie) for bookie in meta.segments[segment]]
        leaving = lost_set | {str(bookie) for bookie in moves.get(segment, ())}
        changed = False
        for position, bookie in enumerate(ensemble):
            if bookie not in leaving:
                continue
            stripe = stripes.get((segment, bookie))
            entry_ids = _entry_ids(stripe) if stripe is not None else ()
            try:
                target = replace_bookie(
                    ensemble, position, candidates, meta.write_quorum, domains=domains, rng=rng
                )
            except NotEnoughBookiesError as exc:
                if not entry_ids or bookie not in lost_set:
                    continue  # nothing there to lose, or a move that cannot be made now
                raise NotEnoughBookiesError(
                    f"ledger {ledger_id}, segment at entry {segment}: {exc}"
                ) from None
            fragments.append(Fragment(segment, position, bookie, target, entry_ids))
            ensemble[position] = target
            changed = True
        if changed:
            ensembles[segment] = tuple(ensemble)
    end = {first: following - 1 for first, following in itertools.pairwise(starts)}
    for bookie, lacks in sorted((refill or {}).items()):
        for segment in starts:  # an open ledger's last too: what it lacks there is settled
            members = [str(b) for b in meta.segments[segment]]
            if bookie not in members:
                continue
            last = end.get(segment, max(lacks, default=-1))
            wanted = tuple(e for e in lacks if segment <= e <= last)
            if wanted:
                position = members.index(bookie)
                fragments.append(Fragment(segment, position, bookie, bookie, wanted))
    return RepairPlan(
        ledger_id, tuple(fragments), ensembles, needs_fencing=last_segment_lost(meta, lost_set)
    )


def relocations(
    meta: LedgerMetadata, domains: Domains, writable: Collection[str], racks_available: int
) -> dict[int, tuple[str, ...]]:
    """Placement repair: segment first entry -> the live members to move so that every write
    quorum spans ``min(min_racks_per_write_quorum, write quorum, racks_available)`` racks
    (:func:`bkeeper.client.placement.placement_moves`), for the segments a repair may change
    (a closed ledger's, or an open one's but its last); empty when nothing is short or no
    writable bookie can mend it."""
    starts = list(meta.segments)
    planned = starts if meta.state is LedgerState.CLOSED else starts[:-1]
    need = min(domains.need(meta.write_quorum), racks_available)
    found: dict[int, tuple[str, ...]] = {}
    for segment in planned:
        ensemble = [str(bookie) for bookie in meta.segments[segment]]
        moving = placement_moves(ensemble, meta.write_quorum, domains, writable, need)
        if moving:
            found[segment] = moving
    return found


def apply_plan(
    meta: LedgerMetadata, fragments: Sequence[Fragment]
) -> tuple[LedgerMetadata, list[Fragment], list[Fragment]]:
    """``meta`` with each fragment's replacement made where its lost bookie still holds its
    position; also the fragments applied and those that could not be (their target joined
    that ensemble meanwhile). A fragment whose position now holds another bookie is neither:
    someone else replaced it, and it needs nothing more."""
    segments = {first: [str(b) for b in ensemble] for first, ensemble in meta.segments.items()}
    applied: list[Fragment] = []
    refused: list[Fragment] = []
    for fragment in fragments:
        ensemble = segments.get(fragment.segment)
        if fragment.target == fragment.lost:
            continue  # a refill in place: the metadata names it already
        if ensemble is None or ensemble[fragment.position] != fragment.lost:
            continue
        if fragment.target in ensemble:
            refused.append(fragment)
            continue
        ensemble[fragment.position] = fragment.target
        applied.append(fragment)
    if not applied:
        return meta, applied, refused
    new_segments = {first: tuple(map(BookieId, ensemble)) for first, ensemble in segments.items()}
    return replace(meta, segments=new_segments), applied, refused


def _stripes_by_segment(
    meta: LedgerMetadata, lost: Collection[str], last_entry: int
) -> dict[tuple[int, str], Stripe]:
    stripes: dict[tuple[int, str], Stripe] = {}
    for bookie in lost:
        for stripe in stripes_of(meta, bookie, last_entry):
            stripes[stripe.first, bookie] = stripe
    return stripes


def _entry_ids(stripe: Stripe) -> Sequence[int]:
    if stripe.write_quorum >= stripe.ensemble_size:
        return range(stripe.first, stripe.last + 1)  # every entry: no list to build
    return tuple(stripe.entry_ids())
