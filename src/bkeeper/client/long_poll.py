"""One long poll of a ledger's last segment: every bookie asked for a LAC past ``previous``
(with the next entry piggybacked), until one answers with it, the time is up, or the ledger's
metadata moves on; :meth:`~bkeeper.client.read_handle.ReadHandle.wait_last_add_confirmed`
polls again as the outcome says.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Sequence
from typing import Any

from bkeeper.client.context import ClientContext
from bkeeper.common.tasks import abandon
from bkeeper.wire.codes import Protocol, StatusCode
from bkeeper.wire.messages import ReadRequest, ReadResponse

__all__ = ["Poll", "poll_once"]


class Poll(enum.Enum):
    """How one long poll of a segment's bookies ended."""

    ANSWERED = "a bookie's LAC passed the one asked about"
    TIMED_OUT = "bookies held the poll, none came with a newer LAC, or the time ran out"
    FAILED = "no bookie answered, or each answered an error at once"
    MOVED_ON = "the metadata changed meanwhile"


async def poll_once(
    ctx: ClientContext,
    ledger_id: int,
    bookies: Sequence[str],
    previous: int,
    deadline: float,
    changed: asyncio.Event,
) -> tuple[Poll, ReadResponse | None]:
    """One long poll of ``bookies``, until ``deadline`` (the bookies are given that long, and
    one second more to answer) or until ``changed`` is set; with ANSWERED, the answer whose
    LAC passed ``previous`` (its body: entry ``previous + 1``, if piggybacked)."""
    clock = ctx.clock
    remaining_ms = max(1, int((deadline - clock.monotonic()) * 1000))
    request = ReadRequest(
        ledger_id,
        -1,  # with piggyback the entry is previous + 1; Apache BookKeeper wants -1 here
        previous_lac=previous,
        timeout_ms=remaining_ms,
        piggyback=True,  # the entry with the LAC: a tailing reader's next read is free
    )
    tasks = [asyncio.ensure_future(ctx.pool.send(b, request, Protocol.V3)) for b in bookies]
    moved = asyncio.ensure_future(changed.wait())
    try:
        pending: set[asyncio.Future[Any]] = {*tasks, moved}
        answered = False
        while pending - {moved}:  # a bookie has not answered yet
            remaining = deadline + 1.0 - clock.monotonic()
            if remaining <= 0:
                return Poll.TIMED_OUT, None
            done, pending = await asyncio.wait(
                pending, timeout=remaining, return_when=asyncio.FIRST_COMPLETED
            )
            if moved in done:
                return Poll.MOVED_ON, None
            for task in tasks:  # in the bookies' order (``done`` is a set)
                if task not in done or task.exception() is not None:
                    continue
                response = task.result()
                # Only a bookie that held the poll answers EOK without a newer LAC; one
                # answering an error at once (it holds no entry of a new, empty ledger
                # yet: no such ledger) counts as not answering, so the caller waits out
                # its time rather than polling again at once (a spin).
                if response.status is StatusCode.EOK:
                    answered = True
                    lac = response.max_lac
                    if lac is not None and lac > previous:
                        return Poll.ANSWERED, response
        return (Poll.TIMED_OUT if answered else Poll.FAILED), None
    finally:
        abandon((*tasks, moved))
