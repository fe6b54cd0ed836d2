"""A named log writer's timer, and its retention passes.

Every ``roll_age_ms`` / 2 (at least ``TICK_S_MIN``, at most ``TICK_S_MAX``; by the logs'
Clock; the period and when to roll are decided by :mod:`bkeeper.namedlog.core.rolling`) the
writer re-reads the log's metadata and so picks up changed settings (the log's stored settings
over the process's ``LogConfig``: new roll limits and retention at once, a new ensemble or
quorum from the next ledger on, which it starts at once if the current one holds entries);
seals its current ledger and starts a new one when that
ledger holds entries and is ``roll_age_ms`` old, also with no append coming (as Pulsar's
managed ledger does on its rollover timer: a ledger with no entry is never rolled, so an idle
writer adds no ledgers); and runs retention. An error of a tick (the metadata store away, a
wrong stored setting) is logged once per distinct error, with one line once it is over, and
kept in :attr:`WriterTimer.error` (the writer's ``timer_error``); the next tick tries again.
The timer stops when the writer closes or fails, or its client is closed.

Retention (:mod:`bkeeper.namedlog.core.retention`: ``retention_age_ms``, ``retention_bytes``,
``retention_consumed``) runs when the writer opens, at each roll and at each tick; it deletes
only sealed ledgers, never the writer's current one or one being sealed.

:class:`WriterTimer` belongs to one :class:`~bkeeper.namedlog.writer.LogWriter`; it replaces
the writer's ``_config`` when the log's settings change.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING

from bkeeper.common.errors import BKeeperError, LogNotFoundError, MetadataClosedError
from bkeeper.common.tasks import within
from bkeeper.namedlog.core.log_metadata import LogMetadata
from bkeeper.namedlog.core.retention import retention_on
from bkeeper.namedlog.core.rolling import tick_s

if TYPE_CHECKING:
    from bkeeper.namedlog.writer import LogWriter

__all__ = ["TIMER_POLL_S", "WriterTimer"]

#: The writer's log lines, wherever their code lives, keep the writer module's logger name.
log = logging.getLogger("bkeeper.namedlog.writer")

#: How often (real time) the timer looks at the clock to see whether a tick is due.
TIMER_POLL_S = 0.5


class WriterTimer:
    """One writer's timer and retention. Owned by the writer."""

    def __init__(self, writer: LogWriter, config_text: str | None) -> None:
        self._writer = writer
        self._name = writer._log.name
        self._clock = writer._clock
        self._config_text = config_text
        #: The last error of the timer's work or of retention (None: the last pass went well).
        self.error: str | None = None

    async def run(self) -> None:
        """Run :meth:`tick` every tick period by the logs' clock, until the writer closes
        or fails."""
        writer = self._writer
        due = self._clock.monotonic() + tick_s(writer._config)
        while True:
            with contextlib.suppress(TimeoutError):
                await within(writer._closing.wait(), TIMER_POLL_S)
            if writer._closing.is_set() or writer._error is not None:
                return
            if self._clock.monotonic() >= due:
                try:
                    await self.tick()
                except MetadataClosedError as exc:  # its client closed: no tick can succeed
                    log.info("log %s: the writer's timer stops: %s", self._name, exc)
                    return
                due = self._clock.monotonic() + tick_s(writer._config)

    async def tick(self) -> None:
        """The timer's work, once (see :meth:`LogWriter.tick`)."""
        writer = self._writer
        try:
            meta, _version = await writer._context.store.read(self._name)
            self._take_settings(meta)
            roller = writer._roller
            if roller.should_roll():
                await roller.roll()  # retains too, and notes how that went
                return
            await self._retention_pass(meta)
        except LogNotFoundError:
            return  # deleted: the node's watch fails the writer with LogDeletedError
        except MetadataClosedError:
            raise  # the client was closed under the writer: the timer stops
        except BKeeperError as exc:
            if writer._error is None:
                self._note(str(exc))
            return
        self._note(None)

    def _take_settings(self, meta: LogMetadata) -> None:
        """Use the log's settings in ``meta`` from now on, if they changed."""
        if meta.config_text == self._config_text:
            return
        writer = self._writer
        config = writer._log.config_of(meta)  # ConfigError: kept as they were
        writer._config, self._config_text = config, meta.config_text
        handle = writer._handle.metadata
        replication = (config.ensemble_size, config.write_quorum, config.ack_quorum)
        if replication != (handle.ensemble_size, handle.write_quorum, handle.ack_quorum):
            writer._roller.replication_stale = True  # roll now, not at the next limit
        log.info(
            "log %s: the writer follows the log's changed settings (%s)",
            self._name,
            meta.config_text or "none set",
        )

    def _note(self, problem: str | None) -> None:
        """Keep the timer's or retention's last error; log it when it changes."""
        if problem == self.error:
            return
        if problem is not None:
            log.warning("log %s: %s (tried again at the next tick)", self._name, problem)
        else:
            log.info("log %s: the writer's timer and retention work again", self._name)
        self.error = problem

    async def retain(self, meta: LogMetadata | None = None) -> int:
        """One retention pass (see :meth:`LogWriter.retain`)."""
        try:
            deleted = await self._retention_pass(meta or self._writer._meta)
        except BKeeperError as exc:
            self._note(str(exc))
            return 0
        self._note(None)
        return deleted

    async def _retention_pass(self, meta: LogMetadata) -> int:
        writer = self._writer
        config = writer._config
        if not retention_on(config):
            return 0
        mine = {writer._handle.ledger_id} | {h.ledger_id for h in writer._roller.sealing}
        limit = next((i for i, x in enumerate(meta.ledgers) if x.ledger_id in mine), None)
        if limit is None:
            return 0  # this writer's ledger is not listed: another writer took over
        deleted = await writer._log.retain(meta, config, limit)
        if deleted:
            log.debug("log %s: retention deleted %d ledgers", self._name, deleted)
            meta, version = await writer._context.store.read(self._name)
            if version > writer._version:  # a roll meanwhile may have read a newer one
                writer._meta, writer._version = meta, version
        return deleted
