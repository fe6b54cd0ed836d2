"""Record batching for the log writer: records gathered into batches, batches sent in order.

A :class:`Batcher` collects the envelopes of records appended (``add`` one,
``add_many`` many) into the open :class:`Batch`. The open batch is sealed once it holds
``batch_max_records`` records, once the next record would take it past ``batch_max_bytes``
(a record larger than that goes alone), or ``linger_ms`` after its first record (0: when
the event loop next runs, so the records appended in one go share a batch). Sealed batches
wait in order in a queue of at most ``SEALED_BATCHES_MAX``; one sender task hands them to
the writer's ``send`` one at a time, in order (so entry ids follow append order), and
appenders wait while the queue is full. A record larger than the writer's ``chunk_bytes`` goes
alone as its chunks (``add_alone``: the open batch is sealed first). The bytes each batch
counts are its records' length table entries and envelopes: its body
(:mod:`bkeeper.namedlog.core.records`).

Each appender waits on a future of the batch (``Batch.waiters``: the future and the index in
the batch of its first record), which the writer completes with the record's position once
the batch's entry is acknowledged, or fails with the batch.

Limits: ``SEALED_BATCHES_MAX`` sealed batches waiting to be sent.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import itertools
import logging
from collections.abc import Awaitable, Callable, Sequence

from bkeeper.common.errors import BKeeperError, LogError
from bkeeper.common.tasks import TaskOwner
from bkeeper.namedlog.core.config import LogConfig
from bkeeper.namedlog.core.records import Position

__all__ = ["SEALED_BATCHES_MAX", "Batch", "Batcher"]

log = logging.getLogger(__name__)

_PLUS_4 = (4).__add__
_new_tuple = tuple.__new__

#: Sealed batches waiting for the sender; appenders wait while this many do.
SEALED_BATCHES_MAX = 4


class Batch:
    """Records gathered for one entry: their envelopes, the body's size so far, and the
    futures of those waiting for them (each with the index of its first record). Or, with
    ``chunks``, one large record's chunk entries (:meth:`Batcher.add_alone`), sent as
    consecutive entries; its waiter gets the last one's position."""

    __slots__ = ("chunks", "envelopes", "size", "timer", "waiters")

    def __init__(self, chunks: list[bytes] | None = None) -> None:
        self.chunks = chunks
        self.envelopes: list[bytes] = []
        self.size = 0
        self.waiters: list[tuple[asyncio.Future[Position], int]] = []
        self.timer: asyncio.TimerHandle | asyncio.Handle | None = None

    def complete(self, ledger_id: int, entry_id: int) -> None:
        """Its entry was acknowledged: each waiter gets its first record's position."""
        for future, index in self.waiters:
            if not future.done():  # (a caller may have cancelled it)
                future.set_result(_new_tuple(Position, (ledger_id, entry_id, index)))

    def fail(self, error: BaseException) -> None:
        for future, _ in self.waiters:
            if not future.done():
                future.set_exception(error)

    def cancel(self) -> None:
        for future, _ in self.waiters:
            future.cancel()


class Batcher:
    """Gathers records into batches and sends them in order through ``send`` (see the
    module docstring). ``send`` must complete or fail the batch's waiters, now or later."""

    def __init__(
        self,
        config: LogConfig,
        send: Callable[[Batch], Awaitable[None]],
        tasks: TaskOwner,
        what: str,
    ) -> None:
        self._max_bytes = config.batch_max_bytes
        self._max_records = config.batch_max_records
        self._linger_s = config.linger_ms / 1000.0
        self._send = send
        self._tasks = tasks
        self._what = what
        self._loop = asyncio.get_running_loop()
        self._open: Batch | None = None
        self._sealed: collections.deque[Batch] = collections.deque()
        self._room = asyncio.Event()
        self._sender: asyncio.Task[None] | None = None
        #: The last batch sealed (``flush`` waits for it).
        self.last: Batch | None = None

    @property
    def full(self) -> bool:
        """The queue of sealed batches is full (:meth:`room` would wait)."""
        return len(self._sealed) >= SEALED_BATCHES_MAX

    async def room(self) -> None:
        """Wait while the queue of sealed batches is full."""
        while len(self._sealed) >= SEALED_BATCHES_MAX:
            self._room.clear()
            await self._room.wait()

    def add(self, envelope: bytes, future: asyncio.Future[Position]) -> None:
        """Add one record; ``future`` gets its position."""
        batch = self._open
        size = len(envelope) + 4
        if batch is not None and batch.size + size > self._max_bytes:
            self.seal()
            batch = None
        if batch is None:
            batch = self._start()
        batch.waiters.append((future, len(batch.envelopes)))
        batch.envelopes.append(envelope)
        batch.size += size
        if len(batch.envelopes) >= self._max_records:
            self.seal()

    def add_alone(self, chunks: list[bytes], future: asyncio.Future[Position]) -> None:
        """Add a large record's chunk entries (sent after every record added before, alone:
        never in a batch); ``future`` gets its last chunk's position."""
        self.seal()
        batch = Batch(chunks)
        batch.waiters.append((future, 0))
        self._open = batch
        self.seal()

    def add_many(self, envelopes: Sequence[bytes]) -> list[tuple[asyncio.Future[Position], int]]:
        """Add records in order; for each batch they went into, a future of the position of
        the first of them there, and how many of them went there. The caller waits for
        :meth:`room` before each call; this one may fill the queue past its limit by the
        batches these records take (``append_many`` passes a bounded number at a time)."""
        parts: list[tuple[asyncio.Future[Position], int]] = []
        max_bytes, max_records = self._max_bytes, self._max_records
        sizes = list(map(_PLUS_4, map(len, envelopes)))  # with its length table entry
        count, at = len(envelopes), 0
        while at < count:  # a batch at a time, no Python work per record
            batch = self._open
            if batch is None or batch.size + sizes[at] > max_bytes:
                self.seal()
                batch = self._start()
            room = max_records - len(batch.envelopes)
            totals = list(itertools.accumulate(sizes[at : at + room], initial=batch.size))
            taken = max(1, bisect.bisect_right(totals, max_bytes) - 1)  # one always fits
            future: asyncio.Future[Position] = self._loop.create_future()
            batch.waiters.append((future, len(batch.envelopes)))
            batch.envelopes += envelopes[at : at + taken]
            batch.size = totals[taken]
            parts.append((future, taken))
            at += taken
            if len(batch.envelopes) >= max_records or at < count:
                self.seal()
        return parts

    def seal(self) -> None:
        """Seal the open batch (if any) and have it sent."""
        batch, self._open = self._open, None
        if batch is None:
            return
        if batch.timer is not None:
            batch.timer.cancel()
            batch.timer = None
        self._sealed.append(batch)
        self.last = batch
        if self._sender is None:
            self._sender = self._tasks.spawn(self._send_sealed(), f"send batches of {self._what}")

    def abort(self, error: BaseException) -> None:
        """Fail every record not sent yet (the sender was cancelled: the writer closed)."""
        if self._open is not None:
            self._sealed.append(self._open)
            self._open = None
        while self._sealed:
            self._sealed.popleft().fail(error)
        self._room.set()

    async def drain(self) -> None:
        """Seal the open batch and wait until every sealed batch was handed to ``send``."""
        self.seal()
        while self._sender is not None:
            await asyncio.shield(self._sender)

    def _start(self) -> Batch:
        batch = self._open = Batch()
        if self._linger_s:
            batch.timer = self._loop.call_later(self._linger_s, self._lingered, batch)
        else:
            batch.timer = self._loop.call_soon(self._lingered, batch)
        return batch

    def _lingered(self, batch: Batch) -> None:
        if self._open is batch:
            batch.timer = None
            self.seal()

    async def _send_sealed(self) -> None:
        sealed = self._sealed
        try:
            while sealed:
                batch = sealed[0]
                try:
                    await self._send(batch)
                except BKeeperError as exc:  # the writer says why: each appender gets it
                    batch.fail(exc)
                finally:
                    if sealed and sealed[0] is batch:
                        sealed.popleft()
                    self._room.set()
        except asyncio.CancelledError:
            self.abort(LogError(f"{self._what}: closed before these records were sent"))
            raise
        finally:
            self._sender = None
