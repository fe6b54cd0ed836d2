"""Ensemble placement, as pure functions: random, or rack-aware with a rack mapping.

``choose_ensemble`` picks ``size`` distinct bookies among the candidates (writable bookies,
minus those excluded). ``replace_bookie`` picks one bookie to take the place of a failed one.
Rack-aware placement (a mapping bookie id -> rack, unknown bookies on ``/default-rack``)
builds the ensemble one position at a time, preferring a bookie whose rack is not yet used by
the other members of the write quorums that position belongs to; it falls back to any bookie
when racks run out, as BookKeeper does without ``enforceMinNumRacksPerWriteQuorum``.

Quarantine (Apache BookKeeper's ``bookieQuarantineTime``): a bookie that failed a writer of
this client is *quarantined* until a time (:class:`Quarantine`, client-wide, kept by the
client's context as BookKeeper keeps it in its bookie watcher). Both choices take the
quarantined bookies (bookie -> when its quarantine ends) and avoid them, but when the other
candidates are too few, quarantined bookies fill the missing places, those whose quarantine
ends first first: a registered, writable bookie is never refused for its past alone (BookKeeper
also falls back to quarantined bookies). ``exclude`` stays absolute: the bookies failing now.

:class:`SpareWarning` decides when a client warns that a new ensemble takes every writable
bookie (no spare: a lost bookie could not be replaced).
"""

from __future__ import annotations

import random
from collections.abc import Collection, Iterable, Mapping, Sequence

from bkeeper.common.errors import ConfigError, NotEnoughBookiesError

__all__ = ["DEFAULT_RACK", "Quarantine", "SpareWarning", "choose_ensemble", "replace_bookie"]

DEFAULT_RACK = "/default-rack"


def _rack(racks: Mapping[str, str] | None, bookie: str) -> str:
    return racks.get(bookie, DEFAULT_RACK) if racks else DEFAULT_RACK


def _quorum_neighbours(position: int, size: int, write_quorum: int) -> set[int]:
    """Positions that share a write quorum with ``position`` (ring of ``size``)."""
    return {
        (position + offset) % size
        for offset in range(-(write_quorum - 1), write_quorum)
        if offset and size > 1
    }


def _pick(
    candidates: list[str],
    taken: Sequence[str | None],
    position: int,
    write_quorum: int,
    racks: Mapping[str, str] | None,
    rng: random.Random,
) -> str:
    if racks:
        neighbours = (taken[n] for n in _quorum_neighbours(position, len(taken), write_quorum))
        used = {_rack(racks, b) for b in neighbours if b is not None}
        fresh = [b for b in candidates if _rack(racks, b) not in used]
        if fresh:
            return rng.choice(fresh)
    return rng.choice(candidates)


def choose_ensemble(
    candidates: Collection[str],
    size: int,
    write_quorum: int,
    *,
    exclude: Collection[str] = (),
    quarantined: Mapping[str, float] | None = None,
    racks: Mapping[str, str] | None = None,
    rng: random.Random | None = None,
) -> tuple[str, ...]:
    """``size`` distinct bookies for a new ensemble, ``quarantined`` ones only to make up the
    number (module doc); :class:`NotEnoughBookiesError`."""
    rng = rng or random.Random()
    pool = sorted(set(candidates) - set(exclude))
    if len(pool) < size:
        raise NotEnoughBookiesError(
            f"need {size} bookies, {len(pool)} available: {', '.join(pool) or 'none'}"
        )
    pool = _prefer_healthy(pool, size, quarantined)
    taken: list[str | None] = [None] * size
    for position in range(size):
        chosen = _pick(pool, taken, position, write_quorum, racks, rng)
        taken[position] = chosen
        pool.remove(chosen)
    return tuple(b for b in taken if b is not None)


def replace_bookie(
    ensemble: Sequence[str],
    position: int,
    candidates: Collection[str],
    write_quorum: int,
    *,
    exclude: Collection[str] = (),
    quarantined: Mapping[str, float] | None = None,
    racks: Mapping[str, str] | None = None,
    rng: random.Random | None = None,
) -> str:
    """A bookie to take ``ensemble[position]``'s place; never one already in the ensemble nor
    in ``exclude``; a ``quarantined`` one only when no other is left (module doc)."""
    rng = rng or random.Random()
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
    taken: list[str | None] = list(ensemble)
    taken[position] = None
    return _pick(_prefer_healthy(pool, 1, quarantined), taken, position, write_quorum, racks, rng)


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
