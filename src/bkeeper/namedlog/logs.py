"""Named logs: an ordered list of ledgers that one writer at a time appends to.

:class:`NamedLogs` holds a cluster's logs; :class:`NamedLog` is one of them. Every change of
a log's ledger list is a compare-and-set through :func:`bkeeper.common.cas.cas_update`.

Writer (:meth:`NamedLog.open_writer`, :mod:`bkeeper.namedlog.writer`): recovers (fences and
seals) the last ledger of the list, creates a new ledger and appends it to the list by
compare-and-set. A lost CAS means another writer got there first: the new ledger is deleted
and the whole step runs again, so the last writer to open wins and every earlier one is
fenced (its next append fails with :class:`LogFencedError`; nothing it wrote after the
fencing is visible, as recovery seals the ledger at its acknowledged end). The writer rolls
to a new ledger when the current one reaches ``roll_bytes`` or ``roll_age_ms``.

Settings: a log may store its own (:class:`~bkeeper.namedlog.core.config.LogSettings`, set by
:meth:`NamedLogs.create` and changed by :meth:`NamedLog.configure` under compare-and-set);
they win over the process's ``LogConfig`` (:meth:`NamedLog.config_of`). A writer reads them
when it opens and again at each tick of its timer; retention runs when a writer opens, at each
roll, on the writer's timer and after :meth:`NamedLog.append_ledgers`
(:mod:`bkeeper.namedlog.core.retention`).

Terms: a writer opened with a leadership ``term`` (an elected leader's: see
:mod:`bkeeper.statemachine.dice`) first records the term in the log's metadata by
compare-and-set, and only then fences the previous writer. A term older than the one
recorded is refused (:class:`WriterTermError`) before anything is fenced, so a leader that
was paused between its leadership check and ``open_writer`` cannot, when it resumes, fence
the leader that took over; a writer whose term was overtaken is fenced at its next roll
even before the newer leader's ledger is listed. Writers opened without a term are not
ordered by it (and leave the recorded term as it is).

Reader (:meth:`NamedLog.open_reader`, :mod:`bkeeper.namedlog.reader`): reads sealed ledgers
in order, then tails the open one without fencing. Where a log starts and ends, the record at
a time and the runs of confirmed entries are the walk's (:mod:`bkeeper.namedlog.walk`, one
:class:`LogWalk` per :class:`NamedLogs`).

Subscriptions (:meth:`NamedLog.subscribe`, :mod:`bkeeper.namedlog.subscriptions`): durable
consumers that resume after what they acknowledged; deleting a log deletes them.

Limits: ``metadata_retries_max`` lost CAS per step.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Any

from bkeeper.client.bookkeeper import BookKeeper
from bkeeper.client.write_handle import WriteHandle
from bkeeper.common.cas import cas_update
from bkeeper.common.clock import Clock
from bkeeper.common.errors import (
    BKeeperError,
    ConfigError,
    LedgerNotFoundError,
    LogError,
    MetadataVersionError,
    SubscriptionNotFoundError,
    WriterTermError,
)
from bkeeper.namedlog.context import LogContext
from bkeeper.namedlog.core.config import EARLIEST, LogConfig, LogSettings
from bkeeper.namedlog.core.log_metadata import (
    LogLedger,
    LogMetadata,
    WriterCommit,
    check_log_name,
    check_writer_id,
)
from bkeeper.namedlog.core.records import Position
from bkeeper.namedlog.handle import LogHandle, Snapshot
from bkeeper.namedlog.ledgers import create_ledger, discard_ledger
from bkeeper.namedlog.reader import LogReader, open_reader
from bkeeper.namedlog.stores import LogStore, SubscriptionStore, drop_cursor
from bkeeper.namedlog.subscriptions import Consumer, SubscribeOptions, subscribe
from bkeeper.namedlog.walk import LogWalk
from bkeeper.namedlog.writer import LogWriter

__all__ = ["NamedLog", "NamedLogs"]

log = logging.getLogger(__name__)


class NamedLogs:
    """The named logs of one cluster, through a started :class:`BookKeeper` client.

    ``clock`` gives record timestamps, ledger list times and writers' ages (default: the
    client's, :attr:`BookKeeper.clock`)."""

    def __init__(
        self, bk: BookKeeper, config: LogConfig | None = None, *, clock: Clock | None = None
    ) -> None:
        self.context = LogContext.build(bk, config or LogConfig(), clock or bk.clock)

    @property
    def bk(self) -> BookKeeper:
        return self.context.bk

    @property
    def config(self) -> LogConfig:
        return self.context.config

    @property
    def clock(self) -> Clock:
        return self.context.clock

    @property
    def store(self) -> LogStore:
        return self.context.store

    @property
    def walk(self) -> LogWalk:
        return self.context.walk

    async def create(self, name: str, settings: LogSettings | None = None) -> NamedLog:
        """Create an empty log, storing ``settings`` with it (none: the writers' own
        ``LogConfig`` decides everything)."""
        await self.store.create(name, self.clock.wall_ms(), settings)
        return self.log(name)

    def log(self, name: str) -> NamedLog:
        return NamedLog(self, check_log_name(name))

    async def names(self) -> list[str]:
        return await self.store.names()

    async def delete(self, name: str) -> int:
        """Delete the log and every ledger of it; the number of ledgers deleted.

        The log's unsealed ledgers are sealed first, fencing a writer that is still open:
        its next append fails (``LogNotFoundError``) instead of being acknowledged into a
        ledger that is about to go. A writer that rolls meanwhile changes the list, so the
        delete's compare-and-set fails and it seals again.
        """
        named = self.log(name)

        async def attempt(snapshot: Snapshot) -> LogMetadata:
            meta, version = snapshot
            await named.seal_unsealed(meta)
            for subscription in await named._subscriptions().names(name):
                with contextlib.suppress(SubscriptionNotFoundError):
                    await named.unsubscribe(subscription)
            await self.store.delete(name, version)
            return meta

        meta = await cas_update(
            lambda: self.store.read(name),
            attempt,
            what=f"log {name!r}: could not delete",
            attempts_max=self.config.metadata_retries_max,
        )
        for ledger in meta.ledgers:
            with contextlib.suppress(LedgerNotFoundError):
                await self.bk.delete_ledger(ledger.ledger_id, fence=False)
        return len(meta.ledgers)


class NamedLog(LogHandle):
    """One named log. Made by :meth:`NamedLogs.log` or :meth:`NamedLogs.create`."""

    def __init__(self, logs: NamedLogs, name: str) -> None:
        super().__init__(logs.context, name)
        self.logs = logs

    async def new_ledger(self) -> WriteHandle:
        """A new ledger for this log, not listed yet, made as its writers make theirs: the
        log's stored ensemble and quorums over the process's ``LogConfig`` (for ledgers
        written elsewhere and appended with :meth:`append_ledgers`, as Spark's write tasks
        do); one read of the log's metadata."""
        return await create_ledger(self.logs.bk, self.config_of(await self.metadata()))

    async def configure(
        self, change: Callable[[LogSettings], LogSettings]
    ) -> tuple[LogSettings, LogSettings]:
        """Change the log's settings to ``change(settings)``, by compare-and-set (``change``
        runs again on the settings of the moment when another change went in first); the
        settings before and after. Stored settings that are wrong are left out (a warning
        names them), the others kept: a change fixes a log whose settings were written wrongly
        by hand."""

        async def attempt(snapshot: Snapshot) -> tuple[LogSettings, LogSettings]:
            meta, version = snapshot
            before, dropped = meta.settings_salvaged()
            if dropped:
                log.warning(
                    "log %s: dropping its wrongly stored settings %s", self.name, ", ".join(dropped)
                )
            after = change(before)
            after.applied_to(self.logs.config)  # a combination LogConfig refuses fails here
            await self.logs.store.write(self.name, meta.with_settings(after), version)
            return before, after

        return await cas_update(
            self._read,
            attempt,
            what=f"log {self.name!r}: could not change its settings",
            attempts_max=self.logs.config.metadata_retries_max,
        )

    async def open_writer(self, *, term: int | None = None) -> LogWriter:
        """Become the log's only writer, fencing any earlier one.

        ``term``: this writer's leadership term (higher is newer). The log records it before
        the earlier writer is fenced; a term older than the recorded one raises
        :class:`WriterTermError` and fences nothing (see the module docstring)."""
        logs = self.logs
        if term is not None and (isinstance(term, bool) or not isinstance(term, int) or term < 0):
            raise ConfigError(f"term: must be a non-negative integer, got {term!r}")

        async def attempt(snapshot: Snapshot) -> LogWriter:
            meta, version = snapshot
            config = self.config_of(meta)  # a wrong stored setting fails here, fencing nothing
            if term is not None:
                meta, version = await self._claim(meta, version, term)
            await self.seal_unsealed(meta, every=True)
            handle = await create_ledger(logs.bk, config)
            try:
                new_meta = meta.with_ledger(handle.ledger_id, logs.clock.wall_ms())
                version = await logs.store.write(self.name, new_meta, version)
            except (MetadataVersionError, ConfigError) as exc:
                # Another writer's ledger went in first (ConfigError: its id is above ours).
                await discard_ledger(logs.bk, handle)
                raise MetadataVersionError(f"log {self.name!r}: the list moved on") from exc
            log.debug("log %s: writer on ledger %d", self.name, handle.ledger_id)
            return LogWriter(self, handle, new_meta, version, term, config=config)

        writer = await cas_update(
            self._read,
            attempt,
            what=f"log {self.name!r}: could not open a writer",
            attempts_max=logs.config.metadata_retries_max,
        )
        await writer.retain()  # retention when a writer opens (every earlier ledger is sealed)
        return writer

    async def _claim(self, meta: LogMetadata, version: int, term: int) -> Snapshot:
        """Record ``term`` in the log's metadata (compare-and-set on ``version``), unless
        it is there already; ``WriterTermError`` when the log holds a newer term."""
        held = meta.writer_term
        if held is not None and term < held:
            raise WriterTermError(
                f"log {self.name!r}: writer term {term} is older than the log's term {held}: "
                "a newer leader holds the log"
            )
        if held == term:
            return meta, version
        claimed = meta.with_term(term)
        version = await self.logs.store.write(self.name, claimed, version)
        log.debug("log %s: term %d recorded", self.name, term)
        return claimed, version

    async def open_reader(self, start: str | Position | int = EARLIEST) -> LogReader:
        """Records from ``start``: ``"earliest"``, ``"latest"`` (only records appended from
        now on), a :class:`Position` (that record and later ones) or an ``int`` timestamp in
        ms (the first record appended at or after it, and later ones). The starting point
        is fixed when this returns."""
        return await open_reader(self, start)

    async def subscribe(
        self,
        name: str,
        start: str | Position | int = EARLIEST,
        options: SubscribeOptions | None = None,
        **changes: Any,
    ) -> Consumer:
        """The consumer of subscription ``name``, created at ``start`` (as for
        :meth:`open_reader`) if it does not exist; see :mod:`bkeeper.namedlog.subscriptions`.
        ``options``: :class:`SubscribeOptions`, with ``changes`` (the same names as keywords,
        ``consumer_id="a"``, ``mode="shared"``...) over them."""
        return await subscribe(self, name, start, SubscribeOptions.of(options, changes))

    async def unsubscribe(self, name: str) -> None:
        """Delete subscription ``name`` (its consumer, if any, has its next flush refused)."""
        store = self._subscriptions()
        state, _version = await store.read(self.name, name)
        await store.delete(self.name, name)
        if state.cursor is not None:
            await drop_cursor(self.logs.bk, state.cursor)

    def _subscriptions(self) -> SubscriptionStore:
        return self.context.subscriptions

    async def append_ledgers(
        self,
        ledger_ids: Sequence[int],
        *,
        writer_id: str | None = None,
        batch_id: int | None = None,
    ) -> bool:
        """Append sealed ledgers (written by someone else, e.g. Spark tasks) to the log, in
        the order given, in one compare-and-set; False when ``writer_id`` already committed
        ``batch_id`` or a later batch (a replay: nothing is appended and the caller should
        delete its ledgers).

        Like ``open_writer`` this seals the log's unsealed ledgers first, fencing the
        current writer. A ledger whose id is not above the log's last one (another writer
        rolled meanwhile) is copied into a new ledger, which is appended instead, and the
        original deleted; readers see every appended ledger at once or none of them.
        """
        if (writer_id is None) != (batch_id is None):
            raise ConfigError("append_ledgers: give both writer_id and batch_id, or neither")
        if writer_id is not None:
            check_writer_id(writer_id)
        logs = self.logs
        ids = list(ledger_ids)
        copied: list[int] = []  # originals replaced by copies, deleted once appended

        async def attempt(snapshot: Snapshot) -> bool:
            meta, version = snapshot
            if writer_id is not None and batch_id is not None:
                last = meta.last_batch(writer_id)
                if last is not None and last >= batch_id:
                    return False
            await self.seal_unsealed(meta)
            floor = meta.ledgers[-1].ledger_id if meta.ledgers else -1
            for index, ledger_id in enumerate(ids):
                if ledger_id <= floor:
                    ids[index] = await self._copy_ledger(ledger_id)
                    copied.append(ledger_id)
                floor = ids[index]
            now = logs.clock.wall_ms()
            commit = None
            if writer_id is not None and batch_id is not None:
                commit = WriterCommit(writer_id, batch_id, now)
            new_meta = meta.with_ledgers(tuple(LogLedger(i, now) for i in ids), commit)
            await logs.store.write(self.name, new_meta, version)
            return True

        appended = await cas_update(
            self._read,
            attempt,
            what=f"log {self.name!r}: could not append ledgers",
            attempts_max=logs.config.metadata_retries_max,
        )
        if appended:
            for ledger_id in copied:
                with contextlib.suppress(LedgerNotFoundError):
                    await logs.bk.delete_ledger(ledger_id)
            await self._retain_sealed()
        return appended

    async def _retain_sealed(self) -> None:
        """A retention pass over a list whose ledgers are all sealed (after
        ``append_ledgers``: the appended ledgers are, and the writer before was fenced);
        the last ledger stays. A failure is logged: the next pass tries again."""
        try:
            meta, _version = await self._read()
            await self.retain(meta, self.config_of(meta), len(meta.ledgers) - 1)
        except BKeeperError as exc:
            log.warning("log %s: retention after appending ledgers: %s", self.name, exc)

    async def _copy_ledger(self, ledger_id: int) -> int:
        """A new ledger holding the entries of the sealed ledger ``ledger_id``."""
        logs = self.logs
        source = await logs.bk.open_ledger(ledger_id, logs.config.password, recovery=False)
        if not source.is_closed:
            raise LogError(f"ledger {ledger_id} is not sealed; only sealed ledgers are appended")
        target = await create_ledger(logs.bk, logs.config)
        try:
            pending = []
            async for entry in source.read():
                pending.append(await target.append_async(entry.data))
            await asyncio.gather(*pending)
            await target.close()
        except BaseException:
            await discard_ledger(logs.bk, target)
            raise
        return target.ledger_id
