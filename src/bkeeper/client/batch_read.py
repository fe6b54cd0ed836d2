"""Bulk reads of a ledger over the v2 BATCH_READ request (opcode 7).

:func:`plan_spans` cuts a range of entries at segment boundaries (pure); a
:class:`BatchReader` reads one span and yields lists of verified entries. Rules:

* A batch never crosses a segment boundary (ensemble change). A span is *batchable* when the
  client speaks v2 and the segment's ensemble size equals the write quorum, so every bookie of
  the segment holds every entry (Apache BookKeeper's BP-62 rule). Other spans are read by the
  per-entry path, in chunks.
* One request asks for at most ``batch_read_entries_max`` entries and
  ``batch_read_bytes_max`` bytes; once entry sizes are known it asks for no more entries
  than the byte limit lets through. A bookie may answer with fewer entries (its own limits,
  or a gap in what it stores): the rest of the range is asked for again, next in line.
* Up to ``batch_reads_in_flight_max`` requests are in flight, spread over the span's bookies
  in round robin; bookies that failed earlier in this read are asked last.
* A request that errs, is unanswered after ``read_timeout_ms``, answers without entries, or
  carries a body failing its digest (or naming another ledger or entry) is sent to the next
  bookie. When every bookie failed, the request's range is read by the per-entry path, which
  has speculative reads and the errors callers expect (``NoSuchEntryError``,
  ``BookieUnavailableError``...), raised after the entries before the failing one.
* Batches come out in entry order, with no gap and no duplicate, and cover the span.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import contextlib
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass

from bkeeper.client.context import ClientContext
from bkeeper.client.entry import Entry
from bkeeper.client.refusal import status_error
from bkeeper.common.errors import (
    BKeeperError,
    BookieUnavailableError,
    NoSuchEntryError,
    NoSuchLedgerError,
    ProtocolError,
)
from bkeeper.common.tasks import abandon, within
from bkeeper.meta.ledger_metadata import LedgerMetadata
from bkeeper.wire.batch_frames import BODIES_AT, FramedBatchReadResponse
from bkeeper.wire.codes import Protocol, StatusCode
from bkeeper.wire.digest import DigestManager
from bkeeper.wire.messages import BatchReadRequest, BatchReadResponse

__all__ = ["BatchReader", "Span", "plan_spans"]

#: A per-entry reader of ``first..last`` yielding lists of entries in order.
ChunkReader = Callable[[int, int], AsyncGenerator[list[Entry], None]]


@dataclass(frozen=True, slots=True)
class Span:
    """Entries ``first..last`` of one segment, stored by ``bookies``."""

    first: int
    last: int
    bookies: tuple[str, ...]
    batchable: bool


def plan_spans(meta: LedgerMetadata, first: int, last: int, protocol: Protocol) -> list[Span]:
    """``first..last`` cut at segment starts; empty when ``first > last``."""
    starts = list(meta.segments)
    spans = []
    position = first
    while position <= last:
        index = bisect.bisect_right(starts, position) - 1
        end = last if index + 1 == len(starts) else min(last, starts[index + 1] - 1)
        ensemble = tuple(meta.segments[starts[index]])
        batchable = protocol is Protocol.V2 and len(ensemble) == meta.write_quorum
        spans.append(Span(position, end, ensemble, batchable))
        position = end + 1
    return spans


class _BatchReadFailedError(Exception):
    """No bookie of the span answered a batch request with at least one good entry."""


@dataclass(slots=True)
class _Request:
    first: int
    last: int
    task: asyncio.Task[list[Entry]]


class BatchReader:
    """Reads spans of one ledger for one call of ``ReadHandle.read_batches``."""

    def __init__(
        self,
        ctx: ClientContext,
        ledger_id: int,
        digest: DigestManager[Entry],
        per_entry: ChunkReader,
    ) -> None:
        self._ctx = ctx
        self._config = ctx.config
        self._ledger_id = ledger_id
        self._digest = digest
        self._per_entry = per_entry
        self._turn = 0
        self._suspects: set[str] = set()
        self._body_bytes = 0  # average body size seen so far; 0 until the first answer
        self._local_read = False  # the local region's bookies read for this call

    async def read(self, span: Span) -> AsyncGenerator[list[Entry], None]:
        """The entries of ``span`` in order, in lists (see the module doc)."""
        if self._config.local_region and not self._local_read:
            self._local_read = True
            await self._ctx.refresh_local()
        if not span.batchable:
            async with contextlib.aclosing(self._per_entry(span.first, span.last)) as chunks:
                async for chunk in chunks:
                    yield chunk
            return
        window: collections.deque[_Request] = collections.deque()
        next_id = span.first
        try:
            while next_id <= span.last or window:
                while next_id <= span.last and len(window) < self._config.batch_reads_in_flight_max:
                    end = min(span.last, next_id + self._entries_per_request() - 1)
                    window.append(self._send(span.bookies, next_id, end))
                    next_id = end + 1
                head = window[0]
                try:
                    entries = await head.task
                except _BatchReadFailedError:
                    window.popleft()
                    chunks = self._per_entry(head.first, head.last)
                    async with contextlib.aclosing(chunks):
                        async for chunk in chunks:
                            yield chunk
                    continue
                window.popleft()
                stop = head.first + len(entries)
                if stop <= head.last:  # a short answer: ask again for the rest, first
                    self._send_again(window, span.bookies, stop, head.last)
                yield entries
        finally:
            abandon(request.task for request in window)

    def _entries_per_request(self) -> int:
        count = self._config.batch_read_entries_max
        if self._body_bytes:
            count = min(count, max(1, self._config.batch_read_bytes_max // self._body_bytes))
        return count

    def _send_again(
        self, window: collections.deque[_Request], bookies: Sequence[str], first: int, last: int
    ) -> None:
        """Put requests for ``first..last`` at the front of ``window``: as many as the
        in-flight limit allows, the last one asking for everything left."""
        free = max(1, self._config.batch_reads_in_flight_max - len(window))
        size = self._entries_per_request()
        pieces: list[tuple[int, int]] = []
        while first <= last:
            end = last if len(pieces) == free - 1 else min(last, first + size - 1)
            pieces.append((first, end))
            first = end + 1
        for piece_first, piece_last in reversed(pieces):
            window.appendleft(self._send(bookies, piece_first, piece_last))

    def _send(self, bookies: Sequence[str], first: int, last: int) -> _Request:
        healthy = [b for b in bookies if b not in self._suspects]
        turn, self._turn = self._turn, self._turn + 1
        if healthy:
            turn %= len(healthy)
            healthy = healthy[turn:] + healthy[:turn]
        order = self._ctx.local_first(healthy) + [b for b in bookies if b in self._suspects]
        return _Request(first, last, asyncio.ensure_future(self._fetch(order, first, last)))

    async def _fetch(self, order: Sequence[str], first: int, last: int) -> list[Entry]:
        for bookie in order:
            try:
                entries = await self._ask(bookie, first, last)
            except (NoSuchEntryError, NoSuchLedgerError):
                continue  # this replica lacks the data: not a reason to avoid it
            except BKeeperError:
                self._suspects.add(bookie)
                continue
            self._suspects.discard(bookie)
            return entries
        raise _BatchReadFailedError

    async def _ask(self, bookie: str, first: int, last: int) -> list[Entry]:
        count = last - first + 1
        request = BatchReadRequest(
            self._ledger_id,
            first,
            count,
            self._config.batch_read_bytes_max,
            next(self._ctx.batch_request_ids),
        )
        timeout_ms = self._config.read_timeout_ms
        what = f"ledger {self._ledger_id} entries {first}..{last} on {bookie}"
        metrics = self._ctx.metrics
        sent_at = 0.0 if metrics is None else metrics.clock.monotonic()
        try:
            response: BatchReadResponse = await within(
                self._ctx.pool.send(bookie, request, Protocol.V2), timeout_ms / 1000.0
            )
        except TimeoutError:
            if metrics is not None:
                metrics.batch_read.requests.value += 1
                metrics.batch_read.errors.value += 1
            raise BookieUnavailableError(f"{what}: no answer in {timeout_ms} ms") from None
        if response.status is not StatusCode.EOK:
            if metrics is not None:
                metrics.batch_read.requests.value += 1
                metrics.batch_read.errors.value += 1
            raise status_error(response.status, what)
        if isinstance(response, FramedBatchReadResponse) and response.frame is not None:
            # over TCP: the bodies are split and checked in one pass
            frame = response.frame
            entries = self._digest.verify_batch_frame(frame, BODIES_AT, first, count)
            body_bytes = len(frame) - BODIES_AT - 4 * len(entries)
        else:
            bodies = response.bodies[:count]
            entries = self._digest.verify_entries(bodies, first)
            body_bytes = sum(map(len, bodies))
        if metrics is not None:
            op = metrics.batch_read
            op.requests.value += 1
            op.latency.observe(metrics.clock.monotonic() - sent_at)
            metrics.read_entries.value += len(entries)
        if not entries:
            raise ProtocolError(f"{what}: a batch answer without entries")
        self._body_bytes = max(1, body_bytes // len(entries))
        return entries
