"""Durable subscriptions on named logs: consumers that resume where the subscription left off.

:meth:`NamedLog.subscribe <bkeeper.namedlog.logs.NamedLog.subscribe>` returns a
:class:`Consumer` of a subscription (created at ``start`` the first time). The subscription's
state (:class:`~bkeeper.namedlog.core.subscription_state.SubscriptionState`) lives in the
metadata store
under the log's node; a consumer reads from after its mark, passing over records acked out of
order, so a consumer that restarts (or crashes) gets again every record it had not
acknowledged, and none it had.

**Exclusive.** One consumer at a time: taking the subscription creates its ephemeral ``owner``
node (held by the consumer's metadata session) and raises its ``epoch`` by compare-and-set. A
second consumer is refused (``SubscriptionBusyError``) or, with ``wait_s``, stands by until the
owner node goes (the owner closed, or its session expired) and then takes over. Acks are
written with the consumer's epoch: once another took over, they are refused
(``SubscriptionFencedError``), so a consumer that was paused past its session cannot move the
subscription of the one that replaced it.

**Acks.** :meth:`Consumer.ack` (cumulative: this record and every one before it) and
:meth:`Consumer.ack_individual` cost no I/O: they are gathered and written, merged into the
stored state by compare-and-set, at most every ``ack_flush_ms`` (and by :meth:`Consumer.flush`
and :meth:`Consumer.close`). An ack is durable once the flush after it returned; a consumer
that crashes loses the acks of its last ``ack_flush_ms`` at most, and those records are
delivered again (at-least-once). Call ``flush()`` where that matters.

**Batches.** Records of a batch (:mod:`bkeeper.namedlog.core.records`) are delivered and
acknowledged one by one, at their own positions ``(L, E, I)``. The state needs to know how
many records a batch holds to tell when all are acknowledged: the consumer remembers it for
the batches its reader went through (at most ``ENTRY_COUNTS_MAX``), and reads the entry for
an ack of a position it did not (an operator's ``ack_up_to``).

**Large records.** A chunked record (:mod:`bkeeper.namedlog.core.chunks`) is delivered whole, at
its last chunk's position; acknowledging it acknowledges every one of its chunks (a cumulative
ack covers them, being at the last; an individual ack is written for each chunk entry, the
consumer remembering the chunk counts of the records it delivered, at most
``ENTRY_COUNTS_MAX``, and reading the entry for an operator's ``ack_up_to``). A consumer that
restarts resumes after the last chunk acknowledged: a record not acknowledged is delivered
again whole (its reader reads it from its first chunk).

**Truncation.** Records the subscription has not consumed may be gone (a retention cap, an
explicit truncate): a consumer then raises ``LogTruncatedError`` naming the gap, never skips
it silently, unless it was subscribed with ``skip_truncated=True``.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
from dataclasses import replace

from bkeeper.common.cas import cas_update
from bkeeper.common.errors import (
    ConfigError,
    LedgerFencedError,
    LogError,
    LogTruncatedError,
    SubscriptionBusyError,
    SubscriptionFencedError,
)
from bkeeper.common.tasks import TaskOwner
from bkeeper.namedlog.core.records import Position, Record
from bkeeper.namedlog.core.subscription_state import SubscriptionState
from bkeeper.namedlog.handle import LogHandle
from bkeeper.namedlog.reader import LogReader, open_reader
from bkeeper.namedlog.stores import CursorLedger
from bkeeper.namedlog.subscriptions.options import SubscribeOptions
from bkeeper.namedlog.subscriptions.progress import check_in_log, ledger_ends

__all__ = ["Consumer"]

log = logging.getLogger(__name__)

#: Compare-and-set rounds one flush tries before it gives up (another writer of the same
#: subscription's node: a consumer taking over, an unsubscribe).
FLUSH_ATTEMPTS_MAX = 20
#: Batches whose record count a consumer remembers (beyond: it reads the entry on an ack).
ENTRY_COUNTS_MAX = 100_000


class Consumer:
    """Reads a subscription's records and acknowledges them (see the module docstring)."""

    def __init__(
        self,
        named: LogHandle,
        name: str,
        state: SubscriptionState,
        version: int,
        options: SubscribeOptions,
        *,
        cursor: CursorLedger | None = None,
    ) -> None:
        self.named = named
        self._cursor = cursor
        self.name = name
        assert options.consumer_id is not None  # opening.subscribe gives every consumer one
        self.consumer_id = options.consumer_id
        self._options = options
        self._subs = named.context.subscriptions
        self._state = state
        self._version = version
        self._epoch = state.epoch
        self._flush_s = options.ack_flush_ms / 1000.0
        self._skip_truncated = options.skip_truncated
        self._reader: LogReader | None = None
        self._acked_runs: dict[int, list[tuple[int, int]]] = _runs_by_ledger(state)
        self._acked_partial = {(p[0], p[1]): p[3] for p in state.partial}
        #: Record counts of the entries the reader went through, in log order (the oldest
        #: go first past ENTRY_COUNTS_MAX, and those at or before the mark at each flush).
        self._counts: dict[tuple[int, int], int] = {}
        #: Chunk counts of the chunked records delivered, by their last chunk's entry (as
        #: ``_counts``: the oldest go first, and those at or before the mark at each flush).
        self._chunked: dict[tuple[int, int], int] = {}
        self._cumulative: Position | None = None
        self._individual: list[Position] = []
        self._dirty = asyncio.Event()
        self._tasks = TaskOwner(f"subscription {name!r} consumer", error=LogError)
        self._flush_lock = asyncio.Lock()
        self._closed = False
        self._fenced: SubscriptionFencedError | None = None
        #: Exclusive: acks carry this consumer's epoch (shared consumers are not fenced).
        self._fencing = state.mode == "exclusive"
        #: The last record returned by :meth:`receive` (acks may not go past it).
        self.delivered: Position | None = None

    @property
    def state(self) -> SubscriptionState:
        """The subscription as this consumer last wrote or read it."""
        return self._state

    @property
    def epoch(self) -> int:
        return self._epoch

    async def open(self) -> None:
        start = self._state.resume_from
        meta = await self.named.metadata()
        gone = meta.truncated_before
        if gone is not None and start < gone and meta.ledgers:
            if not self._skip_truncated:
                raise LogTruncatedError(
                    f"subscription {self.name!r} of log {self.named.name!r}: records from "
                    f"{start} up to {gone} are gone (truncated) before it consumed them"
                )
            log.warning(
                "subscription %s: records from %s up to %s skipped (truncated)",
                self.name,
                start,
                gone,
            )
        self._reader = await open_reader(self.named, start)
        self._tasks.spawn(self._flush_periodically(), "ack flusher")

    # -- reading -------------------------------------------------------------------------
    async def receive(self, timeout_s: float | None = None) -> Record | None:
        """The next record not acknowledged yet, or None if none comes within
        ``timeout_s``."""
        reader = self._check_reading()
        while (record := reader.next_buffered()) is not None:  # no waiting: no deadline
            self._note(record)
            if not self._acked_out_of_order(record.position):
                self.delivered = record.position
                return record
        clock = self.named.context.clock
        deadline = None if timeout_s is None else clock.monotonic() + timeout_s
        while True:
            skipped = reader.skipped_ledgers
            left = None if deadline is None else max(0.0, deadline - clock.monotonic())
            record = await reader.next(left)
            if reader.skipped_ledgers != skipped and not self._skip_truncated:
                raise LogTruncatedError(
                    f"subscription {self.name!r} of log {self.named.name!r}: ledgers were "
                    "truncated away before it consumed their records"
                )
            if record is None:
                return None
            self._note(record)
            if not self._acked_out_of_order(record.position):
                self.delivered = record.position
                return record

    def __aiter__(self) -> Consumer:
        return self

    async def __anext__(self) -> Record:
        record = await self.receive()
        if record is None:
            raise StopAsyncIteration
        return record

    def _note(self, record: Record) -> None:
        """Remember how many records the entry of a record the reader returned holds."""
        ledger, entry, _ = record.position
        counts = self._counts
        if (ledger, entry) not in counts:
            for chunk in range(entry - record.chunks + 1, entry):  # a chunk holds no batch
                counts[(ledger, chunk)] = 1
            counts[(ledger, entry)] = record.entry_records
            while len(counts) > ENTRY_COUNTS_MAX:
                del counts[next(iter(counts))]
        if record.chunks > 1:
            chunked = self._chunked
            chunked[(ledger, entry)] = record.chunks
            if len(chunked) > ENTRY_COUNTS_MAX:
                del chunked[next(iter(chunked))]

    def _acked_out_of_order(self, position: Position) -> bool:
        if self._acked_partial:
            ranges = self._acked_partial.get((position.ledger_id, position.entry_id))
            if ranges is not None and any(a <= position.index <= b for a, b in ranges):
                return True
        runs = self._acked_runs.get(position.ledger_id)
        if not runs:
            return False
        index = bisect.bisect_right(runs, (position.entry_id, 1 << 62)) - 1
        return index >= 0 and runs[index][0] <= position.entry_id <= runs[index][1]

    def _check_reading(self) -> LogReader:
        if self._fenced is not None:
            raise self._fenced
        if self._closed or self._reader is None:
            raise ConfigError(f"consumer of subscription {self.name!r} is closed")
        return self._reader

    # -- acknowledging ---------------------------------------------------------------------
    def ack(self, position: Position) -> None:
        """Acknowledge ``position`` and every record before it (written by the next flush);
        ``ConfigError`` for a position past the last record delivered."""
        self._check_reading()
        self._check_delivered(position)
        if self._cumulative is None or position > self._cumulative:
            self._cumulative = position
            self._dirty.set()

    def ack_individual(self, position: Position) -> None:
        """Acknowledge ``position`` alone (written by the next flush); ``ConfigError`` for a
        position past the last record delivered."""
        self._check_reading()
        self._check_delivered(position)
        chunks = self._chunked.get((position.ledger_id, position.entry_id), 1)
        self._individual += _chunk_positions(position, chunks)
        self._dirty.set()

    async def ack_up_to(self, position: Position, *, individual: bool = False) -> None:
        """As an operator: acknowledge records not delivered to this consumer, up to
        ``position`` (or that one alone), then flush. ``PositionNotInLogError`` (a
        ``ConfigError``) when no record of the log is at ``position`` (:func:`check_in_log`):
        past its last record it would skip records not written yet; in another log's ledger
        it would mean nothing here."""
        self._check_reading()
        await check_in_log(self.named, position)
        if individual:
            chunks = await self.named.context.walk.chunks_of(position.ledger_id, position.entry_id)
            self._individual += _chunk_positions(position, chunks)
        elif self._cumulative is None or position > self._cumulative:
            self._cumulative = position
        await self.flush()

    def _check_delivered(self, position: Position) -> None:
        if self.delivered is None or position > self.delivered:
            raise ConfigError(
                f"ack of {position}: past the last record delivered to this consumer "
                f"({self.delivered if self.delivered is not None else 'none yet'})"
            )

    async def flush(self) -> None:
        """Write the acks gathered so far; durable when this returns.
        ``SubscriptionFencedError`` once another consumer took the subscription over."""
        async with self._flush_lock:
            if self._fenced is not None:
                raise self._fenced
            cumulative, individual = self._cumulative, self._individual
            if cumulative is None and not individual:
                return
            self._cumulative, self._individual = None, []
            self._dirty.clear()
            try:
                await self._write(cumulative, individual)
            except BaseException:
                if self._fenced is None:  # kept for the next flush
                    self._cumulative = _later(self._cumulative, cumulative)
                    self._individual = individual + self._individual
                raise

    async def _write(self, cumulative: Position | None, individual: list[Position]) -> None:
        if self._cursor is not None:
            await self._append_to_cursor(cumulative, individual)
            return
        counts = await self._entry_counts(cumulative, individual)

        async def attempt(snapshot: tuple[SubscriptionState, int]) -> SubscriptionState:
            state, version = snapshot
            after = await self._ends(state, cumulative, individual)
            if self._fencing and state.epoch != self._epoch:
                self._fenced = SubscriptionFencedError(
                    f"subscription {self.name!r} of log {self.named.name!r} was taken over by "
                    f"consumer {state.owner!r} (epoch {state.epoch}; this consumer's "
                    f"{self._epoch}): its acks are refused"
                )
                raise self._fenced
            new = state.with_acks(cumulative, individual, after, counts)
            # Lost to another write: merged into what is there then.
            self._version = await self._subs.write(self.named.name, self.name, new, version)
            return new

        def busy() -> SubscriptionState:
            raise SubscriptionBusyError(
                f"subscription {self.name!r}: acks not written after {FLUSH_ATTEMPTS_MAX} "
                "compare-and-set attempts"
            )

        new = await cas_update(
            lambda: self._subs.read(self.named.name, self.name),
            attempt,
            on_exhausted=busy,
            what=f"subscription {self.name!r}: acks",
            attempts_max=FLUSH_ATTEMPTS_MAX,
            current=(self._state, self._version),
        )
        self._written(new)

    async def _ends(
        self, state: SubscriptionState, cumulative: Position | None, individual: list[Position]
    ) -> dict[int, tuple[int, int]]:
        """Where the sealed ledgers the acks touch end: runs may join the mark across a
        ledger's end (none needed when there is no run at all)."""
        if not individual and not state.acked:
            return {}
        mark = max(cumulative or state.start, state.mark or state.start)
        ids = {mark.ledger_id, *(p.ledger_id for p in individual)}
        return await ledger_ends(self.named, ids | {r[0] for r in state.acked})

    async def _append_to_cursor(
        self, cumulative: Position | None, individual: list[Position]
    ) -> None:
        assert self._cursor is not None
        state = self._state
        after = await self._ends(state, cumulative, individual)
        counts = await self._entry_counts(cumulative, individual)
        new = state.with_acks(cumulative, individual, after, counts)
        try:
            await self._cursor.append(new)
        except LedgerFencedError:
            self._fenced = SubscriptionFencedError(
                f"subscription {self.name!r} of log {self.named.name!r} was taken over by "
                "another consumer (it fenced this consumer's cursor ledger): its acks are "
                "refused"
            )
            raise self._fenced from None
        self._written(new)

    def _written(self, new: SubscriptionState) -> None:
        """``new`` is stored: forget the record counts of entries at or before its mark."""
        self._state = new
        mark = new.mark
        for counts in (self._counts, self._chunked):
            while counts and mark is not None:
                ledger, entry = key = next(iter(counts))
                if Position(ledger, entry) > mark:
                    break
                del counts[key]

    async def _entry_counts(
        self, cumulative: Position | None, individual: list[Position]
    ) -> dict[tuple[int, int], int]:
        """How many records the entries acknowledged hold (the state needs it for batches):
        remembered from reading, else read (an entry the reader did not go through)."""
        counts: dict[tuple[int, int], int] = {}
        known = self._counts
        for position in (cumulative, *individual) if cumulative else individual:
            key = (position.ledger_id, position.entry_id)
            if key in counts:
                continue
            count = known.get(key)
            if count is None:
                last = await self.named.context.walk.last_record(*key)
                count = last.index + 1
            counts[key] = count
        return counts

    async def _flush_periodically(self) -> None:
        while True:
            await self._dirty.wait()
            await asyncio.sleep(self._flush_s)
            try:
                await self.flush()
            except SubscriptionFencedError as exc:
                log.warning("%s", exc)
                return
            except Exception as exc:
                log.warning("subscription %s: acks not written yet: %s", self.name, exc)

    # -- the end -----------------------------------------------------------------------------
    async def close(self) -> None:
        """Write the gathered acks, stop reading and give the subscription up."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._fenced is None:
                await self.flush()
        finally:
            await self._tasks.aclose()
            if self._reader is not None:
                await self._reader.close()
            if self._cursor is not None and self._fenced is None:
                await self._retire_cursor()
            await self._subs.release(self.named.name, self.name)

    async def _retire_cursor(self) -> None:
        """Put the state back in the subscription's node and delete the cursor ledger (if
        another consumer took over meanwhile, it has the state: leave both to it)."""
        cursor = self._cursor
        assert cursor is not None

        async def attempt(snapshot: tuple[SubscriptionState, int]) -> None:
            state, version = snapshot
            if state.epoch != self._epoch or state.cursor != cursor.ledger_id:
                return
            back = replace(state.with_progress_of(self._state), cursor=None)
            await self._subs.write(self.named.name, self.name, back, version)
            await cursor.delete()

        await cas_update(
            lambda: self._subs.read(self.named.name, self.name),
            attempt,
            on_exhausted=lambda: None,  # still changing: left to whoever changes it
            what=f"subscription {self.name!r}: its state back from the cursor ledger",
            attempts_max=FLUSH_ATTEMPTS_MAX,
        )

    async def __aenter__(self) -> Consumer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


def _chunk_positions(position: Position, chunks: int) -> list[Position]:
    """The positions an individual ack of ``position`` writes: itself, or, for a chunked
    record (``chunks`` > 1, at its last chunk), each of its chunk entries."""
    if chunks <= 1:
        return [position]
    ledger, entry = position.ledger_id, position.entry_id
    return [Position(ledger, e) for e in range(entry - chunks + 1, entry + 1)]


def _later(a: Position | None, b: Position | None) -> Position | None:
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b)


def _runs_by_ledger(state: SubscriptionState) -> dict[int, list[tuple[int, int]]]:
    runs: dict[int, list[tuple[int, int]]] = {}
    for ledger, first, last in state.acked:
        runs.setdefault(ledger, []).append((first, last))
    for spans in runs.values():
        spans.sort()
    return runs
