"""The structure of a named log's ledger list: its ends, the record at a time, and the runs of
confirmed entries between two positions. The one place that walks the list: the log reader
(:mod:`bkeeper.namedlog.reader`), ``NamedLog.last_position`` and Spark's planning
(:mod:`bkeeper.spark.plan`) all call it.

Positions. ``(L, E)`` is the (first) record of entry E of ledger L, ``(L, E, I)`` record I of
the record batch in entry E (:mod:`bkeeper.namedlog.core.records`). When L is not in the list it
means the first record of the first ledger after L, so ``(L + 1, 0)`` and ``(L, last + 1)``
both follow a sealed ledger L whose last entry is ``last`` (:func:`locate`). Spans are of
entries: a span starting at ``(L, E, I)`` with I > 0 holds entry E, of which only the records
from index I on are wanted (``EntrySpan.first_index``); one ending (exclusive) at
``(L, E, I)`` with I > 0 holds entry E, of which only the records before index I are wanted
(``EntrySpan.end_index``).

What is confirmed, and what "latest" means:

* A sealed ledger's entries are its entries ``0..last`` (they never change). An open
  ledger's confirmed entries are those up to its LAC: a reader never reads past it, so what it
  reads is what any reader reads and what recovery keeps. :meth:`LogWalk.spans` follows this
  rule and stops at the first ledger that is not sealed, at its LAC (a ledger being sealed
  after a roll may still gain confirmed entries past the LAC seen now, so nothing after it is
  planned yet).
* ``latest`` (:meth:`LogWalk.latest`) is a *starting point*, "the records appended from now
  on": the position after every record appended so far. For an open last ledger that is past
  its LAC: a writer learns that an entry is acknowledged before bookies learn it (the LAC
  travels with the next append), so its last acknowledged entries sit past the LAC until the
  writer appends again or closes, up to its whole pipeline when its writer died before
  recovery. ``latest`` checks the entries past the LAC that bookies hold (at most
  ``latest_probes_max``) and starts after them: a reader opened at ``latest`` gets only
  records appended after it opened, never one that was appended before. Being a start and not
  a read, it reports no entry that is not confirmed: reads from it still stop at the LAC.
  A sealed last ledger gives ``(L, last + 1)``; a last ledger whose metadata is gone gives
  ``(L + 1, 0)`` (nothing of it can be read from now on).
* ``earliest`` is the first record of the first ledger still listed.

Data loss: a start before the log's first ledger when a truncation moved past it, or a ledger
of the list whose metadata is gone. :meth:`LogWalk.spans` returns each such range as a
:class:`LostRange` and walks on past it; its callers decide whether that is an error.

Limits: sealed ledgers' last entry ids are cached (``sealed_cache_max``; a sealed ledger
deleted later is still walked over from the cache, and reading it finds it gone); ``latest``
probes at most ``latest_probes_max`` entries past the LAC. The read handles of up to
``open_kept_max`` open ledgers are kept, each following its ledger's metadata (a watch), so
that asking again for an open ledger's end reads its LAC from the bookies and nothing from
the metadata store (a Spark stream asks at every trigger): once the watch reports the ledger
sealed, it is cached as sealed; once the watch ends (the ledger deleted, or the watch lost),
the ledger is opened afresh at the next look.
"""

from __future__ import annotations

from collections import OrderedDict

from bkeeper.client.bookkeeper import BookKeeper
from bkeeper.client.read_handle import ReadHandle
from bkeeper.common.errors import BKeeperError, LedgerNotFoundError
from bkeeper.namedlog.core.chunks import Incomplete, Reassembly, decode_chunk, whole_records
from bkeeper.namedlog.core.log_metadata import LogMetadata
from bkeeper.namedlog.core.records import Position, decode_entry, entry_envelopes
from bkeeper.namedlog.core.spans import EntrySpan, LedgerEnd, LostRange, Walked, locate

__all__ = ["LogWalk"]

#: Entries past an open ledger's LAC that ``latest`` checks for (appended, LAC not sent yet).
LATEST_PROBES_MAX = 1_000
#: Sealed ledgers whose last entry id a walk remembers.
SEALED_CACHE_MAX = 100_000
#: Open ledgers whose read handle (following the ledger's metadata) a walk keeps.
OPEN_KEPT_MAX = 100


class LogWalk:
    """Walks the ledger lists of one cluster's logs (reads ledger metadata and entries, never
    the log metadata: callers pass the :class:`LogMetadata` they read)."""

    def __init__(
        self,
        bk: BookKeeper,
        password: bytes,
        *,
        sealed_cache_max: int = SEALED_CACHE_MAX,
        latest_probes_max: int = LATEST_PROBES_MAX,
        open_kept_max: int = OPEN_KEPT_MAX,
    ) -> None:
        self._bk = bk
        self._password = password
        self._sealed: OrderedDict[int, int] = OrderedDict()
        self._sealed_cache_max = sealed_cache_max
        self._latest_probes_max = latest_probes_max
        self._kept: OrderedDict[int, ReadHandle] = OrderedDict()
        self._open_kept_max = open_kept_max

    async def open(self, ledger_id: int) -> ReadHandle | None:
        """A read handle on the ledger, never fencing it; None when it is gone."""
        try:
            return await self._bk.open_ledger(ledger_id, self._password, recovery=False)
        except LedgerNotFoundError:
            return None

    async def ledger_end(self, ledger_id: int) -> LedgerEnd | None:
        """The ledger's last confirmed entry; None when the ledger is gone."""
        cached = self._sealed.get(ledger_id)
        if cached is not None:
            self._sealed.move_to_end(ledger_id)
            return LedgerEnd(cached, True)
        handle = await self._open_for_end(ledger_id)
        if handle is None:
            return None
        if handle.is_closed:
            await self._let_go(ledger_id)
            last = handle.metadata.last_entry_id
            self._sealed[ledger_id] = last
            if len(self._sealed) > self._sealed_cache_max:
                self._sealed.popitem(last=False)
            return LedgerEnd(last, True)
        return LedgerEnd(await handle.read_last_add_confirmed(), False)

    async def _open_for_end(self, ledger_id: int) -> ReadHandle | None:
        """The kept handle of an open ledger while it follows the metadata; else the ledger
        opened now (kept when open and its metadata can be followed)."""
        kept = self._kept.get(ledger_id)
        if kept is not None:
            if kept.view.watching or kept.is_closed:
                self._kept.move_to_end(ledger_id)
                return kept
            await self._let_go(ledger_id)  # deleted, or the watch was lost: look afresh
        handle = await self.open(ledger_id)
        if handle is None or handle.is_closed or self._open_kept_max < 1:
            return handle
        handle.view.follow()
        if handle.view.watching:  # not over the client's metadata_watches_max
            self._kept[ledger_id] = handle
            while len(self._kept) > self._open_kept_max:
                await self._let_go(next(iter(self._kept)))
        return handle

    async def _let_go(self, ledger_id: int) -> None:
        handle = self._kept.pop(ledger_id, None)
        if handle is not None:
            await handle.close()

    async def last_record(self, ledger_id: int, entry_id: int) -> Position:
        """The position of the last record of entry ``entry_id`` (read to count its batch;
        ``(ledger_id, entry_id)`` when the ledger is gone)."""
        handle = await self.open(ledger_id)
        if handle is None:
            return Position(ledger_id, entry_id)
        entry = await handle.read_entry(entry_id)
        count = entry_envelopes(entry.payload, ledger_id, entry_id).record_count
        return Position(ledger_id, entry_id, count - 1)

    async def last_whole(self, ledger_id: int, entry_id: int) -> Position | None:
        """The position of the last whole record in entries ``0..entry_id`` of the ledger
        (:meth:`last_record`, stepping back over a chunked record cut short or still being
        written; None: there is none; ``(ledger_id, entry_id)`` when the ledger is gone)."""
        handle = await self.open(ledger_id)
        if handle is None:
            return Position(ledger_id, entry_id)
        try:
            while entry_id >= 0:
                payload = (await handle.read_entry(entry_id)).payload
                chunk = decode_chunk(payload, ledger_id, entry_id)
                if chunk is None:
                    count = entry_envelopes(payload, ledger_id, entry_id).record_count
                    return Position(ledger_id, entry_id, count - 1)
                if chunk.chunk_index == chunk.chunk_count - 1:
                    return Position(ledger_id, entry_id)
                entry_id -= chunk.chunk_index + 1  # the entry before the record's first chunk
            return None
        finally:
            await handle.close()

    async def chunks_of(self, ledger_id: int, entry_id: int) -> int:
        """How many entries the record at ``(ledger_id, entry_id)`` spans: its chunk count
        when the entry is the last chunk of a chunked record, else 1 (also when the ledger or
        the ledger is gone)."""
        handle = await self.open(ledger_id)
        if handle is None:
            return 1
        try:
            entry = await handle.read_entry(entry_id)
        finally:
            await handle.close()
        chunk = decode_chunk(entry.payload, ledger_id, entry_id)
        if chunk is None or chunk.chunk_index != chunk.chunk_count - 1:
            return 1
        return chunk.chunk_count

    async def latest(self, meta: LogMetadata) -> Position:
        """The position after every record appended so far (see the module docstring)."""
        if not meta.ledgers:
            return Position(0, 0)
        last = meta.ledgers[-1].ledger_id
        handle = await self.open(last)
        if handle is None:
            return Position(last + 1, 0)
        if handle.is_closed:
            return Position(last, handle.metadata.last_entry_id + 1)
        end = await handle.read_last_add_confirmed() + 1
        for _ in range(self._latest_probes_max):
            try:
                await handle.read_entry(end)
            except BKeeperError:
                break
            end += 1
        return Position(last, end)

    async def position_at(self, meta: LogMetadata, timestamp_ms: int) -> Position:
        """The first record appended at or after ``timestamp_ms`` (else :meth:`latest`):
        skip whole sealed ledgers whose last record is older, then scan the first ledger
        that is not."""
        for ledger in meta.ledgers:
            handle = await self.open(ledger.ledger_id)
            if handle is None:
                continue
            last = (
                handle.metadata.last_entry_id
                if handle.is_closed
                else await handle.read_last_add_confirmed()
            )
            if last < 0:
                continue
            tail = (await handle.read_entry(last)).payload
            if decode_chunk(tail, ledger.ledger_id, last) is None:  # (a chunk: scan it)
                record = decode_entry(tail, ledger.ledger_id, last)[-1]
                if record.timestamp_ms < timestamp_ms and handle.is_closed:
                    continue
            chunks = Reassembly(ledger.ledger_id, _not_reported)
            async for entry in handle.read(0, last):
                whole = chunks.feed(entry.entry_id, entry.payload)
                if whole is None:
                    continue
                for record in whole_records(whole, ledger.ledger_id):
                    if record.timestamp_ms >= timestamp_ms:
                        return record.position
        return await self.latest(meta)

    async def spans(
        self, name: str, meta: LogMetadata, start: Position, end: Position | None = None
    ) -> Walked:
        """The confirmed entries of log ``name`` from ``start`` up to ``end`` (exclusive;
        None: as far as they go), the position after them, and what was lost on the way."""
        ledgers = meta.ledgers
        index = locate(meta, start)
        if index is None:
            return Walked([], start)
        lost: list[LostRange] = []
        if index == 0 and ledgers[0].ledger_id != start.ledger_id:
            mark = meta.truncated_before
            if mark is not None and start < mark:
                lost.append(LostRange(start, Position(ledgers[0].ledger_id, 0)))
        found: list[EntrySpan] = []
        after = start
        for ledger in ledgers[index:]:
            ledger_id = ledger.ledger_id
            if end is not None and ledger_id > end.ledger_id:
                return Walked(found, end, lost)
            first = start.entry_id if ledger_id == start.ledger_id else 0
            ledger_end = await self.ledger_end(ledger_id)
            if ledger_end is None:
                after = Position(ledger_id + 1, 0)
                lost.append(LostRange(Position(ledger_id, first), after))
                continue
            last = ledger_end.last
            first_index = start.index if ledger_id == start.ledger_id else 0
            end_index = 0
            if end is not None and ledger_id == end.ledger_id:
                if end.index and end.entry_id <= last:
                    last, end_index = end.entry_id, end.index
                else:
                    last = min(last, end.entry_id - 1)
            if first <= last:
                found.append(
                    EntrySpan(
                        name, ledger_id, first, last, ledger_end.sealed, first_index, end_index
                    )
                )
            if end is not None and end_index:
                after = end
            elif first <= last:
                after = Position(ledger_id, last + 1)
            else:
                after = max(after, Position(ledger_id, first, first_index))
            if not ledger_end.sealed or (end is not None and ledger_id == end.ledger_id):
                break
        return Walked(found, after, lost)


def _not_reported(skipped: Incomplete) -> None:
    """A walk looking for a time passes over a chunked record cut short (readers report
    it when they read it)."""
