"""Ensemble placement, as pure functions: random, rack-aware or region-aware.

``choose_ensemble`` picks ``size`` distinct bookies among the candidates (writable bookies,
minus those excluded). ``replace_bookie`` picks one bookie to take the place of a failed one.

Failure domains (:class:`Domains`): a bookie's network location is ``/rack`` or
``/region/rack`` (:mod:`bkeeper.meta.racks`); a bookie without one is on
:data:`DEFAULT_RACK` (in :data:`DEFAULT_REGION`). Rack-aware placement builds the ensemble
one position at a time, preferring a bookie whose rack is not used yet by the other members
of the write quorums that position belongs to; region-aware placement prefers first a region
not used there, then a rack. Every write quorum should span ``min_racks`` racks (Apache
BookKeeper's ``minNumRacksPerWriteQuorum``, 2; or the write quorum when smaller). Without
``enforce`` that is best effort: when racks run out the choice falls back to any bookie, as
BookKeeper does without ``enforceMinNumRacksPerWriteQuorum``, and an ensemble falling short is
tried again at most :data:`PLACEMENT_ATTEMPTS_MAX` times for one that does not. With
``enforce``, an ensemble or a replacement that cannot meet it is refused
(``NotEnoughBookiesError`` naming the racks there are).

Quarantine (Apache BookKeeper's ``bookieQuarantineTime``): a bookie that failed a writer of
this client is *quarantined* until a time (:class:`Quarantine`, client-wide, kept by the
client's context as BookKeeper keeps it in its bookie watcher). Both choices take the
quarantined bookies (bookie -> when its quarantine ends) and avoid them, but when the other
candidates are too few, quarantined bookies fill the missing places, those whose quarantine
ends first first: a registered, writable bookie is never refused for its past alone (BookKeeper
also falls back to quarantined bookies). ``exclude`` stays absolute: the bookies failing now.

:func:`quorum_racks_short` is the check itself (the auditor's placement check uses it), and
:func:`placement_moves` the bookies to move so that a segment meets it (placement repair).

:class:`SpareWarning` decides when a client warns that a new ensemble takes every writable
bookie (no spare: a lost bookie could not be replaced).
"""

from __future__ import annotations

import random
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from bkeeper.common.errors import ConfigError, NotEnoughBookiesError
from bkeeper.common.rand import new_rng

__all__ = [
    "DEFAULT_RACK",
    "DEFAULT_REGION",
    "PLACEMENTS",
    "PLACEMENT_ATTEMPTS_MAX",
    "Domains",
    "Quarantine",
    "SpareWarning",
    "choose_ensemble",
    "placement_moves",
    "quorum_racks_short",
    "replace_bookie",
    "write_quorums",
]

DEFAULT_RACK = "/default-rack"
DEFAULT_REGION = "/default-region"
#: The placement policies a client may choose.
PLACEMENTS = ("random", "rackaware", "regionaware")
#: Ensembles built before a best-effort choice settles for one short of ``min_racks``.
PLACEMENT_ATTEMPTS_MAX = 16


@dataclass(frozen=True)
class Domains:
    """Where bookies are, and what a write quorum must span.

    ``locations``: bookie id -> ``/rack`` or ``/region/rack`` (others: :data:`DEFAULT_RACK`).
    ``regions``: prefer distinct regions before distinct racks (region-aware placement).
    ``min_racks``: racks every write quorum should span (capped by its size);
    ``enforce``: refuse what cannot (module doc)."""

    locations: Mapping[str, str] = field(default_factory=dict)
    regions: bool = False
    min_racks: int = 2
    enforce: bool = False

    def __post_init__(self) -> None:
        if self.min_racks < 1:
            raise ConfigError(f"min_racks_per_write_quorum: {self.min_racks} is below 1")

    def rack(self, bookie: str) -> str:
        return self.locations.get(bookie, DEFAULT_RACK)

    def region(self, bookie: str) -> str:
        location = self.locations.get(bookie)
        if location is None or location.count("/") < 2:
            return DEFAULT_REGION
        return location[: location.index("/", 1)]

    def need(self, write_quorum: int) -> int:
        """Racks a write quorum of this size must span."""
        return min(self.min_racks, write_quorum)


def write_quorums(size: int, write_quorum: int) -> list[tuple[int, ...]]:
    """The positions of each distinct write quorum of an ensemble (round-robin striping)."""
    if write_quorum >= size:
        return [tuple(range(size))]
    return [tuple((start + k) % size for k in range(write_quorum)) for start in range(size)]


def quorum_racks_short(
    ensemble: Sequence[str], write_quorum: int, domains: Domains, need: int | None = None
) -> list[tuple[int, ...]]:
    """The write quorums (positions) of ``ensemble`` spanning fewer than ``need`` racks
    (default ``domains.need(write_quorum)``)."""
    need = domains.need(write_quorum) if need is None else need
    return [
        quorum
        for quorum in write_quorums(len(ensemble), write_quorum)
        if len({domains.rack(ensemble[p]) for p in quorum}) < need
    ]


def _quorum_neighbours(position: int, size: int, write_quorum: int) -> set[int]:
    """Positions that share a write quorum with ``position`` (ring of ``size``)."""
    return {
        (position + offset) % size
        for offset in range(-(write_quorum - 1), write_quorum)
        if offset and size > 1
    }


def _best(
    candidates: list[str],
    taken: Sequence[str | None],
    position: int,
    write_quorum: int,
    domains: Domains,
) -> list[str]:
    """The candidates for ``position`` in the best failure domains: a region (region-aware)
    then a rack that no other member of its write quorums uses yet."""
    neighbours = [
        b
        for n in _quorum_neighbours(position, len(taken), write_quorum)
        if (b := taken[n]) is not None
    ]
    racks = {domains.rack(b) for b in neighbours}
    regions = {domains.region(b) for b in neighbours} if domains.regions else set()

    def score(bookie: str) -> tuple[bool, bool]:
        return (domains.region(bookie) not in regions, domains.rack(bookie) not in racks)

    top = max(score(b) for b in candidates)
    return [b for b in candidates if score(b) == top]


def _racks_named(domains: Domains, bookies: Iterable[str]) -> str:
    racks = sorted({domains.rack(b) for b in bookies})
    return f"{len(racks)} rack{'s' if len(racks) != 1 else ''} ({', '.join(racks) or 'none'})"


def choose_ensemble(
    candidates: Collection[str],
    size: int,
    write_quorum: int,
    *,
    exclude: Collection[str] = (),
    quarantined: Mapping[str, float] | None = None,
    racks: Mapping[str, str] | None = None,
    domains: Domains | None = None,
    rng: random.Random | None = None,
) -> tuple[str, ...]:
    """``size`` distinct bookies for a new ensemble, ``quarantined`` ones only to make up the
    number (module doc); :class:`NotEnoughBookiesError`. ``domains`` (or just ``racks``, a
    location mapping): rack- or region-aware; neither: random."""
    rng = rng or new_rng()
    if domains is None and racks:
        domains = Domains(racks)
    pool = sorted(set(candidates) - set(exclude))
    if len(pool) < size:
        raise NotEnoughBookiesError(
            f"need {size} bookies, {len(pool)} available: {', '.join(pool) or 'none'}"
        )
    pool = _prefer_healthy(pool, size, quarantined)
    if domains is None:
        return tuple(rng.sample(pool, size))
    best: tuple[str, ...] = ()
    best_short = -1
    for _attempt in range(PLACEMENT_ATTEMPTS_MAX):
        left = list(pool)
        taken: list[str | None] = [None] * size
        for position in range(size):
            chosen = rng.choice(_best(left, taken, position, write_quorum, domains))
            taken[position] = chosen
            left.remove(chosen)
        ensemble = tuple(b for b in taken if b is not None)
        short = len(quorum_racks_short(ensemble, write_quorum, domains))
        if short == 0:
            return ensemble
        if best_short < 0 or short < best_short:
            best, best_short = ensemble, short
    if domains.enforce:
        raise NotEnoughBookiesError(
            f"no ensemble of {size} with every write quorum of {write_quorum} on "
            f"{domains.need(write_quorum)} racks: the candidates span "
            f"{_racks_named(domains, pool)} (min_racks_per_write_quorum, enforced)"
        )
    return best


def replace_bookie(
    ensemble: Sequence[str],
    position: int,
    candidates: Collection[str],
    write_quorum: int,
    *,
    exclude: Collection[str] = (),
    quarantined: Mapping[str, float] | None = None,
    racks: Mapping[str, str] | None = None,
    domains: Domains | None = None,
    rng: random.Random | None = None,
) -> str:
    """A bookie to take ``ensemble[position]``'s place; never one already in the ensemble nor
    in ``exclude``; a ``quarantined`` one only when no other is left (module doc)."""
    rng = rng or new_rng()
    if domains is None and racks:
        domains = Domains(racks)
    pool = sorted(set(candidates) - set(exclude) - set(ensemble))
    if not pool:
        registered = set(candidates)
        in_ensemble = len(registered & set(ensemble))
        failed = len(registered & set(exclude))
        raise NotEnoughBookiesError(
            f"no bookie can replace {ensemble[position]}: {_bookies(len(registered))} "
            f"registered as writable, {in_ensemble} of them in the ensemble already and "
            f"{failed} failed to answer this writer"
        )
    pool = _prefer_healthy(pool, 1, quarantined)
    if domains is None:
        return rng.choice(pool)
    taken: list[str | None] = list(ensemble)
    taken[position] = None
    if domains.enforce:
        pool = _meeting(pool, ensemble, position, write_quorum, domains)
        if not pool:
            others = [b for i, b in enumerate(ensemble) if i != position]
            raise NotEnoughBookiesError(
                f"no bookie can replace {ensemble[position]} with every write quorum of "
                f"{write_quorum} on {domains.need(write_quorum)} racks: the other members "
                f"are on {_racks_named(domains, others)} and the candidates on "
                f"{_racks_named(domains, set(candidates) - set(exclude) - set(ensemble))} "
                "(min_racks_per_write_quorum, enforced)"
            )
    return rng.choice(_best(pool, taken, position, write_quorum, domains))


def _meeting(
    pool: list[str], ensemble: Sequence[str], position: int, write_quorum: int, domains: Domains
) -> list[str]:
    """Those of ``pool`` that, at ``position``, leave every write quorum holding the position
    on enough racks."""
    need = domains.need(write_quorum)
    quorums = [q for q in write_quorums(len(ensemble), write_quorum) if position in q]

    def meets(bookie: str) -> bool:
        return all(
            len({domains.rack(bookie if p == position else ensemble[p]) for p in q}) >= need
            for q in quorums
        )

    return [b for b in pool if meets(b)]


def placement_moves(
    ensemble: Sequence[str],
    write_quorum: int,
    domains: Domains,
    candidates: Collection[str],
    need: int | None = None,
) -> tuple[str, ...]:
    """Members of ``ensemble`` to move (placement repair) so that every write quorum spans
    ``need`` racks (default ``domains.need(write_quorum)``), each to one of ``candidates``
    (writable bookies outside the ensemble); only moves that such a candidate can make: a
    shortfall no candidate can mend names no bookie. Greedy: in each short write quorum, a
    member whose rack is there twice (the one on the most crowded rack of the ensemble)."""
    need = domains.need(write_quorum) if need is None else need
    current = list(ensemble)
    spare = sorted(set(candidates) - set(ensemble))
    moved: list[str] = []
    strict = Domains(domains.locations, domains.regions, need, enforce=True)
    for quorum in write_quorums(len(current), write_quorum):
        while len({domains.rack(current[p]) for p in quorum}) < need:
            crowd = {
                r: sum(domains.rack(b) == r for b in current) for r in map(domains.rack, current)
            }
            seen: dict[str, int] = {}
            for p in quorum:
                seen[domains.rack(current[p])] = seen.get(domains.rack(current[p]), 0) + 1
            twice = [p for p in quorum if seen[domains.rack(current[p])] > 1]
            twice.sort(key=lambda p: (-crowd[domains.rack(current[p])], current[p]))
            fixed = False
            for position in twice:
                usable = _meeting(spare, current, position, write_quorum, strict)
                if usable:
                    target = usable[0]
                    moved.append(current[position])
                    spare.remove(target)
                    current[position] = target
                    fixed = True
                    break
            if not fixed:
                break
    return tuple(dict.fromkeys(moved))


def _prefer_healthy(
    pool: list[str], needed: int, quarantined: Mapping[str, float] | None
) -> list[str]:
    """``pool`` without its quarantined bookies if ``needed`` remain; else with just enough
    of them, those whose quarantine ends first (then by id: the choice is reproducible)."""
    if not quarantined:
        return pool
    healthy = [b for b in pool if b not in quarantined]
    missing = needed - len(healthy)
    if missing <= 0:
        return healthy
    held = sorted((b for b in pool if b in quarantined), key=lambda b: (quarantined[b], b))
    return sorted(healthy + held[:missing])


class Quarantine:
    """Bookies that failed a writer of this client, each until a time (monotonic seconds).

    Pure: the caller gives the time. A bookie quarantined again has its time extended. An
    entry is dropped once its time has passed, so it holds at most the bookies that failed
    within the last ``duration_s`` (bookies of ensembles, a cluster's worth at most).
    ``duration_s`` 0 quarantines nothing."""

    def __init__(self, duration_s: float) -> None:
        if duration_s < 0:
            raise ConfigError(f"bookie quarantine time: {duration_s} s is negative")
        self.duration_s = duration_s
        self._until: dict[str, float] = {}

    def add(self, bookies: Iterable[str], now: float) -> None:
        """Quarantine ``bookies`` from ``now`` for ``duration_s``."""
        self._expire(now)
        if self.duration_s > 0:
            for bookie in bookies:
                self._until[bookie] = now + self.duration_s

    def current(self, now: float) -> dict[str, float]:
        """The bookies quarantined at ``now``, each with when its quarantine ends."""
        self._expire(now)
        return dict(self._until)

    def _expire(self, now: float) -> None:
        for bookie in [b for b, until in self._until.items() if until <= now]:
            del self._until[bookie]


class SpareWarning:
    """When a client warns that a new ensemble takes every writable bookie.

    Once per ensemble size while the cluster has no spare for it: again only after a create
    of that size found a spare (more writable bookies than the ensemble) and a later one
    found none. Holds one entry per ensemble size warned about."""

    def __init__(self) -> None:
        self._warned: set[int] = set()

    def check(self, writable: int, ensemble_size: int) -> bool:
        """A ledger of ``ensemble_size`` is created with ``writable`` bookies registered
        writable: True if the warning is to be logged now."""
        if writable > ensemble_size:
            self._warned.discard(ensemble_size)
            return False
        if writable < ensemble_size or ensemble_size in self._warned:
            return False  # fewer: the create fails, and says so
        self._warned.add(ensemble_size)
        return True


def _bookies(count: int) -> str:
    return f"{count} bookie" if count == 1 else f"{count} bookies"
