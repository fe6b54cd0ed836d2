"""Ensemble placement, as pure functions: random, or rack-aware with a rack mapping.

``choose_ensemble`` picks ``size`` distinct bookies among the candidates (writable bookies,
minus those excluded). ``replace_bookie`` picks one bookie to take the place of a failed one.
Rack-aware placement (a mapping bookie id -> rack, unknown bookies on ``/default-rack``)
builds the ensemble one position at a time, preferring a bookie whose rack is not yet used by
the other members of the write quorums that position belongs to; it falls back to any bookie
when racks run out, as BookKeeper does without ``enforceMinNumRacksPerWriteQuorum``.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Mapping, Sequence

from bkeeper.common.errors import NotEnoughBookiesError

__all__ = ["DEFAULT_RACK", "choose_ensemble", "replace_bookie"]

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
    racks: Mapping[str, str] | None = None,
    rng: random.Random | None = None,
) -> tuple[str, ...]:
    """``size`` distinct bookies for a new ensemble; :class:`NotEnoughBookiesError`."""
    rng = rng or random.Random()
    pool = sorted(set(candidates) - set(exclude))
    if len(pool) < size:
        raise NotEnoughBookiesError(
            f"need {size} bookies, {len(pool)} available: {', '.join(pool) or 'none'}"
        )
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
    racks: Mapping[str, str] | None = None,
    rng: random.Random | None = None,
) -> str:
    """A bookie to take ``ensemble[position]``'s place; never one already in the ensemble."""
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
    return _pick(pool, taken, position, write_quorum, racks, rng)


def _bookies(count: int) -> str:
    return f"{count} bookie" if count == 1 else f"{count} bookies"
