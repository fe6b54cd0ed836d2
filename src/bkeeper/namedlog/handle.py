"""One log of a :class:`~bkeeper.namedlog.context.LogContext`, by name: what its writer, reader
and consumers need of it (its metadata and settings, its last record, its subscriptions'
states, truncation, sealing what a dead writer left open).

:class:`~bkeeper.namedlog.logs.NamedLog` is a :class:`LogHandle` with the operations that
make writers, readers and consumers on top; the modules below ``logs.py`` take a
``LogHandle``, so none of them imports ``logs.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from bkeeper.common.cas import cas_update
from bkeeper.common.errors import LedgerNotFoundError
from bkeeper.meta.ledger_metadata import LedgerState
from bkeeper.namedlog.context import LogContext
from bkeeper.namedlog.core.config import LogConfig, LogSettings
from bkeeper.namedlog.core.log_metadata import LogMetadata
from bkeeper.namedlog.core.records import Position
from bkeeper.namedlog.core.retention import consumed_before, retained_from, retention_on
from bkeeper.namedlog.core.subscription_state import SubscriptionState
from bkeeper.namedlog.stores import peek

__all__ = ["SEAL_CHECKS_IN_FLIGHT", "LogHandle", "Snapshot"]

log = logging.getLogger(__name__)

#: Ledger metadata reads a new writer has in flight at once while it looks for ledgers of
#: its log left unsealed (``seal_unsealed(every=True)``): one round trip for most logs.
SEAL_CHECKS_IN_FLIGHT = 64

#: A log's metadata as read: its value and the version to compare-and-set against.
Snapshot = tuple[LogMetadata, int]


class LogHandle:
    """Log ``name`` of ``context`` (see the module docstring)."""

    def __init__(self, context: LogContext, name: str) -> None:
        self.context = context
        self.name = name

    async def metadata(self) -> LogMetadata:
        return (await self.context.store.read(self.name))[0]

    async def _read(self) -> Snapshot:
        return await self.context.store.read(self.name)

    async def settings(self) -> LogSettings:
        """The log's own settings (a ``ConfigError`` naming the log and the setting when a
        stored one is wrong)."""
        return (await self.metadata()).settings(self.name)

    def config_of(self, meta: LogMetadata) -> LogConfig:
        """The configuration writers of this log use: the process's ``LogConfig`` with the
        settings stored in ``meta`` in place of its own."""
        return meta.settings(self.name).applied_to(self.context.config)

    async def seal_unsealed(self, meta: LogMetadata, *, every: bool = False) -> None:
        """Recover (fence and seal) the ledgers at the end of the list that are not CLOSED:
        the last one, and the one before it when a writer died in the middle of a roll.
        ``every`` (a new writer): every ledger of the list that is not CLOSED, also one
        behind a sealed one (its writer died while it still tried to seal it, having sealed
        a later one: readers wait at its end until it is sealed). That reads each listed
        ledger's metadata once, ``SEAL_CHECKS_IN_FLIGHT`` at a time."""
        bk, password = self.context.bk, self.context.config.password
        if not every:
            for ledger in reversed(meta.ledgers):
                try:
                    state = (await bk.ledger_metadata(ledger.ledger_id)).state
                    if state is LedgerState.CLOSED:
                        return
                    await bk.open_ledger(ledger.ledger_id, password, recovery=True)
                except LedgerNotFoundError:
                    continue
            return

        async def state_of(ledger_id: int) -> LedgerState | None:
            try:
                return (await bk.ledger_metadata(ledger_id)).state
            except LedgerNotFoundError:
                return None

        ids = [ledger.ledger_id for ledger in reversed(meta.ledgers)]
        for start in range(0, len(ids), SEAL_CHECKS_IN_FLIGHT):
            chunk = ids[start : start + SEAL_CHECKS_IN_FLIGHT]
            states = await asyncio.gather(*(state_of(ledger_id) for ledger_id in chunk))
            for ledger_id, found in zip(chunk, states, strict=True):
                if found is None or found is LedgerState.CLOSED:
                    continue
                with contextlib.suppress(LedgerNotFoundError):  # deleted meanwhile: nothing
                    await bk.open_ledger(ledger_id, password, recovery=True)

    async def subscriptions(self) -> dict[str, SubscriptionState]:
        """Every subscription of the log and its state (a cursor ledger's newest confirmed
        state where a consumer keeps its acks in one)."""
        context = self.context
        states = await context.subscriptions.states(self.name)
        for name, state in states.items():
            if state.cursor is not None:
                newer = await peek(context.bk, state.cursor, context.config)
                if newer is not None:
                    states[name] = state.with_progress_of(newer)
        return states

    async def last_position(self) -> Position | None:
        """The position of the log's last record now (None when it has none; the last record
        of a batch: its entry is read; a chunked record cut short or still being written is
        stepped over: :meth:`LogWalk.last_whole`). Records past
        the LAC of an open ledger count (as for ``open_reader(LATEST)``, see
        :mod:`bkeeper.namedlog.walk`)."""
        meta = await self.metadata()
        walk = self.context.walk
        end = await walk.latest(meta)
        if end.entry_id > 0:
            found = await walk.last_whole(end.ledger_id, end.entry_id - 1)
            if found is not None:
                return found
        for ledger in reversed(meta.ledgers):
            if ledger.ledger_id >= end.ledger_id:
                continue
            ledger_end = await walk.ledger_end(ledger.ledger_id)
            if ledger_end is not None and ledger_end.sealed and ledger_end.last >= 0:
                found = await walk.last_whole(ledger.ledger_id, ledger_end.last)
                if found is not None:
                    return found
        return None

    async def truncate(self, before: Position) -> int:
        """Delete the ledgers that hold only records before ``before`` (never the last
        ledger); the number of ledgers deleted."""
        context = self.context

        async def attempt(snapshot: Snapshot) -> list[int]:
            meta, version = snapshot
            new_meta, dropped = meta.truncated(before)
            await context.store.write(self.name, new_meta, version)
            return dropped

        dropped = await cas_update(
            self._read,
            attempt,
            what=f"log {self.name!r}: could not truncate",
            attempts_max=context.config.metadata_retries_max,
        )
        for ledger_id in dropped:
            with contextlib.suppress(LedgerNotFoundError):
                await context.bk.delete_ledger(ledger_id)
        return len(dropped)

    async def retain(self, meta: LogMetadata, config: LogConfig, limit: int) -> int:
        """One retention pass over ``meta``'s list, keeping ``meta.ledgers[limit:]``; the number
        of ledgers deleted."""
        if not retention_on(config) or len(meta.ledgers) < 2:
            return 0
        bk, ledgers = self.context.bk, meta.ledgers[:limit]
        lengths: dict[int, int] = {}
        for ledger in ledgers if config.retention_bytes else ():
            with contextlib.suppress(LedgerNotFoundError):
                lengths[ledger.ledger_id] = (await bk.ledger_metadata(ledger.ledger_id)).length
        consumed = None
        if config.retention_consumed:
            consumed = consumed_before(ledgers, list((await self.subscriptions()).values()))
        keep_from = retained_from(
            meta.ledgers,
            config,
            now_ms=self.context.clock.wall_ms(),
            limit=limit,
            lengths=lengths,
            consumed=consumed,
        )
        if keep_from <= 0:
            return 0
        return await self.truncate(Position(meta.ledgers[keep_from].ledger_id, 0))
