"""Compare-and-set with retry: the one loop every metadata update goes through.

Metadata (ledgers, logs) is only ever changed by compare-and-set on a version. An update reads
the current value, decides from it, and writes it back at the version it read; when another
client wrote in between, the write fails with :class:`MetadataVersionError`, the value is read
again and the decision is taken again from the new value. :func:`cas_update` owns that loop
and its bound (``attempts_max``); callers supply only the read and the decision.

``attempt`` is where the decision lives: it gets the current snapshot and either returns a
result (having written, or having decided that nothing needs writing) or raises. Raising
:class:`MetadataVersionError` asks for another round with a fresh read; any other exception
ends the update.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from bkeeper.common.errors import MetadataError, MetadataVersionError

__all__ = ["CAS_ATTEMPTS_MAX", "cas_update"]

S = TypeVar("S")
R = TypeVar("R")

#: Default bound of compare-and-set rounds before an update gives up.
CAS_ATTEMPTS_MAX = 10


async def cas_update(
    read: Callable[[], Awaitable[S]],
    attempt: Callable[[S], Awaitable[R]],
    *,
    what: str,
    attempts_max: int = CAS_ATTEMPTS_MAX,
    current: S | None = None,
    on_exhausted: Callable[[], R] | None = None,
) -> R:
    """Run ``attempt`` on a snapshot until it stops losing compare-and-set races.

    ``current`` is a snapshot the caller holds already (skips the first read). ``what`` names
    the update in the error raised when ``attempts_max`` rounds all lost:
    ``"<what>: its metadata kept changing (<n> compare-and-set attempts)"``; with
    ``on_exhausted``, its outcome instead (it returns the result or raises), for updates that
    end in their own way then (a flush refused as busy, a claim given up until the next look).
    Only lost rounds lead there: a failed read ends the update with its own error.
    """
    if attempts_max < 1:
        raise ValueError(f"attempts_max must be at least 1, not {attempts_max}")
    snapshot = await read() if current is None else current
    for round_ in range(attempts_max):
        try:
            return await attempt(snapshot)
        except MetadataVersionError:
            if round_ + 1 == attempts_max:
                break
            snapshot = await read()
    if on_exhausted is not None:
        return on_exhausted()
    raise MetadataError(
        f"{what}: its metadata kept changing ({attempts_max} compare-and-set attempts)"
    )
