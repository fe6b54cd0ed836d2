"""Copying entries of a ledger from the replicas that have them to a sink (reusable).

:func:`copy_entries` reads the given entries with the client (every read goes to the
entry's replicas in turn; one that lacks the entry, or answers "unknown" from limbo, is
passed over) and hands them, re-encoded as the bodies bookies store, to a *sink* a batch at
a time. The integrity check's sink writes them into the local storage as recovery adds;
the replication worker of auto-recovery will send them to a new bookie instead.

Limits: consecutive ids are read as one range (batch reads where the ledger allows them);
``ranges_in_flight_max`` workers each read one range at a time, and a range hands its
entries to the sink one read batch at a time, waiting for the sink before reading on, so at
most ``ranges_in_flight_max`` batches are held in memory.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence

from bkeeper.client.read_handle import ReadHandle
from bkeeper.common.errors import ConfigError
from bkeeper.wire.digest import DigestManager

__all__ = ["EntrySink", "consecutive_ranges", "copy_entries"]

#: Takes ``[(entry id, entry body), ...]`` (ascending ids) and returns once they are stored.
EntrySink = Callable[[list[tuple[int, bytes]]], Awaitable[None]]


def consecutive_ranges(entry_ids: Sequence[int]) -> list[tuple[int, int]]:
    """``(first, last)`` of each run of consecutive ids in ascending ``entry_ids``."""
    ranges: list[tuple[int, int]] = []
    for entry_id in entry_ids:
        if ranges and entry_id == ranges[-1][1] + 1:
            ranges[-1] = (ranges[-1][0], entry_id)
        else:
            ranges.append((entry_id, entry_id))
    return ranges


async def copy_entries(
    handle: ReadHandle,
    password: bytes,
    entry_ids: Sequence[int],
    sink: EntrySink,
    ranges_in_flight_max: int = 4,
) -> int:
    """Read ``entry_ids`` (ascending) of ``handle``'s ledger and give them to ``sink``;
    returns how many were copied. A read that no replica can serve raises (the ledger's
    errors: ``BookieUnavailableError``, ``NoSuchEntryError``...), after the sink got the
    entries before it in that range."""
    if ranges_in_flight_max < 1:
        raise ConfigError(f"ranges_in_flight_max: {ranges_in_flight_max} is not positive")
    meta = handle.metadata
    digest = DigestManager(handle.ledger_id, meta.digest_type, password)
    ranges = consecutive_ranges(entry_ids)
    pending = iter(ranges)  # shared by the workers: each takes the next range when free
    copied = [0]

    async def worker() -> None:
        for first, last in pending:
            batches = handle.read_batches(first, last, unconfirmed=True)
            async with contextlib.aclosing(batches):
                async for batch in batches:
                    bodies = [
                        (e.entry_id, digest.encode_entry(e.entry_id, e.lac, e.length, e.payload))
                        for e in batch
                    ]
                    await sink(bodies)
                    copied[0] += len(bodies)

    try:
        async with asyncio.TaskGroup() as group:
            for _ in range(min(ranges_in_flight_max, len(ranges))):
                group.create_task(worker())
    except BaseExceptionGroup as failed:
        # The first failure stopped the copy (the other workers were cancelled): raise it.
        raise failed.exceptions[0] from None
    return copied[0]
