"""A subscription's acks in a ledger of its own (``ack_store="ledger"``), as Pulsar's managed
cursor keeps them: for consumers that flush often or hold many runs acknowledged out of order,
each flush is one entry appended to the cursor ledger (the whole state, JSON) instead of a
compare-and-set of the subscription's node in the metadata store. The node keeps the cursor
ledger's id (``"cursor"``); the newest state is the ledger's last entry.

* :func:`load`: a consumer taking the subscription over opens the previous cursor ledger with
  recovery (fencing its writer: the consumer that held it has its next flush refused) and
  reads its last entry;
* :func:`peek`: anyone else (the subscriptions listing, retention) reads the last confirmed
  entry without fencing (one flush behind at most: retention keeps more, never less);
* :class:`CursorLedger`: the current consumer's ledger; it is created when the consumer takes
  over, and deleted when it closes (the node then holds the state again) or when the next
  consumer has copied its state.
"""

from __future__ import annotations

import contextlib

from bkeeper.client.bookkeeper import BookKeeper
from bkeeper.client.write_handle import WriteHandle
from bkeeper.common.errors import (
    BKeeperError,
    LedgerDeletedError,
    LedgerFencedError,
    LedgerNotFoundError,
)
from bkeeper.namedlog.core.config import LogConfig
from bkeeper.namedlog.core.subscription_state import SubscriptionState

__all__ = ["CursorLedger", "drop_cursor", "load", "peek"]


async def load(bk: BookKeeper, ledger_id: int, config: LogConfig) -> SubscriptionState | None:
    """The state in cursor ledger ``ledger_id``, fencing its writer (None: gone or empty)."""
    try:
        handle = await bk.open_ledger(ledger_id, config.password, recovery=True)
    except LedgerNotFoundError:
        return None
    try:
        last = handle.metadata.last_entry_id
        if last < 0:
            return None
        entry = await handle.read_entry(last)
        return SubscriptionState.decode(bytes(entry.payload), f"cursor ledger {ledger_id}")
    finally:
        await handle.close()


async def peek(bk: BookKeeper, ledger_id: int, config: LogConfig) -> SubscriptionState | None:
    """The last confirmed state in cursor ledger ``ledger_id``, without fencing it."""
    try:
        handle = await bk.open_ledger(ledger_id, config.password, recovery=False)
    except LedgerNotFoundError:
        return None
    try:
        what = f"cursor ledger {ledger_id}"
        if handle.metadata.is_closed:
            last = handle.metadata.last_entry_id
        else:
            last = await handle.read_last_add_confirmed()
            # Its writer acknowledged the entry after the LAC its last entry carries: the
            # newest flush is usually there (one not acknowledged yet is as good a state).
            with contextlib.suppress(BKeeperError):
                async for newest in handle.read_unconfirmed(last + 1, last + 1):
                    return SubscriptionState.decode(bytes(newest.payload), what)
        if last < 0:
            return None
        entry = await handle.read_entry(last)
        return SubscriptionState.decode(bytes(entry.payload), what)
    finally:
        await handle.close()


class CursorLedger:
    """The cursor ledger a consumer appends its state to."""

    def __init__(self, bk: BookKeeper, handle: WriteHandle) -> None:
        self._bk = bk
        self._handle = handle

    @property
    def ledger_id(self) -> int:
        return self._handle.ledger_id

    @classmethod
    async def create(
        cls, bk: BookKeeper, config: LogConfig, state: SubscriptionState
    ) -> CursorLedger:
        """A new cursor ledger holding ``state`` as its first entry."""
        handle = await bk.create_ledger(
            config.ensemble_size,
            config.write_quorum,
            config.ack_quorum,
            digest=config.digest,
            password=config.password,
        )
        cursor = cls(bk, handle)
        try:
            await cursor.append(state)
        except BaseException:
            await cursor.delete()
            raise
        return cursor

    async def append(self, state: SubscriptionState) -> None:
        """Append ``state``; durable when this returns. ``LedgerFencedError`` once a consumer
        that took over has fenced this ledger (and after it has deleted the ledger, as it does
        once it has copied the state, or once the subscription is deleted)."""
        try:
            await self._handle.append(state.encode())
        except LedgerDeletedError as exc:
            raise LedgerFencedError(
                f"cursor ledger {self.ledger_id} was deleted: a consumer that took over copied "
                "its state, or the subscription was deleted"
            ) from exc

    async def delete(self) -> None:
        """Close and delete the ledger (its state is elsewhere by then)."""
        with contextlib.suppress(BKeeperError):
            await self._handle.close()
        with contextlib.suppress(LedgerNotFoundError):
            await self._bk.delete_ledger(self.ledger_id, fence=False)


async def drop_cursor(bk: BookKeeper, ledger_id: int) -> None:
    """Delete a cursor ledger whose state was copied elsewhere."""
    with contextlib.suppress(LedgerNotFoundError):
        await bk.delete_ledger(ledger_id, fence=False)
