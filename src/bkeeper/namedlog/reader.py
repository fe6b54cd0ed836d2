"""The reader of a named log: reads sealed ledgers in order, then tails the open one.

:meth:`NamedLog.open_reader <bkeeper.namedlog.logs.NamedLog.open_reader>` makes one. It reads
sealed ledgers in order, then tails the open one with long-poll LAC reads, never fencing; it
notices a roll or a new writer when the ledger it tails is closed or gets a successor,
re-reading the list at least every ``tail_poll_ms``; past the last ledger it waits for the
list to grow on a watch of the log's metadata node (a ledger appended whole, as the Spark
sink commits, is seen at once). A reader left behind by truncation skips to the earliest
record still there; one that finds a listed ledger gone (deleted while listed: nothing of
bkeeper's does that) says so and reads on after it. Where it starts (earliest, latest, a
time) and which ledger a position falls in are the walk's (:mod:`bkeeper.namedlog.walk`): a
reader reads up to the LAC of the open ledger, as the walk's spans do.

Entries holding record batches are unpacked (:func:`~bkeeper.namedlog.core.records.decode_entry`):
the reader returns their records one by one; a start ``(L, E, I)`` skips the records of entry
E before index I. ``position``, after a record, is the next record's in its entry, or
``(L, E + 1)`` after an entry's last record.

Large records (format 3, :mod:`bkeeper.namedlog.core.chunks`): the entries of each ledger go
through a :class:`~bkeeper.namedlog.core.chunks.Reassembly`, which returns a chunked record whole,
at its last chunk's position. A start inside a chunked record (any chunk but the first) reads
that record from its first chunk (its position is at or after the start). A record a reader
cannot put together (its writer stopped between chunks: the ledger ends before its last
chunk; chunks out of place) is skipped with a warning and counted in ``incomplete_records``,
never returned in part.

Limits: ``tail_poll_ms`` per long poll; one batch read's worth of records buffered; one
chunked record in progress (at most ``RECORD_BYTES_MAX`` bytes).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
from collections.abc import AsyncIterator

from bkeeper.client.read_handle import ReadHandle
from bkeeper.common.errors import (
    BKeeperError,
    ConfigError,
    LedgerNotFoundError,
    SessionExpiredError,
)
from bkeeper.common.loop import await_chain
from bkeeper.meta.ledger_metadata import LedgerState
from bkeeper.namedlog.core.chunks import Incomplete, Reassembly, whole_records
from bkeeper.namedlog.core.config import EARLIEST, LATEST
from bkeeper.namedlog.core.log_metadata import LogMetadata
from bkeeper.namedlog.core.records import CHUNK_FORMAT_VERSION, Position, Record, decode_entry
from bkeeper.namedlog.core.spans import earliest, locate
from bkeeper.namedlog.handle import LogHandle

__all__ = ["LogReader", "open_reader"]

log = logging.getLogger(__name__)

_new_tuple = tuple.__new__


class LogReader:
    """An async iterator of :class:`Record`; see the module docstring. ``close`` ends it."""

    def __init__(self, named: LogHandle, start: str | Position | int) -> None:
        if not isinstance(start, Position | int) and start not in (EARLIEST, LATEST):
            raise ConfigError(f"reader start {start!r}: use earliest, latest, a position or ms")
        self._log = named
        self._context = named.context
        self._config = named.context.config
        self._start = start
        self._records: AsyncIterator[list[Record]] | None = None
        self._pending: asyncio.Future[list[Record]] | None = None
        #: Records read but not returned yet (one batch read's worth at most).
        self._buffer: collections.deque[Record] = collections.deque()
        self._closed = False
        self._first: Position | None = None
        self._first_meta: LogMetadata | None = None
        #: The version of the log metadata ``_meta`` read last.
        self._version = -1
        #: Ledgers skipped because truncation removed them before this reader got there.
        self.skipped_ledgers = 0
        #: Ledgers skipped because they were gone while the log still listed them (deleted
        #: by mistake: nothing of bkeeper's deletes a listed ledger).
        self.lost_ledgers = 0
        #: Chunked records skipped because they could not be put together (see the module
        #: docstring); each is logged as a warning.
        self.incomplete_records = 0
        #: The position after the last record returned.
        self.position: Position | None = None

    async def seek(self) -> Position:
        """Fix the starting point now (``open_reader`` does); the first position to read."""
        if self._first is None:
            self._first_meta = await self._meta()
            self._first = await self._starting_point(self._first_meta)
        return self._first

    def __aiter__(self) -> LogReader:
        return self

    def _next_task(self) -> asyncio.Future[list[Record]]:
        """The read of the next batch of records, shared by every caller until it completes
        (so a caller that times out or is cancelled never breaks the reader)."""
        if self._pending is None:
            if self._records is None:
                self._records = self._run()
            records = self._records
            self._pending = asyncio.ensure_future(records.__anext__())
            self._pending.add_done_callback(functools.partial(self._read_done, records))
        return self._pending

    def _read_done(
        self, records: AsyncIterator[list[Record]], task: asyncio.Future[list[Record]]
    ) -> None:
        """A read that raised (an error trying again does not cure) ended its generator:
        the caller gets the error, and the next call starts a new one, from the record
        after the last one returned, instead of finding the reader spent."""
        if task.cancelled() or self._records is not records:
            return
        error = task.exception()
        if error is not None and not isinstance(error, StopAsyncIteration):
            self._records = None

    def _take(self) -> Record:
        buffer = self._buffer
        record = buffer.popleft()
        ledger_id, entry_id, index = record.position
        if buffer and buffer[0].position[:2] == (ledger_id, entry_id):
            self.position = _new_tuple(Position, (ledger_id, entry_id, index + 1))
        else:  # the buffer holds whole entries (past the start): its entry's last record
            self.position = _new_tuple(Position, (ledger_id, entry_id + 1, 0))
        return record

    async def __anext__(self) -> Record:
        if self._closed:
            raise StopAsyncIteration
        while not self._buffer:
            task = self._next_task()
            try:
                batch = await asyncio.shield(task)
            finally:
                if task.done():
                    self._pending = None
            self._buffer.extend(batch)
        return self._take()

    def describe(self) -> str:
        """Where this reader stands, for a log line: the position after the last record it
        returned and, while a read is under way, where that read waits (innermost last)."""
        pending = self._pending
        chain = [] if pending is None else await_chain(pending)
        read = "no read under way" if not chain else "its read waits in " + "; ".join(chain[-8:])
        return f"at {self.position} (started at {self._first}), {read}"

    def next_buffered(self) -> Record | None:
        """The next record if it was read already (None: reading is needed, or closed)."""
        if self._buffer and not self._closed:
            return self._take()
        return None

    async def next(self, timeout_s: float | None = None) -> Record | None:
        """The next record, or None when none comes within ``timeout_s`` (the read goes
        on, and a later call gets its record)."""
        if self._buffer and not self._closed:  # read already: no deadline needed
            return self._take()
        clock = self._context.clock
        deadline = None if timeout_s is None else clock.monotonic() + timeout_s
        while not self._buffer:
            if self._closed:
                return None
            task = self._next_task()
            wait = None if deadline is None else max(0.0, deadline - clock.monotonic())
            done, _ = await asyncio.wait({task}, timeout=wait)
            if not done:
                return None
            self._pending = None
            try:
                self._buffer.extend(task.result())
            except StopAsyncIteration:
                return None
        return self._take()

    async def close(self) -> None:
        self._closed = True
        self._buffer.clear()
        if self._pending is not None:
            self._pending.cancel()
            with contextlib.suppress(BaseException):
                await self._pending
            self._pending = None
        if self._records is not None:
            records, self._records = self._records, None
            with contextlib.suppress(BaseException):
                await records.aclose()  # type: ignore[attr-defined]

    # -- the tailing state machine -----------------------------------------------------
    async def _meta(self) -> LogMetadata:
        meta, self._version = await self._context.store.read(self._log.name)
        return meta

    async def _starting_point(self, meta: LogMetadata) -> Position:
        start, walk = self._start, self._context.walk
        if start == EARLIEST or not meta.ledgers:
            return earliest(meta)
        if isinstance(start, Position):
            return start
        if start == LATEST:
            return await walk.latest(meta)
        assert isinstance(start, int)
        return await walk.position_at(meta, start)

    async def _run(self) -> AsyncIterator[list[Record]]:
        """Tail from the starting point in batches, riding out store and bookie failures
        that may pass (session expiry, lost connections, unavailable bookies) from the last
        record read."""
        position = await self.seek()
        # After an error ended the previous run (``_read_done``): on from the last record
        # returned, with the log's metadata read again.
        meta, self._first_meta = self._first_meta, None
        if self.position is not None:
            position = max(position, self.position)
        while not self._closed:
            try:
                async for batch in self._tail(position, meta):
                    yield batch
                return
            except BKeeperError as exc:
                if not (exc.retriable or isinstance(exc, SessionExpiredError)):
                    raise
                log.info("log %s: reader retrying after: %s", self._log.name, exc)
                await asyncio.sleep(self._config.tail_poll_ms / 1000.0)
                # The generator runs only once the buffer is empty, so the position after
                # the last record returned is also the one after the last record fetched.
                if self.position is not None:
                    position = max(position, self.position)
                meta = None

    async def _tail(
        self, position: Position, meta: LogMetadata | None
    ) -> AsyncIterator[list[Record]]:
        config = self._config
        if meta is None:
            meta = await self._meta()
        # Chunks of the ledger being read; new on each run (a run after an error starts after
        # the last record returned, which may be inside a chunked record: it reads back).
        chunks: Reassembly | None = None
        while not self._closed:
            index = locate(meta, position)
            if index is None:  # past the last ledger: wait for the list to grow
                await self._context.store.wait_change(
                    self._log.name, self._version, config.tail_poll_ms / 1000.0
                )
                meta = await self._meta()
                continue
            ledger_id = meta.ledgers[index].ledger_id
            if ledger_id != position.ledger_id:
                position = Position(ledger_id, 0)
            if chunks is None or chunks.ledger_id != ledger_id:
                if chunks is not None:
                    chunks.end(f"the reader moved on to ledger {ledger_id} before its last chunk")
                chunks = Reassembly(ledger_id, self._incomplete)
            handle = await self._context.walk.open(ledger_id)
            if handle is None:  # deleted under us
                meta = await self._meta()
                if meta.index_of(ledger_id) is None:  # truncation passed this reader
                    self.skipped_ledgers += 1
                else:  # still listed (truncation unlists first): it is gone for good
                    self.lost_ledgers += 1
                    log.warning(
                        "log %s: ledger %d is listed but gone (deleted while the log lists "
                        "it); whatever it held is lost: reading on after it",
                        self._log.name,
                        ledger_id,
                    )
                position = Position(ledger_id + 1, 0)
                continue
            if handle.is_closed:
                async for batch in self._read(handle, position, chunks):
                    yield batch
                chunks.end(f"ledger {ledger_id} ends before its last chunk (its writer stopped)")
                position = Position(ledger_id + 1, 0)
                continue
            # The ledger is open: tail it until it is sealed, rolled away from or deleted.
            # (The handle follows the ledger's metadata meanwhile: see bkeeper.client.follow.)
            try:
                lac = await handle.read_last_add_confirmed()
                while not self._closed:
                    if position.entry_id <= lac:
                        async for batch in self._read(handle, position, chunks, lac):
                            yield batch
                        position = Position(ledger_id, lac + 1)
                    rolled = meta.index_of(ledger_id) != len(meta.ledgers) - 1
                    wait_ms = min(config.tail_poll_ms, 50) if rolled else config.tail_poll_ms
                    new_lac = await handle.wait_last_add_confirmed(lac, wait_ms)
                    if new_lac > lac:
                        lac = new_lac
                        continue
                    # Quiet: did the writer roll, or a new writer seal this ledger?
                    meta = await self._meta()
                    if meta.index_of(ledger_id) != len(meta.ledgers) - 1:
                        break
                    try:
                        state = (await self._context.bk.ledger_metadata(ledger_id)).state
                    except LedgerNotFoundError:
                        break
                    if state is LedgerState.CLOSED:
                        break
            finally:
                await handle.close()  # ends its metadata watch

    def _incomplete(self, skipped: Incomplete) -> None:
        self.incomplete_records += 1
        log.warning("log %s: %s", self._log.name, skipped)

    async def _read(
        self, handle: ReadHandle, start: Position, chunks: Reassembly, last: int | None = None
    ) -> AsyncIterator[list[Record]]:
        """Records from ``start`` to entry ``last`` of the ledger (``last``: its LAC or last
        entry), a batch read at a time; never an empty list. Chunks go through ``chunks``
        (the ledger's reassembly; fresh: the start may be inside a chunked record)."""
        first, skip = start.entry_id, start.index
        end = handle.last_add_confirmed if last is None else last
        if first > end:
            return
        ledger_id = handle.ledger_id
        async for entries in handle.read_batches(first, end):
            batch: list[Record] = []
            for e in entries:
                payload = e.payload
                if (not payload or payload[0] != CHUNK_FORMAT_VERSION) and chunks.idle:
                    batch += decode_entry(payload, ledger_id, e.entry_id)
                    continue
                if chunks.fresh and e.entry_id == first:  # a start inside a chunked record
                    earlier = chunks.first_chunk(e.entry_id, payload)
                    if earlier is not None:
                        async for old in handle.read(earlier, e.entry_id - 1):
                            chunks.feed(old.entry_id, old.payload)
                whole = chunks.feed(e.entry_id, payload)
                if whole is not None:
                    batch += whole_records(whole, ledger_id)
            if skip:  # the start lies inside the first entry's batch
                batch = [
                    r for r in batch if r.position.entry_id != first or r.position.index >= skip
                ]
                skip = 0
            if batch:
                yield batch


async def open_reader(named: LogHandle, start: str | Position | int) -> LogReader:
    """A reader of ``named`` from ``start`` (see :meth:`NamedLog.open_reader
    <bkeeper.namedlog.logs.NamedLog.open_reader>`), its starting point fixed."""
    reader = LogReader(named, start)
    await reader.seek()
    return reader
