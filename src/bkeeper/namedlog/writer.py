"""The writer of a named log: appends records to the log's last ledger, rolls, retains.

:meth:`NamedLog.open_writer <bkeeper.namedlog.logs.NamedLog.open_writer>` makes one after
fencing the previous writer. Appends go to the current ledger; the writer is composed of
three owned parts, each with its module:

- :mod:`~bkeeper.namedlog.writer_roll` (:class:`Roller`): the roll to a new ledger once the
  current one is full or old, listed by compare-and-set; the old one sealed in the background;
  a roll that finds too few bookies postponed (``ROLL_RETRY_PAUSE_S``);
- :mod:`~bkeeper.namedlog.writer_timer` (:class:`WriterTimer`): the timer (changed settings
  picked up, an idle ledger past its age rolled, retention run; its last error in
  :attr:`LogWriter.timer_error`) and the retention passes (also when the writer opens and
  at each roll);
- :mod:`~bkeeper.namedlog.writer_end` (:class:`WriterEnd`): why the writer can append no
  more (fenced by another writer, or its log deleted: then every later append and every one
  not acknowledged by then fails with :class:`~bkeeper.common.errors.LogDeletedError`), and
  the watch on the log's node that learns of a deletion.

Record batching (``LogConfig.batching``): records gather into batches
(:mod:`bkeeper.namedlog.batching`), each batch written as one entry in the record batch format
(:mod:`bkeeper.namedlog.core.records`; a batch of one record, uncompressed, as a format-1 entry);
each record's position is ``(ledger, entry, index in the batch)``. Batching off, each record
is an entry of its own (format 1). A record larger than ``chunk_bytes`` goes in chunks
(format 3, :mod:`bkeeper.namedlog.core.chunks`).

The hot path (``append_async``, ``_append_envelope``, ``_append_entry``, ``_send_batch``)
checks one attribute for the end (``_error``, kept by :class:`WriterEnd`).

Background work (sealing rolled-away ledgers, explaining a fence, sending batches, watching
the log's node, the timer) runs on the writer's :class:`~bkeeper.common.tasks.TaskOwner`;
``close`` stops the watch, waits for the rest to end, then closes it.
Time comes from the logs' :class:`~bkeeper.common.clock.Clock`.

Limits: ``metadata_retries_max`` lost compare-and-sets per roll; ``TASKS_MAX`` background tasks;
``SEALED_BATCHES_MAX`` batches waiting to be sent (appenders wait meanwhile).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Mapping, Sequence
from itertools import repeat

from bkeeper.client.write_handle import WriteHandle
from bkeeper.common.errors import ConfigError, LogDeletedError, LogError
from bkeeper.common.tasks import TaskOwner
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
from bkeeper.namedlog.handle import LogHandle
from bkeeper.namedlog.writer_end import (
    LEDGER_TAKEN,
    WriterEnd,
    fail_batch,
    fail_with,
)
from bkeeper.namedlog.writer_roll import ROLL_RETRY_PAUSE_S, Roller
from bkeeper.namedlog.writer_timer import TIMER_POLL_S, WriterTimer

#: The writer's limits stay importable from here (tests and callers name them so).
__all__ = ["ROLL_RETRY_PAUSE_S", "TIMER_POLL_S", "LogWriter"]

_PLAIN_HEAD = HEAD.pack
_new_tuple = tuple.__new__


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
        self._handle = handle
        self._meta = meta
        self._version = version
        #: The leadership term this writer was opened with (None: none).
        self.term = term
        self._clock = named.context.clock
        self._tasks = TaskOwner(f"log {named.name!r} writer", error=LogError)
        #: Why the writer can append no more (None: it can); kept by ``_end``.
        self._error: LogError | None = None
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
        self._end = WriterEnd(self)
        self._roller = Roller(self)
        self._timer = WriterTimer(self, meta.config_text)
        self._watching = self._tasks.spawn(self._end.watch_deleted(), "watch the log's node")
        self._ticking = self._tasks.spawn(self._timer.run(), "roll and retain on a timer")

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
            raise await self._end.gone(self._error)
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
            raise await self._end.gone(self._error)
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
        """Wait until the writer learns that its log was deleted (see
        :mod:`~bkeeper.namedlog.writer_end`); the error its appends fail with from then on.
        Waits for ever if the log stays: cancel it."""
        return await self._end.wait_deleted()

    async def tick(self) -> None:
        """The timer's work, once (:mod:`~bkeeper.namedlog.writer_timer`): pick up changed
        settings, roll an idle ledger past its age, run retention. Errors are logged (once per
        error) and kept in ``timer_error``, not raised, but for ``MetadataClosedError``: the
        writer's client was closed (the timer loop stops on it)."""
        await self._timer.tick()

    async def retain(self, meta: LogMetadata | None = None) -> int:
        """One retention pass over ``meta`` (default: the list as this writer last wrote
        it), deleting only sealed ledgers (never the current one or one being sealed); the
        number deleted. Errors are logged once and kept in ``timer_error``, not raised."""
        return await self._timer.retain(meta)

    @property
    def timer_error(self) -> str | None:
        """The last error of the timer's work or of retention (None: the last pass went well)."""
        return self._timer.error

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
        if self._roller.should_roll():
            await self._roller.roll()
        handle = self._handle
        try:
            if isinstance(data, list):
                inner = await handle.append_many_async(data)
            else:
                inner = await handle.append_async(data)
        except LEDGER_TAKEN as exc:
            raise await self._end.gone(exc) from exc
        outer: asyncio.Future[Position] = self._loop.create_future()
        ledger_id = handle.ledger_id

        def done(future: asyncio.Future[int]) -> None:
            if outer.done():
                return
            if future.cancelled():
                outer.cancel()
            elif isinstance(exc := future.exception(), LEDGER_TAKEN):
                self._end.fence_explained(exc).add_done_callback(
                    functools.partial(fail_with, outer)
                )
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
            raise await self._end.gone(self._error)
        if self._roller.should_roll():
            await self._roller.roll()
        handle = self._handle
        envelopes = batch.envelopes
        try:
            if batch.chunks:  # a large record's chunks, in one call: nothing between them
                inner = await handle.append_many_async(batch.chunks)
            elif len(envelopes) == 1 and self._codec == CODEC_NONE:
                inner = await handle.append_async(envelopes[0])  # alone: a format-1 entry
            else:
                inner = await handle.append_async(encode_batch(envelopes, self._codec))
        except LEDGER_TAKEN as exc:
            raise await self._end.gone(exc) from exc
        inner.add_done_callback(functools.partial(self._batch_done, batch, handle.ledger_id))

    def _batch_done(self, batch: Batch, ledger_id: int, future: asyncio.Future[int]) -> None:
        if future.cancelled():
            batch.cancel()
        elif isinstance(exc := future.exception(), LEDGER_TAKEN):
            self._end.fence_explained(exc).add_done_callback(functools.partial(fail_batch, batch))
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
        except LEDGER_TAKEN as exc:
            raise await self._end.gone(exc) from exc
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
