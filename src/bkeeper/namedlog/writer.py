"""The writer of a named log: appends records to the log's last ledger, rolls, retains.

:meth:`NamedLog.open_writer <bkeeper.namedlog.logs.NamedLog.open_writer>` makes one after
fencing the previous writer. Appends go to the current ledger; once it holds ``roll_bytes``
or is ``roll_age_ms`` old, the writer creates a new ledger, appends it to the list by
compare-and-set (:func:`bkeeper.common.cas.cas_update`) and seals the old one in the
background. A list that moved on (another writer's ledger is last) means this writer was
fenced. Retention (:mod:`bkeeper.namedlog.core.retention`: ``retention_age_ms``,
``retention_bytes``, ``retention_consumed``) runs when the writer opens, at each roll and at
each tick of its timer.

The timer: every ``roll_age_ms`` / 2 (at least ``TICK_S_MIN``, at most ``TICK_S_MAX``; by the
logs' Clock; when to roll and to tick is decided by :mod:`bkeeper.namedlog.core.rolling`)
the writer re-reads the log's metadata and so picks up changed settings (the log's stored
settings over the process's ``LogConfig``: new roll limits and retention at once,
a new ensemble or quorum from the next ledger on); seals its current ledger and starts a new
one when that ledger holds entries and is ``roll_age_ms`` old, also with no append coming (as
Pulsar's managed ledger does on its rollover timer: a ledger with no entry is never rolled,
so an idle writer adds no ledgers); and runs retention. An error of a tick (the metadata store
away, a wrong stored setting) is logged once per distinct error, with one line once it is
over, and kept in :attr:`LogWriter.timer_error`; the next tick tries again. A roll by size,
or by age with appends coming, happens at the append as before.

Record batching (``LogConfig.batching``): records gather into batches
(:mod:`bkeeper.namedlog.batching`), each batch written as one entry in the record batch format
(:mod:`bkeeper.namedlog.core.records`; a batch of one record, uncompressed, as a format-1 entry);
each record's position is ``(ledger, entry, index in the batch)``. Batching off, each record
is an entry of its own (format 1).

Deletion (``NamedLogs.delete``, or the log's node deleted by anyone): the writer watches
the log's node and learns of the deletion as ZooKeeper reports it (well within a second);
it also finds out when its ledger is fenced or gone, or a roll finds no log. From then on it
fails with :class:`~bkeeper.common.errors.LogDeletedError`: every later append, and every
append not acknowledged by then (its ledgers' handles are aborted, and an acknowledgement
that arrives later is not reported). Appends acknowledged before stay acknowledged: the
delete took them away, as asked.

Background work (sealing rolled-away ledgers, explaining a fence, sending batches, watching
the log's node) runs on the writer's :class:`~bkeeper.common.tasks.TaskOwner`; ``close``
stops the watch, waits for the rest to end, then closes it.
Time comes from the logs' :class:`~bkeeper.common.clock.Clock`.

A roll that finds too few bookies for a new ledger (``NotEnoughBookiesError``) while the
current ledger still takes entries (its writer degraded: a bookie lost, no spare) does not stop
the writer: it writes on to the current ledger and tries the roll again after
``ROLL_RETRY_PAUSE_S`` (one warning for the first failure, one info line for the roll that
succeeds).

Limits: ``metadata_retries_max`` lost compare-and-sets per roll; ``TASKS_MAX`` background tasks;
``SEALED_BATCHES_MAX`` batches waiting to be sent (appenders wait meanwhile).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Mapping, Sequence
from itertools import repeat

from bkeeper.client.write_handle import WriteHandle
from bkeeper.common.cas import cas_update
from bkeeper.common.errors import (
    BKeeperError,
    ConfigError,
    LedgerDeletedError,
    LedgerFencedError,
    LedgerNotFoundError,
    LogDeletedError,
    LogError,
    LogFencedError,
    LogNotFoundError,
    MetadataClosedError,
    NotEnoughBookiesError,
)
from bkeeper.common.tasks import TaskOwner, within
from bkeeper.namedlog.batching import Batch, Batcher
from bkeeper.namedlog.core.chunks import encode_chunks
from bkeeper.namedlog.core.config import LogConfig
from bkeeper.namedlog.core.log_metadata import LogMetadata
from bkeeper.namedlog.core.records import (
    CHUNK_HEAD,
    CODEC_NONE,
    FORMAT_VERSION,
    HEAD,
    Position,
    codec_id,
    encode_batch,
    encode_record,
)
from bkeeper.namedlog.core.retention import retention_on
from bkeeper.namedlog.core.rolling import overtaken, roll_due, tick_s
from bkeeper.namedlog.handle import LogHandle
from bkeeper.namedlog.ledgers import create_ledger, discard_ledger, seal_until_closed

__all__ = ["LogWriter"]

_PLAIN_HEAD = HEAD.pack
_new_tuple = tuple.__new__

log = logging.getLogger(__name__)


#: After a roll that found too few bookies for a new ledger, the pause before the next try
#: (the writer goes on with its current ledger meanwhile, if it takes entries).
ROLL_RETRY_PAUSE_S = 5.0

#: How often (real time) the timer looks at the clock to see whether a tick is due.
TIMER_POLL_S = 0.5

#: How long a writer whose ledger was fenced while the log still lists it last waits for the
#: log's node to change before it says why: a delete (or a new writer, or a Spark commit)
#: seals the log's ledgers first and changes the list a moment later.
FENCE_EXPLAIN_WAIT_S = 5.0

#: Failures of the writer's ledger that mean it is gone or sealed under it; the log's
#: metadata says why (deleted, or another writer took over).
_LEDGER_TAKEN = (LedgerFencedError, LedgerNotFoundError, LedgerDeletedError)


class LogWriter:
    """The only writer of a named log (until another one opens). Made by ``open_writer``."""

    def __init__(
        self,
        named: LogHandle,
        handle: WriteHandle,
        meta: LogMetadata,
        version: int,
        term: int | None = None,
        *,
        config: LogConfig | None = None,
    ) -> None:
        self._log = named
        self._context = named.context
        #: The log's stored settings over the process's ``LogConfig`` (renewed by the timer).
        self._config = config or named.context.config
        self._config_text = meta.config_text
        #: The last error of the timer's work or of retention (None: the last pass went well).
        self.timer_error: str | None = None
        self._handle = handle
        self._meta = meta
        self._version = version
        #: The leadership term this writer was opened with (None: none).
        self.term = term
        self._clock = named.context.clock
        self._opened_at = self._clock.monotonic()
        self._roll_lock = asyncio.Lock()
        self._roll_again_at = 0.0  # a roll that found too few bookies waits until then
        self._roll_failures = 0  # rolls in a row that found too few bookies
        self._explaining: asyncio.Future[LogError] | None = None
        self._tasks = TaskOwner(f"log {named.name!r} writer", error=LogError)
        self._error: LogError | None = None
        self._error_explained = False
        self._closed = False
        self._closing = asyncio.Event()  # set by close: a seal waiting to try again tries now
        self._loop = asyncio.get_running_loop()
        self._codec = codec_id(self._config.compression)
        #: Records larger than this go in chunks: ``chunk_bytes``, or less when the client's
        #: frames are smaller (a chunk with its head must fit one entry).
        self._chunk_bytes = max(
            1, min(self._config.chunk_bytes, handle.max_entry_bytes - CHUNK_HEAD.size)
        )
        self._batcher: Batcher | None = None
        if self._config.batching:
            what = f"log {named.name!r} writer"
            self._batcher = Batcher(self._config, self._send_batch, self._tasks, what)
        #: The future of the last record appended with batching off (``flush`` waits).
        self._last: asyncio.Future[Position] | None = None
        #: Ledgers rolled away from and not sealed yet (aborted if the log is deleted).
        self._sealing: set[WriteHandle] = set()
        self._deleted = asyncio.Event()  # set once the writer learns the log was deleted
        self._watching = self._tasks.spawn(self._watch_deleted(), "watch the log's node")
        self._ticking = self._tasks.spawn(self._tick_loop(), "roll and retain on a timer")

    @property
    def ledger_id(self) -> int:
        """The ledger appends go to now."""
        return self._handle.ledger_id

    async def append(
        self,
        payload: bytes,
        *,
        key: bytes | None = None,
        properties: Mapping[str, bytes] | None = None,
    ) -> Position:
        """Append one record; its position once an ack quorum has it."""
        future = await self.append_async(payload, key=key, properties=properties)
        return await future

    async def append_async(
        self,
        payload: bytes,
        *,
        key: bytes | None = None,
        properties: Mapping[str, bytes] | None = None,
    ) -> asyncio.Future[Position]:
        """Send one record (pipelined); the future completes with its position.

        Once the writer's ledger was fenced, this raises ``LogNotFoundError`` if the log
        was deleted, else ``LogFencedError`` (another writer took over)."""
        if self._error is not None:
            raise await self._gone(self._error)
        self._check_open()
        if key is None and not properties:  # inline: once per record
            envelope = _PLAIN_HEAD(FORMAT_VERSION, 0, self._clock.wall_ms()) + payload
        else:
            envelope = encode_record(payload, self._clock.wall_ms(), key, properties)
        return await self._append_envelope(envelope)

    async def _append_envelope(self, envelope: bytes) -> asyncio.Future[Position]:
        """Send one record given as its envelope; the future completes with its position."""
        if len(envelope) > self._chunk_bytes:  # a large record: chunks, written alone
            return await self._append_chunks(envelope)
        batcher = self._batcher
        if batcher is None:
            return await self._append_entry(envelope)
        if batcher.full:
            await batcher.room()
            self._check_open()
        future: asyncio.Future[Position] = self._loop.create_future()
        batcher.add(envelope, future)
        return future

    async def append_many(
        self,
        payloads: Sequence[bytes],
        *,
        keys: Sequence[bytes | None] | None = None,
        properties: Sequence[Mapping[str, bytes] | None] | None = None,
    ) -> list[Position]:
        """Append records in order (``keys`` / ``properties``: one per payload, or None);
        their positions once an ack quorum has them. All get the same timestamp. Batching
        on, they fill batches as ``append`` would, and the last one is sent at once (no
        lingering: the call has given all it has); batching off, one entry each."""
        if self._error is not None:
            raise await self._gone(self._error)
        self._check_open()
        count = len(payloads)
        for name, given in (("keys", keys), ("properties", properties)):
            if given is not None and len(given) != count:
                raise ConfigError(f"append_many: {len(given)} {name} for {count} payloads")
        now = self._clock.wall_ms()
        if keys is None and properties is None:
            envelopes = list(map(HEAD.pack(FORMAT_VERSION, 0, now).__add__, payloads))
        else:
            keys_ = keys if keys is not None else [None] * count
            props = properties if properties is not None else [None] * count
            envelopes = [
                encode_record(payload, now, key, prop)
                for payload, key, prop in zip(payloads, keys_, props, strict=True)
            ]
        batcher = self._batcher
        if batcher is None or max(map(len, envelopes), default=0) > self._chunk_bytes:
            futures = [await self._append_envelope(envelope) for envelope in envelopes]
            if batcher is not None:
                batcher.seal()  # the last batch: sent at once
            return list(await asyncio.gather(*futures))
        parts: list[tuple[asyncio.Future[Position], int]] = []
        step = self._config.batch_max_records
        for start in range(0, count, step):
            await batcher.room()
            self._check_open()
            parts += batcher.add_many(envelopes[start : start + step])
        batcher.seal()
        positions: list[Position] = []
        for future, records in parts:
            ledger_id, entry_id, first = await future
            at = zip(repeat(ledger_id), repeat(entry_id), range(first, first + records))
            positions += map(_new_tuple, repeat(Position), at)  # no Python call per record
        return positions

    async def wait_deleted(self) -> LogDeletedError:
        """Wait until the writer learns that its log was deleted (see the module doc); the
        error its appends fail with from then on. Waits for ever if the log stays: cancel it."""
        await self._deleted.wait()
        assert isinstance(self._error, LogDeletedError)
        return self._error

    async def flush(self) -> None:
        """Send the open batch now, and wait until every record appended so far is
        acknowledged; raises the error of the last one if it failed (the others' appenders
        get their own)."""
        if self._batcher is not None:
            self._batcher.seal()
            batch = self._batcher.last
            last = batch.waiters[-1][0] if batch is not None and batch.waiters else None
        else:
            last = self._last
        if last is None:
            return
        await asyncio.wait([last])
        if not last.cancelled() and (exc := last.exception()) is not None:
            raise exc

    async def _append_entry(self, data: bytes | list[bytes]) -> asyncio.Future[Position]:
        """Send ``data`` as the next entry, or a record's chunks as the next entries (in one
        call: nothing comes between them) (batching off); the future gets its position."""
        if self._should_roll():
            await self._roll()
        handle = self._handle
        try:
            if isinstance(data, list):
                inner = await handle.append_many_async(data)
            else:
                inner = await handle.append_async(data)
        except _LEDGER_TAKEN as exc:
            raise await self._gone(exc) from exc
        outer: asyncio.Future[Position] = self._loop.create_future()
        ledger_id = handle.ledger_id

        def done(future: asyncio.Future[int]) -> None:
            if outer.done():
                return
            if future.cancelled():
                outer.cancel()
            elif isinstance(exc := future.exception(), _LEDGER_TAKEN):
                self._fence_explained(exc).add_done_callback(functools.partial(_fail_with, outer))
            elif exc is not None:
                outer.set_exception(exc)
            elif isinstance(self._error, LogDeletedError):  # acknowledged too late
                outer.set_exception(self._error)
            else:
                outer.set_result(Position(ledger_id, future.result()))

        inner.add_done_callback(done)
        self._last = outer
        return outer

    async def _append_chunks(self, envelope: bytes) -> asyncio.Future[Position]:
        """Send a record larger than ``_chunk_bytes`` as its chunks (format 3): consecutive
        entries of the current ledger, after every record appended before it (the open batch
        is sent first) and before any after it; the future gets its last chunk's position
        once every chunk is acknowledged. Refused before anything is written when it is too
        large (``RECORD_BYTES_MAX``) or has more chunks than the client may have in flight."""
        chunks = encode_chunks(envelope, self._chunk_bytes)
        in_flight = self._handle.pending_adds_max
        if len(chunks) > in_flight:
            raise ConfigError(
                f"a record of {len(envelope)} bytes makes {len(chunks)} chunks of "
                f"{self._chunk_bytes} bytes, more than the client's pending_adds_max "
                f"({in_flight}): raise chunk_bytes or pending_adds_max"
            )
        batcher = self._batcher
        if batcher is None:
            return await self._append_entry(chunks)
        await batcher.room()
        self._check_open()
        future: asyncio.Future[Position] = self._loop.create_future()
        batcher.add_alone(chunks, future)
        return future

    async def _send_batch(self, batch: Batch) -> None:
        """Write a sealed batch as the next entry (the batcher's sender calls this, a batch
        at a time, in order); its waiters get their positions once it is acknowledged."""
        if self._error is not None:
            raise await self._gone(self._error)
        if self._should_roll():
            await self._roll()
        handle = self._handle
        envelopes = batch.envelopes
        try:
            if batch.chunks:  # a large record's chunks, in one call: nothing between them
                inner = await handle.append_many_async(batch.chunks)
            elif len(envelopes) == 1 and self._codec == CODEC_NONE:
                inner = await handle.append_async(envelopes[0])  # alone: a format-1 entry
            else:
                inner = await handle.append_async(encode_batch(envelopes, self._codec))
        except _LEDGER_TAKEN as exc:
            raise await self._gone(exc) from exc
        inner.add_done_callback(functools.partial(self._batch_done, batch, handle.ledger_id))

    def _batch_done(self, batch: Batch, ledger_id: int, future: asyncio.Future[int]) -> None:
        if future.cancelled():
            batch.cancel()
        elif isinstance(exc := future.exception(), _LEDGER_TAKEN):
            self._fence_explained(exc).add_done_callback(functools.partial(_fail_batch, batch))
        elif exc is not None:
            batch.fail(exc)
        elif isinstance(self._error, LogDeletedError):  # acknowledged too late
            batch.fail(self._error)
        else:
            batch.complete(ledger_id, future.result())

    async def close(self) -> None:
        """Seal the current ledger (pending appends complete first). Raises
        ``LogDeletedError`` when the log was deleted under the writer."""
        if self._closed:
            return
        self._closed = True
        self._closing.set()
        # A tick under way ends first (the timer starts no other): a roll it began would
        # otherwise list a ledger that nobody closes.
        await asyncio.wait([self._ticking])
        try:
            if self._batcher is not None:
                await self._batcher.drain()
            await self._handle.close()
        except _LEDGER_TAKEN as exc:
            raise await self._gone(exc) from exc
        finally:
            self._watching.cancel()
            self._ticking.cancel()
            await self._tasks.wait_idle()
            await self._tasks.aclose()
        if isinstance(self._error, LogDeletedError):
            raise self._error

    async def __aenter__(self) -> LogWriter:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _check_open(self) -> None:
        if self._error is not None:
            raise self._error
        if self._closed:
            raise LogError(f"the writer of log {self._log.name!r} is closed")

    def _fenced(self, cause: BaseException, unexplained: BaseException | None = None) -> LogError:
        """The error of appends that were in flight when the ledger was fenced: ``cause`` is
        the fence; ``unexplained``, why the metadata could not say who fenced it."""
        if self._error is None:
            which = (
                "" if unexplained is None else f"; the metadata could not say which: {unexplained}"
            )
            self._error = LogFencedError(
                f"log {self._log.name!r}: this writer was fenced: another writer took over, "
                f"or the log was deleted ({cause}){which}"
            )
        return self._error

    def _fence_explained(self, cause: BaseException) -> asyncio.Future[LogError]:
        """Why this writer was fenced (the error of every append that failed for it), asked
        of the metadata once, in the background."""
        if self._explaining is None:
            if self._tasks.closed:  # the writer is closed: no asking any more
                done: asyncio.Future[LogError] = asyncio.get_running_loop().create_future()
                done.set_result(self._fenced(cause))
                return done
            self._explaining = self._tasks.spawn(self._explain(cause), "explain a fence")
        return self._explaining

    async def _explain(self, cause: BaseException) -> LogError:
        try:
            return await self._gone(cause)
        except BKeeperError as exc:  # the metadata cannot say: the fence is all we know
            return self._fenced(cause, unexplained=exc)

    async def _gone(self, cause: BaseException) -> LogError:
        """Why this writer can append no more, its ledger fenced or gone: the log was
        deleted, or another writer took over (asked of the metadata once). While the log
        still lists this writer's ledger last, whoever fenced it has yet to change the list
        (a delete seals first): the writer waits up to ``FENCE_EXPLAIN_WAIT_S`` for that."""
        if self._error is None or not self._error_explained:
            self._error_explained = True
            store, name = self._context.store, self._log.name
            try:
                meta, version = await store.read(name)
                if isinstance(cause, LedgerFencedError) and self._lists_last(meta):
                    await store.wait_change(name, version, FENCE_EXPLAIN_WAIT_S)
                    meta, version = await store.read(name)
            except LogNotFoundError:
                return await self._mark_deleted(str(cause))
            if isinstance(self._error, LogDeletedError):
                return self._error  # the watch learnt it meanwhile
            if self._lists_last(meta):
                self._error = LogFencedError(
                    f"log {name!r}: this writer's ledger {self._handle.ledger_id} was taken "
                    f"from it, and the log still lists it last ({cause})"
                )
            else:
                self._error = LogFencedError(f"log {name!r}: another writer took over ({cause})")
        assert self._error is not None
        return self._error

    def _lists_last(self, meta: LogMetadata) -> bool:
        """Whether ``meta`` still lists this writer's ledger last, under no newer term."""
        last = meta.ledgers[-1].ledger_id if meta.ledgers else None
        return last == self._handle.ledger_id and not self._overtaken(meta)

    async def _mark_deleted(self, how: str) -> LogDeletedError:
        """The log was deleted: the writer fails for good with ``LogDeletedError``. Set
        before any wait, so that no acknowledgement reported from now on counts; then the
        records not sent yet and the ledgers' pending adds fail with it."""
        error = self._error
        if isinstance(error, LogDeletedError):
            return error
        error = LogDeletedError(
            f"log {self._log.name!r} was deleted while this writer was open ({how})"
        )
        self._error = error
        self._error_explained = True
        self._deleted.set()
        log.debug("%s", error)  # the appenders get it
        if self._batcher is not None:
            self._batcher.abort(error)
        for handle in (self._handle, *self._sealing):
            await handle.abort(error)
        return error

    async def _watch_deleted(self) -> None:
        """Learn that the log was deleted from its node's watch, and fail the writer then."""
        try:
            await self._context.store.wait_deleted(self._log.name)
        except MetadataClosedError:
            return  # the client is closing
        except BKeeperError as exc:
            log.warning(
                "log %s: cannot watch its node (%s): a deletion is found at the next fence, "
                "roll or metadata error instead",
                self._log.name,
                exc,
            )
            return
        await self._mark_deleted("its node was deleted")

    def _should_roll(self) -> bool:
        """The current ledger is full, or holds entries and is ``roll_age_ms`` old."""
        now = self._clock.monotonic()
        if self._roll_failures and now < self._roll_again_at:
            return False
        handle = self._handle
        return roll_due(
            self._config,
            length_bytes=handle.length,
            has_entries=handle.last_add_pushed >= 0,
            age_s=now - self._opened_at,
        )

    async def _tick_loop(self) -> None:
        """Run :meth:`tick` every ``_tick_s()`` by the logs' clock, until the writer closes
        or fails."""
        due = self._clock.monotonic() + self._tick_s()
        while True:
            with contextlib.suppress(TimeoutError):
                await within(self._closing.wait(), TIMER_POLL_S)
            if self._closing.is_set() or self._error is not None:
                return
            if self._clock.monotonic() >= due:
                try:
                    await self.tick()
                except MetadataClosedError as exc:  # its client closed: no tick can succeed
                    log.info("log %s: the writer's timer stops: %s", self._log.name, exc)
                    return
                due = self._clock.monotonic() + self._tick_s()

    def _tick_s(self) -> float:
        return tick_s(self._config)

    async def tick(self) -> None:
        """The timer's work, once (see the module doc): pick up changed settings, roll an
        idle ledger past its age, run retention. Errors are logged (once per error) and kept
        in ``timer_error``, not raised, but for ``MetadataClosedError``: the writer's client
        was closed (the timer loop stops on it)."""
        try:
            meta, _version = await self._context.store.read(self._log.name)
            self._take_settings(meta)
            if self._should_roll():
                await self._roll()  # retains too, and notes how that went
                return
            await self._retention_pass(meta)
        except LogNotFoundError:
            return  # deleted: the node's watch fails the writer with LogDeletedError
        except MetadataClosedError:
            raise  # the client was closed under the writer: the timer stops
        except BKeeperError as exc:
            if self._error is None:
                self._note(str(exc))
            return
        self._note(None)

    def _take_settings(self, meta: LogMetadata) -> None:
        """Use the log's settings in ``meta`` from now on, if they changed."""
        if meta.config_text == self._config_text:
            return
        config = self._log.config_of(meta)  # ConfigError: kept as they were
        self._config, self._config_text = config, meta.config_text
        log.info(
            "log %s: the writer follows the log's changed settings (%s)",
            self._log.name,
            meta.config_text or "none set",
        )

    def _note(self, problem: str | None) -> None:
        """Keep the timer's or retention's last error; log it when it changes."""
        if problem == self.timer_error:
            return
        if problem is not None:
            log.warning("log %s: %s (tried again at the next tick)", self._log.name, problem)
        else:
            log.info("log %s: the writer's timer and retention work again", self._log.name)
        self.timer_error = problem

    async def retain(self, meta: LogMetadata | None = None) -> int:
        """One retention pass over ``meta`` (default: the list as this writer last wrote
        it), deleting only sealed ledgers (never the current one or one being sealed); the
        number deleted. Errors are logged once and kept in ``timer_error``, not raised."""
        try:
            deleted = await self._retention_pass(meta or self._meta)
        except BKeeperError as exc:
            self._note(str(exc))
            return 0
        self._note(None)
        return deleted

    async def _retention_pass(self, meta: LogMetadata) -> int:
        if not retention_on(self._config):
            return 0
        mine = {self._handle.ledger_id} | {handle.ledger_id for handle in self._sealing}
        limit = next((i for i, x in enumerate(meta.ledgers) if x.ledger_id in mine), None)
        if limit is None:
            return 0  # this writer's ledger is not listed: another writer took over
        deleted = await self._log.retain(meta, self._config, limit)
        if deleted:
            log.debug("log %s: retention deleted %d ledgers", self._log.name, deleted)
            meta, version = await self._context.store.read(self._log.name)
            if version > self._version:  # a roll meanwhile may have read a newer one
                self._meta, self._version = meta, version
        return deleted

    async def _roll(self) -> None:
        async with self._roll_lock:
            if not self._should_roll():
                return  # another append rolled while this one waited
            old = self._handle
            bk, store, name = self._context.bk, self._context.store, self._log.name
            try:
                new = await create_ledger(bk, self._config)
            except NotEnoughBookiesError as exc:
                if not old.writable:
                    raise
                self._roll_postponed(exc)
                return

            async def attempt(snapshot: tuple[LogMetadata, int]) -> tuple[LogMetadata, int]:
                meta, version = snapshot
                if not meta.ledgers or meta.ledgers[-1].ledger_id != old.ledger_id:
                    raise self._fenced(RuntimeError("the ledger list moved on"))
                if self._overtaken(meta):
                    raise self._fenced(
                        RuntimeError(f"term {meta.writer_term} overtook term {self.term}")
                    )
                new_meta = meta.with_ledger(new.ledger_id, self._clock.wall_ms())
                return new_meta, await store.write(name, new_meta, version)

            try:
                self._meta, self._version = await cas_update(
                    lambda: store.read(name),
                    attempt,
                    what=f"log {name!r}: could not roll",
                    attempts_max=self._config.metadata_retries_max,
                    current=(self._meta, self._version),
                )
            except BKeeperError as exc:
                went_in = await self._roll_outcome(new, exc)
                if went_in is None:
                    raise
                self._meta, self._version = went_in
            self._handle = new
            self._opened_at = self._clock.monotonic()
            log.debug("log %s: rolled from ledger %d to %d", name, old.ledger_id, new.ledger_id)
            if self._roll_failures:
                log.info(
                    "log %s: rolled to ledger %d after %d tries that found too few bookies",
                    name,
                    new.ledger_id,
                    self._roll_failures,
                )
                self._roll_failures = 0
            self._sealing.add(old)
            self._tasks.spawn(self._seal(old), f"seal ledger {old.ledger_id}")
        await self.retain()

    def _roll_postponed(self, error: NotEnoughBookiesError) -> None:
        """A roll found too few bookies for a new ledger: write on to the current one, and
        try again after ``ROLL_RETRY_PAUSE_S`` (module doc)."""
        self._roll_failures += 1
        self._roll_again_at = self._clock.monotonic() + ROLL_RETRY_PAUSE_S
        if self._roll_failures == 1:
            log.warning(
                "log %s: cannot roll to a new ledger (%s): writing on to ledger %d, trying "
                "again every %.0f s",
                self._log.name,
                error,
                self._handle.ledger_id,
                ROLL_RETRY_PAUSE_S,
            )

    async def _roll_outcome(
        self, new: WriteHandle, error: BKeeperError
    ) -> tuple[LogMetadata, int] | None:
        """A roll's compare-and-set failed with ``error``, which may be a write ZooKeeper
        applied whose answer was lost (a ConnectionLoss): the list is read to tell. Listed
        last, under no newer term: the roll went in, and the metadata read is returned.
        Not listed: ``new`` is deleted, and None. Listed behind another writer's ledger, or
        the list unreadable: None, and ``new`` is kept (a later writer seals a listed one;
        deleting it would leave the list naming a ledger that is gone)."""
        store, name = self._context.store, self._log.name
        try:
            meta, version = await store.read(name)
        except LogNotFoundError:
            await discard_ledger(self._context.bk, new)
            raise await self._mark_deleted(f"found at a roll: {error}") from error
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
            await discard_ledger(self._context.bk, new)
            return None
        if index == len(meta.ledgers) - 1 and not self._overtaken(meta):
            log.info(
                "log %s: the roll to ledger %d went in (its answer was lost: %s)",
                name,
                new.ledger_id,
                error,
            )
            return meta, version
        return None

    def _overtaken(self, meta: LogMetadata) -> bool:
        """Whether a writer of a newer term has claimed the log."""
        return overtaken(self.term, meta.writer_term)

    async def _seal(self, handle: WriteHandle) -> None:
        """Seal a ledger rolled away from, trying again while the metadata store is away:
        readers cannot pass it before (its end is not known). Once this writer closes it is
        left to the log's next writer (:meth:`NamedLog.seal_unsealed`)."""
        try:
            await seal_until_closed(handle, self._closing, self._log.name)
        finally:
            self._sealing.discard(handle)


def _fail_with(outer: asyncio.Future[Position], explained: asyncio.Future[LogError]) -> None:
    """Fail an append's future with the explained fence (unless it is done already)."""
    if outer.done():
        return
    if explained.cancelled():
        outer.cancel()
    else:
        outer.set_exception(explained.result())


def _fail_batch(batch: Batch, explained: asyncio.Future[LogError]) -> None:
    """Fail a batch's waiters with the explained fence."""
    if explained.cancelled():
        batch.cancel()
    else:
        batch.fail(explained.result())
