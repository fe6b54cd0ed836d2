"""Which entries of a ledger a bookie should hold, from its metadata (pure).

A ledger's segments map a first entry id to an ensemble; segment ``k`` holds entries
``first_k .. first_{k+1} - 1`` (the last one up to the ledger's last entry). Within a segment
with ensemble size ``E`` and write quorum ``Qw``, entry ``e`` goes to the ensemble indexes
``(e + i) mod E`` for ``i < Qw`` (:func:`bkeeper.client.distribution.write_set`), so the
bookie at index ``b`` holds ``e`` exactly when ``(b - e) mod E < Qw``. A bookie may sit in
several segments, or in none; empty segments (first id past the last entry) hold nothing.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass

from bkeeper.meta.ledger_metadata import LedgerMetadata

__all__ = ["Stripe", "expected_entries", "missing_entries", "stripes_of"]


@dataclass(frozen=True, slots=True)
class Stripe:
    """Entries ``first..last`` of one segment, of which the bookie at ensemble index
    ``index`` holds those its write sets give it."""

    first: int
    last: int
    index: int
    ensemble_size: int
    write_quorum: int

    def holds(self, entry_id: int) -> bool:
        return (
            self.first <= entry_id <= self.last
            and (self.index - entry_id) % self.ensemble_size < self.write_quorum
        )

    def entry_ids(self) -> Iterator[int]:
        """The entries the bookie holds in this stripe, ascending."""
        if self.write_quorum >= self.ensemble_size:
            yield from range(self.first, self.last + 1)
            return
        for entry_id in range(self.first, self.last + 1):
            if (self.index - entry_id) % self.ensemble_size < self.write_quorum:
                yield entry_id


def stripes_of(meta: LedgerMetadata, bookie_id: str, last_entry_id: int) -> list[Stripe]:
    """The stripes of the segments that have ``bookie_id`` in their ensemble, up to
    ``last_entry_id`` (a closed ledger's last entry), in entry order."""
    starts = list(meta.segments)
    stripes = []
    for position, first in enumerate(starts):
        following = starts[position + 1] - 1 if position + 1 < len(starts) else last_entry_id
        last = min(following, last_entry_id)
        ensemble = meta.segments[first]
        if first > last or bookie_id not in ensemble:
            continue
        index = [str(member) for member in ensemble].index(bookie_id)
        stripes.append(Stripe(first, last, index, meta.ensemble_size, meta.write_quorum))
    return stripes


def expected_entries(meta: LedgerMetadata, bookie_id: str, last_entry_id: int) -> Iterator[int]:
    """Every entry ``bookie_id`` should hold, ascending."""
    for stripe in stripes_of(meta, bookie_id, last_entry_id):
        yield from stripe.entry_ids()


def missing_entries(
    meta: LedgerMetadata, bookie_id: str, last_entry_id: int, present: Collection[int]
) -> list[int]:
    """The entries ``bookie_id`` should hold but are not in ``present``, ascending."""
    have = present if isinstance(present, set | frozenset) else set(present)
    return [e for e in expected_entries(meta, bookie_id, last_entry_id) if e not in have]
