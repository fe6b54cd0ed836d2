"""Round-robin striping and quorum arithmetic, as pure functions.

Entry ``e`` of a segment with ensemble size ``E`` and write quorum ``Qw`` goes to the ensemble
indexes ``(e + i) mod E`` for ``i`` in ``0..Qw-1``. An add completes once ``Qa`` bookies of its
write set acknowledged it. Recovery decisions ("fenced", "entry absent") need
``Qw - Qa + 1`` answers from every write set: no ack quorum can then exist without one of the
answering bookies.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "covers_every_write_set",
    "recovery_quorum",
    "write_set",
    "write_sets",
]


def write_set(entry_id: int, ensemble_size: int, write_quorum: int) -> tuple[int, ...]:
    """Ensemble indexes that store ``entry_id``, in the order the entry is sent."""
    first = entry_id % ensemble_size
    return tuple((first + i) % ensemble_size for i in range(write_quorum))


def write_sets(ensemble_size: int, write_quorum: int) -> list[tuple[int, ...]]:
    """The ``E`` distinct write sets of a segment (one when ``Qw == E``)."""
    if write_quorum == ensemble_size:
        return [tuple(range(ensemble_size))]
    return [write_set(i, ensemble_size, write_quorum) for i in range(ensemble_size)]


def recovery_quorum(write_quorum: int, ack_quorum: int) -> int:
    """Answers needed per write set to rule out an ack quorum elsewhere: ``Qw - Qa + 1``."""
    return write_quorum - ack_quorum + 1


def covers_every_write_set(
    answered: Iterable[int], ensemble_size: int, write_quorum: int, ack_quorum: int
) -> bool:
    """Whether the ensemble indexes in ``answered`` give quorum coverage."""
    have = set(answered)
    need = recovery_quorum(write_quorum, ack_quorum)
    return all(
        sum(1 for index in ws if index in have) >= need
        for ws in write_sets(ensemble_size, write_quorum)
    )
