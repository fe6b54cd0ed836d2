"""What the audit finds, as pure functions of ledger metadata, live bookies and time.

* :func:`ledgers_to_mark`: which ledgers have a replica on a bookie that is not live (writable
  or read-only), and which bookies. A closed ledger counts a bookie only where it holds
  entries: a segment past the last entry, or a stripe that gives that bookie no entry
  (``E > Qw``), needs no copy. An open or in-recovery ledger counts every segment (its end is
  not known yet; the worker seals it first).
* :func:`fragment_checks`: the probe reads of check-all-ledgers: for each bookie of each
  segment, the first and the last entry that bookie should hold there (BookKeeper's
  LedgerChecker reads the same two).
* :func:`placement_violations`: the segments whose write sets span fewer racks than they
  could (the placement check);
* :func:`replica_shortfall`: given the entry ids some replicas say they store
  (GET_LIST_OF_ENTRIES_OF_LEDGER), which of them lack entries their write sets give them,
  and how many entries are left with fewer copies than the write and the ack quorum (the
  replicas check);
* :class:`Tally`: what a pass gathers, turned into its :class:`AuditReport`;
* :class:`LossTracker`: which bookies are lost since when, and which are due for marking once
  the lost-bookie delay has passed; a bookie back before that is forgotten.

No I/O here: :mod:`bkeeper.autorecovery.auditor` reads the metadata and the registry, and
writes the markers.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from bkeeper.autorecovery.expected import Stripe, missing_entries, stripes_of
from bkeeper.client.placement import Domains, quorum_racks_short
from bkeeper.meta.ledger_metadata import LedgerMetadata, LedgerState

__all__ = [
    "AuditReport",
    "FragmentCheck",
    "LossTracker",
    "bookies_holding_entries",
    "fragment_checks",
    "ledgers_to_mark",
    "placement_violations",
    "replica_shortfall",
    "ReplicaShortfall",
    "Tally",
    "checked_up_to",
]


@dataclass(frozen=True, slots=True)
class FragmentCheck:
    """Probe reads of one bookie in one segment: ``entry_ids`` (first and last it holds there,
    one id when they are the same) must be readable from ``bookie``."""

    ledger_id: int
    bookie: str
    segment_first: int
    entry_ids: tuple[int, ...]


@dataclass(frozen=True)
class AuditReport:
    """What one audit did.

    ``marked``: ledger id -> the bookies it was marked missing (sorted). ``failed``: ledger id
    -> why it could not be audited (its metadata unreadable, a probe that could not tell); it
    is audited again on the next run. ``lost``: the bookies the audit counted as lost.
    ``deferred``: auto-recovery is disabled, nothing was done. ``not_adhering`` (placement
    check): ledger id -> first entries of its segments that do not adhere to the placement.
    ``shortfalls`` (replicas check): ledger id -> what its replicas lack, for the ledgers
    whose replicas lack anything.
    """

    ledgers_audited: int = 0
    fragments_checked: int = 0
    marked: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    failed: Mapping[int, str] = field(default_factory=dict)
    lost: tuple[str, ...] = ()
    deferred: bool = False
    not_adhering: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    shortfalls: Mapping[int, ReplicaShortfall] = field(default_factory=dict)


@dataclass(frozen=True)
class ReplicaShortfall:
    """What the replicas of one ledger that answered lack (:func:`replica_shortfall`).

    ``lacking``: bookie -> how many entries it should store and does not (only bookies that
    lack some). ``below_write_quorum``, ``below_ack_quorum``, ``no_copy``: entries left with
    fewer copies than the write quorum, than the ack quorum, and with none, counting a
    replica that did not answer as holding its entries (so these are certain, never
    guesses).
    """

    lacking: Mapping[str, int]
    below_write_quorum: int
    below_ack_quorum: int
    no_copy: int

    def __bool__(self) -> bool:
        return bool(self.lacking)


@dataclass
class Tally:
    """What an audit pass gathers before it becomes an :class:`AuditReport`."""

    ledgers: int = 0
    fragments: int = 0
    marked: dict[int, tuple[str, ...]] = field(default_factory=dict)
    failed: dict[int, str] = field(default_factory=dict)
    lost: set[str] = field(default_factory=set)
    not_adhering: dict[int, tuple[int, ...]] = field(default_factory=dict)
    shortfalls: dict[int, ReplicaShortfall] = field(default_factory=dict)

    def report(self) -> AuditReport:
        return AuditReport(
            self.ledgers,
            self.fragments,
            dict(sorted(self.marked.items())),
            dict(sorted(self.failed.items())),
            tuple(sorted(self.lost)),
            not_adhering=dict(sorted(self.not_adhering.items())),
            shortfalls=dict(sorted(self.shortfalls.items())),
        )


def checked_up_to(meta: LedgerMetadata) -> int:
    """The last entry whose replicas can be judged from the metadata alone: a closed
    ledger's last entry; for a ledger not closed, the end of its segments before the last
    (complete: a segment ends where the next one starts), -1 when it has one segment."""
    if meta.state is LedgerState.CLOSED:
        return meta.last_entry_id
    return max(meta.segments) - 1


def replica_shortfall(
    meta: LedgerMetadata, last_entry_id: int, held: Mapping[str, Collection[int]]
) -> ReplicaShortfall:
    """What the replicas in ``held`` (bookie -> the entry ids it says it stores) lack of
    entries ``0..last_entry_id``; bookies absent from ``held`` did not answer."""
    lacks: dict[int, int] = {}
    lacking: dict[str, int] = {}
    for bookie, present in held.items():
        missing = missing_entries(meta, bookie, last_entry_id, present)
        if missing:
            lacking[bookie] = len(missing)
        for entry_id in missing:
            lacks[entry_id] = lacks.get(entry_id, 0) + 1
    below_ack = no_copy = 0
    for count in lacks.values():
        copies = meta.write_quorum - count
        below_ack += copies < meta.ack_quorum
        no_copy += copies <= 0
    return ReplicaShortfall(dict(sorted(lacking.items())), len(lacks), below_ack, no_copy)


def bookies_holding_entries(meta: LedgerMetadata, *, empty_segments: bool = False) -> set[str]:
    """The bookies that hold (or, for a ledger not closed, may hold) entries of the ledger.

    ``empty_segments``: count every ensemble member instead (a decommission wants no
    reference to the bookie left at all, not only no replica).
    """
    members = {str(b) for ensemble in meta.segments.values() for b in ensemble}
    if empty_segments or meta.state is not LedgerState.CLOSED:
        return members
    return {b for b in members if any(_held(s) for s in stripes_of(meta, b, meta.last_entry_id))}


def ledgers_to_mark(
    ledgers: Iterable[tuple[int, LedgerMetadata]],
    live: Collection[str],
    *,
    empty_segments: bool = False,
) -> dict[int, tuple[str, ...]]:
    """Ledger id -> its bookies that are not in ``live`` (sorted), for the ledgers that have
    any. ``live`` is writable and read-only bookies together."""
    alive = live if isinstance(live, set | frozenset) else set(live)
    marks: dict[int, tuple[str, ...]] = {}
    for ledger_id, meta in ledgers:
        lost = bookies_holding_entries(meta, empty_segments=empty_segments) - alive
        if lost:
            marks[ledger_id] = tuple(sorted(lost))
    return marks


def fragment_checks(
    ledger_id: int, meta: LedgerMetadata, *, last_entry_id: int | None = None
) -> list[FragmentCheck]:
    """The probe reads that show whether each replica holds its part of the ledger.

    A closed ledger is checked up to its last entry. A ledger not closed is checked up to
    ``last_entry_id`` when the caller knows a confirmed one (its LAC), else only its segments
    before the last (those are complete: a segment ends where the next one starts).
    Empty segments and bookies that hold no entry of a segment yield no check.
    """
    if meta.state is LedgerState.CLOSED:
        last = meta.last_entry_id
    else:  # segments before the last are complete whatever the LAC says
        floor = max(meta.segments) - 1
        last = floor if last_entry_id is None else max(last_entry_id, floor)
    checks = []
    for first, ensemble in meta.segments.items():
        for bookie in ensemble:
            for stripe in stripes_of(meta, str(bookie), last):
                if stripe.first != first:
                    continue
                probes = _probes(stripe)
                if probes:
                    checks.append(FragmentCheck(ledger_id, str(bookie), first, probes))
    return checks


def placement_violations(
    meta: LedgerMetadata, domains: Domains, racks_available: int
) -> tuple[int, ...]:
    """First entries of the segments with a write set on fewer distinct racks than
    ``min(min_racks_per_write_quorum, write quorum, racks_available)`` (Apache BookKeeper's
    placement check fails a ledger below ``minNumRacksPerWriteQuorum``; a cluster left with
    fewer racks than that cannot do better, so fewer are asked for), in entry order."""
    need = min(domains.need(meta.write_quorum), racks_available)
    return tuple(
        first
        for first, ensemble in meta.segments.items()
        if quorum_racks_short([str(b) for b in ensemble], meta.write_quorum, domains, need)
    )


def _first_held(stripe: Stripe) -> int | None:
    # Within any E consecutive entries the bookie holds Qw >= 1 of them.
    for entry_id in range(
        stripe.first, min(stripe.last, stripe.first + stripe.ensemble_size - 1) + 1
    ):
        if stripe.holds(entry_id):
            return entry_id
    return None


def _last_held(stripe: Stripe) -> int | None:
    low = max(stripe.first, stripe.last - stripe.ensemble_size + 1)
    for entry_id in range(stripe.last, low - 1, -1):
        if stripe.holds(entry_id):
            return entry_id
    return None


def _held(stripe: Stripe) -> bool:
    return _first_held(stripe) is not None


def _probes(stripe: Stripe) -> tuple[int, ...]:
    first, last = _first_held(stripe), _last_held(stripe)
    if first is None or last is None:
        return ()
    return (first,) if first == last else (first, last)


@dataclass
class LossTracker:
    """Which bookies are lost, since when (monotonic seconds), and which are due.

    :meth:`update` takes each new set of live bookies; a bookie that was live and is not any
    more is lost from then; one that comes back is forgotten (nothing to do). A bookie never
    seen live is not tracked here: the periodic bookie check finds its ledgers.
    """

    known: set[str] = field(default_factory=set)
    lost_since: dict[str, float] = field(default_factory=dict)

    def update(self, live: Collection[str], now: float) -> None:
        alive = set(live)
        for bookie in self.known - alive:
            self.lost_since.setdefault(bookie, now)
        for bookie in alive:
            self.lost_since.pop(bookie, None)
        self.known = alive | set(self.lost_since)

    def due(self, now: float, delay_s: float) -> list[str]:
        """The bookies lost for at least ``delay_s``, sorted."""
        return sorted(b for b, since in self.lost_since.items() if now - since >= delay_s)

    def next_due(self, delay_s: float) -> float | None:
        """When the next pending bookie becomes due (monotonic seconds); None if none pending."""
        if not self.lost_since:
            return None
        return min(self.lost_since.values()) + delay_s

    def handled(self, bookies: Iterable[str]) -> None:
        """The ledgers of ``bookies`` were marked: stop tracking them until seen live again."""
        for bookie in bookies:
            self.lost_since.pop(bookie, None)
            self.known.discard(bookie)
