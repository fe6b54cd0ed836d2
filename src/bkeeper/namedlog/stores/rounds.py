"""Compare-and-set rounds with an outcome of their own when every round is lost.

:func:`cas_update_or` is :func:`bkeeper.common.cas.cas_update` (the one retry loop) for the
updates of a named log that end in their own way once ``attempts_max`` rounds were all lost to
other writers: a flush refused as busy, a claim given up until the next look. Any other error
(a failed read, a missing node) ends the update as it would without it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from bkeeper.common.cas import cas_update
from bkeeper.common.errors import MetadataError, MetadataVersionError

__all__ = ["cas_update_or"]

S = TypeVar("S")
R = TypeVar("R")


async def cas_update_or(
    read: Callable[[], Awaitable[S]],
    attempt: Callable[[S], Awaitable[R]],
    *,
    lost_every_round: Callable[[], R],
    what: str,
    attempts_max: int,
    current: S | None = None,
) -> R:
    """``cas_update(read, attempt, ...)``; when its ``attempts_max`` rounds all lost a
    compare-and-set, ``lost_every_round()`` (which returns the result or raises)."""
    lost = 0

    async def counted(snapshot: S) -> R:
        nonlocal lost
        try:
            return await attempt(snapshot)
        except MetadataVersionError:
            lost += 1
            raise

    try:
        return await cas_update(
            read, counted, what=what, attempts_max=attempts_max, current=current
        )
    except MetadataError:
        if lost < attempts_max:
            raise
        return lost_every_round()
