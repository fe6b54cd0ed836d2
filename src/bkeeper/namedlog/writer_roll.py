"""A named log writer's roll: to a new ledger, listed by compare-and-set; the old one sealed.

Once the writer's ledger holds ``roll_bytes`` or is ``roll_age_ms`` old, or holds entries
and the log's replication changed (``replication_stale``) (decided by
:func:`bkeeper.namedlog.core.rolling.roll_due`; checked at each entry sent and at each tick
of the writer's timer), the writer creates a new ledger, appends it to the log's list by
compare-and-set (:func:`bkeeper.common.cas.cas_update`, at most ``metadata_retries_max`` lost
rounds) and seals the old one in the background (trying again while the metadata store is
away, until the writer closes). A list that moved on (another writer's ledger is last), or a
newer writer term, means this writer was fenced. Retention runs after each roll.

A compare-and-set whose answer was lost may have gone in: the list is read to tell (see
:meth:`Roller._outcome`). A roll that finds too few bookies for a new ledger
(``NotEnoughBookiesError``) while the current ledger still takes entries (its writer
degraded: a bookie lost, no spare) does not stop the writer: it writes on to the current
ledger and tries the roll again after ``ROLL_RETRY_PAUSE_S`` (one warning for the first
failure, one info line for the roll that succeeds).

:class:`Roller` belongs to one :class:`~bkeeper.namedlog.writer.LogWriter`; it replaces the
writer's ``_handle``, ``_meta`` and ``_version`` when a roll goes in.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from bkeeper.client.write_handle import WriteHandle
from bkeeper.common import bugs
from bkeeper.common.cas import cas_update
from bkeeper.common.errors import BKeeperError, LogNotFoundError, NotEnoughBookiesError
from bkeeper.namedlog.core.log_metadata import LogMetadata
from bkeeper.namedlog.core.rolling import overtaken, roll_due
from bkeeper.namedlog.ledgers import create_ledger, discard_ledger, seal_until_closed

if TYPE_CHECKING:
    from bkeeper.namedlog.writer import LogWriter

__all__ = ["ROLL_RETRY_PAUSE_S", "Roller"]

#: The writer's log lines, wherever their code lives, keep the writer module's logger name.
log = logging.getLogger("bkeeper.namedlog.writer")

#: After a roll that found too few bookies for a new ledger, the pause before the next try
#: (the writer goes on with its current ledger meanwhile, if it takes entries).
ROLL_RETRY_PAUSE_S = 5.0


class Roller:
    """When and how one writer rolls to a new ledger. Owned by the writer."""

    def __init__(self, writer: LogWriter) -> None:
        self._writer = writer
        self._clock = writer._clock
        self._lock = asyncio.Lock()
        self._opened_at = self._clock.monotonic()  # when the current ledger was started
        self._again_at = 0.0  # a roll that found too few bookies waits until then
        self._failures = 0  # rolls in a row that found too few bookies
        #: Ledgers rolled away from and not sealed yet (aborted if the log is deleted).
        #: ordered (a dict, not a set): sealed and closed in the order they rolled away
        self.sealing: dict[WriteHandle, None] = {}
        #: The log's replication (ensemble, quorums) changed and the current ledger has the
        #: old one: roll as soon as it holds entries, so that the old ledger is sealed and can
        #: be re-laid out (``bkeeper log config --existing``); set by the timer.
        self.replication_stale = False

    def should_roll(self) -> bool:
        """The current ledger is full, or holds entries and is ``roll_age_ms`` old."""
        if self._failures and self._clock.monotonic() < self._again_at:
            return False
        handle, config = self._writer._handle, self._writer._config
        has_entries = handle.last_add_pushed >= 0
        if self.replication_stale and has_entries:
            return True
        # The clock is read only when the age can matter (this runs for every entry sent).
        aged = config.roll_age_ms and has_entries
        return roll_due(
            config,
            length_bytes=handle.length,
            has_entries=has_entries,
            age_s=self._clock.monotonic() - self._opened_at if aged else 0.0,
        )

    async def roll(self) -> None:
        """Roll to a new ledger if one is still due (module doc), then run retention."""
        writer = self._writer
        async with self._lock:
            if not self.should_roll():
                return  # another append rolled while this one waited
            old = writer._handle
            try:
                new = await create_ledger(writer._context.bk, writer._config)
            except NotEnoughBookiesError as exc:
                if not old.writable:
                    raise
                self._postponed(exc)
                return
            writer._meta, writer._version = await self._list(old, new)
            writer._handle = new
            self._opened_at = self._clock.monotonic()
            self.replication_stale = False
            self._rolled(old, new)
        await writer.retain()

    async def _list(self, old: WriteHandle, new: WriteHandle) -> tuple[LogMetadata, int]:
        """List ``new`` after ``old`` by compare-and-set; the metadata written and its
        version. Raises when it did not go in (``new`` discarded unless the list may name it)."""
        writer = self._writer
        store, name, end = writer._context.store, writer._log.name, writer._end

        async def attempt(snapshot: tuple[LogMetadata, int]) -> tuple[LogMetadata, int]:
            meta, version = snapshot
            if not meta.ledgers or meta.ledgers[-1].ledger_id != old.ledger_id:
                raise end.fenced(RuntimeError("the ledger list moved on"))
            if overtaken(writer.term, meta.writer_term):
                raise end.fenced(
                    RuntimeError(f"term {meta.writer_term} overtook term {writer.term}")
                )
            new_meta = meta.with_ledger(new.ledger_id, self._clock.wall_ms())
            return new_meta, await store.write(name, new_meta, version)

        try:
            return await cas_update(
                lambda: store.read(name),
                attempt,
                what=f"log {name!r}: could not roll",
                attempts_max=writer._config.metadata_retries_max,
                current=(writer._meta, writer._version),
            )
        except BKeeperError as exc:
            if bugs.ACTIVE and bugs.active("roll-lost-answer-deleted"):
                await discard_ledger(writer._context.bk, new)
                raise
            went_in = await self._outcome(new, exc)
            if went_in is None:
                raise
            return went_in

    def _rolled(self, old: WriteHandle, new: WriteHandle) -> None:
        """Log the roll, and seal ``old`` in the background."""
        name = self._writer._log.name
        log.debug("log %s: rolled from ledger %d to %d", name, old.ledger_id, new.ledger_id)
        if self._failures:
            log.info(
                "log %s: rolled to ledger %d after %d tries that found too few bookies",
                name,
                new.ledger_id,
                self._failures,
            )
            self._failures = 0
        self.sealing[old] = None
        self._writer._tasks.spawn(self._seal(old), f"seal ledger {old.ledger_id}")

    def _postponed(self, error: NotEnoughBookiesError) -> None:
        """A roll found too few bookies for a new ledger: write on to the current one, and
        try again after ``ROLL_RETRY_PAUSE_S`` (module doc)."""
        self._failures += 1
        self._again_at = self._clock.monotonic() + ROLL_RETRY_PAUSE_S
        if self._failures == 1:
            log.warning(
                "log %s: cannot roll to a new ledger (%s): writing on to ledger %d, trying "
                "again every %.0f s",
                self._writer._log.name,
                error,
                self._writer._handle.ledger_id,
                ROLL_RETRY_PAUSE_S,
            )

    async def _outcome(
        self, new: WriteHandle, error: BKeeperError
    ) -> tuple[LogMetadata, int] | None:
        """A roll's compare-and-set failed with ``error``, which may be a write ZooKeeper
        applied whose answer was lost (a ConnectionLoss): the list is read to tell. Listed
        last, under no newer term: the roll went in, and the metadata read is returned.
        Not listed: ``new`` is deleted, and None. Listed behind another writer's ledger, or
        the list unreadable: None, and ``new`` is kept (a later writer seals a listed one;
        deleting it would leave the list naming a ledger that is gone)."""
        writer = self._writer
        store, name = writer._context.store, writer._log.name
        try:
            meta, version = await store.read(name)
        except LogNotFoundError:
            await discard_ledger(writer._context.bk, new)
            raise await writer._end.mark_deleted(f"found at a roll: {error}") from error
        except BKeeperError as exc:
            log.warning(
                "log %s: the roll to ledger %d failed (%s) and the list could not be read "
                "(%s): the ledger is kept, as the list may name it",
                name,
                new.ledger_id,
                error,
                exc,
            )
            return None
        index = meta.index_of(new.ledger_id)
        if index is None:
            await discard_ledger(writer._context.bk, new)
            return None
        if index == len(meta.ledgers) - 1 and not overtaken(writer.term, meta.writer_term):
            log.info(
                "log %s: the roll to ledger %d went in (its answer was lost: %s)",
                name,
                new.ledger_id,
                error,
            )
            return meta, version
        return None

    async def _seal(self, handle: WriteHandle) -> None:
        """Seal a ledger rolled away from, trying again while the metadata store is away:
        readers cannot pass it before (its end is not known). Once the writer closes it is
        left to the log's next writer (:meth:`NamedLog.seal_unsealed`)."""
        try:
            await seal_until_closed(handle, self._writer._closing, self._writer._log.name)
        finally:
            self.sealing.pop(handle, None)
