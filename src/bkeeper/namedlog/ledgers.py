"""The ledgers of a named log as its writers make, discard and seal them.

:func:`create_ledger` makes a ledger as a log's configuration says; :func:`discard_ledger`
closes and deletes one that never made it into the list; :func:`seal_until_closed` seals a
ledger rolled away from, trying again while the metadata store is away (readers cannot pass a
ledger before it is sealed: its end is not known), pausing ``SEAL_PAUSE_FIRST_S`` doubling up
to ``SEAL_PAUSE_MAX_S``, until it is sealed or ``closing`` is set.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from bkeeper.client.bookkeeper import BookKeeper
from bkeeper.client.write_handle import WriteHandle
from bkeeper.common.errors import BKeeperError, LedgerFencedError
from bkeeper.common.tasks import within
from bkeeper.namedlog.core.config import LogConfig

__all__ = [
    "IDLE_LAC_INTERVAL_MS",
    "SEAL_PAUSE_FIRST_S",
    "SEAL_PAUSE_MAX_S",
    "create_ledger",
    "discard_ledger",
    "seal_until_closed",
]

log = logging.getLogger(__name__)

#: A log ledger's ``explicit_lac_interval_ms`` when neither its log's config nor its client's
#: sets one: tailers see a writer's last record within about this long of its ack.
IDLE_LAC_INTERVAL_MS = 10

#: The pause before sealing a rolled-away ledger is tried again after a failure (the metadata
#: store away), doubling up to ``SEAL_PAUSE_MAX_S``; it is tried until it is sealed or the
#: writer closes (a ledger left open behind the next one holds every reader at its end).
SEAL_PAUSE_FIRST_S = 0.1
SEAL_PAUSE_MAX_S = 5.0


async def create_ledger(bk: BookKeeper, config: LogConfig) -> WriteHandle:
    """A new ledger for a log, as ``config`` says."""
    interval = config.explicit_lac_interval_ms
    if interval is None:
        interval = bk.config.explicit_lac_interval_ms or IDLE_LAC_INTERVAL_MS
    return await bk.create_ledger(
        config.ensemble_size,
        config.write_quorum,
        config.ack_quorum,
        digest=config.digest,
        password=config.password,
        explicit_lac_interval_ms=interval,
    )


async def discard_ledger(bk: BookKeeper, handle: WriteHandle) -> None:
    """Close and delete a ledger that never made it into the list."""
    with contextlib.suppress(BKeeperError):
        await handle.close()
    with contextlib.suppress(BKeeperError):
        await bk.delete_ledger(handle.ledger_id)


async def seal_until_closed(handle: WriteHandle, closing: asyncio.Event, log_name: str) -> None:
    """Seal ``handle`` (see the module docstring); a recovering reader or writer sealing it
    first is as good."""
    pause = SEAL_PAUSE_FIRST_S
    while True:
        try:
            await handle.close()
            return
        except LedgerFencedError:
            return  # a recovering reader or writer sealed it
        except BKeeperError as exc:
            closed = closing.is_set()
            again = "" if closed else f"; trying again in {pause:g} s"
            log.warning("log %s: closing ledger %d: %s%s", log_name, handle.ledger_id, exc, again)
            if closed:
                return
        with contextlib.suppress(TimeoutError):
            await within(closing.wait(), pause)
        pause = min(pause * 2, SEAL_PAUSE_MAX_S)
