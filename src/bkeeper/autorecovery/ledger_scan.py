"""The auditor's walk over every ledger's metadata, a bounded number of reads at once."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from bkeeper.client.bookkeeper import BookKeeper
from bkeeper.common.errors import LedgerNotFoundError, ProtocolError
from bkeeper.meta.ledger_metadata import LedgerMetadata

__all__ = ["each_ledger"]


async def each_ledger(
    bk: BookKeeper,
    reads_in_flight_max: int,
    visit: Callable[[int, LedgerMetadata], Awaitable[None]],
    failed: dict[int, str] | None = None,
) -> None:
    """``visit`` each ledger's metadata, ``reads_in_flight_max`` at once. Unreadable metadata
    is recorded in ``failed`` (when given); a ledger deleted meanwhile is passed over; a
    metadata store failure ends the scan (raised)."""
    queue: asyncio.Queue[int | None] = asyncio.Queue(maxsize=reads_in_flight_max)

    async def produce() -> None:
        async for ledger_id in bk.list_ledgers():
            await queue.put(ledger_id)
        for _ in range(reads_in_flight_max):
            await queue.put(None)

    async def consume() -> None:
        while (ledger_id := await queue.get()) is not None:
            try:
                meta = await bk.ledger_metadata(ledger_id)
            except LedgerNotFoundError:
                continue
            except ProtocolError as exc:
                if failed is not None:
                    failed[ledger_id] = f"metadata unreadable: {exc}"
                continue
            await visit(ledger_id, meta)

    try:
        async with asyncio.TaskGroup() as group:
            group.create_task(produce())
            for _ in range(reads_in_flight_max):
                group.create_task(consume())
    except BaseExceptionGroup as errors:
        raise errors.exceptions[0] from None
