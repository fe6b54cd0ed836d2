"""The driver's view of named logs for planning Spark reads (:class:`LogView`): positions,
the spans of entries between two of them through the logs' walk, what data loss means for
Spark, and the record counts a limit in records needs (:class:`Scan`). The rules are in
:mod:`bkeeper.spark.plan`'s doc; its pure functions cut and share what this view finds.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from bkeeper.common.errors import LogTruncatedError
from bkeeper.namedlog import (
    EARLIEST,
    LATEST,
    EntrySpan,
    LostRange,
    NamedLogs,
    Position,
    WatchedLogs,
    earliest,
)
from bkeeper.namedlog.core import (
    LogMetadata,
    decode_chunk,
    entry_first_timestamp,
    entry_record_count,
)

__all__ = ["LogView", "Scan"]

log = logging.getLogger("bkeeper.spark.plan")


@dataclass(frozen=True)
class Scan:
    """What :meth:`LogView.scan` counted: the records of the entries it read (those the
    spans want: ``first_index``/``end_index`` respected), the entries read, and, when it
    stopped at ``records_max`` records, the position after the last one (else None)."""

    records: int
    entries: int
    end: Position | None = None


class LogView:
    """Reads logs' structure for planning (driver side), through the logs' walk. With
    ``watched``, each log's metadata is read once and kept until its node changes (a
    stream's driver looks at its logs at every trigger)."""

    def __init__(self, logs: NamedLogs, watched: WatchedLogs | None = None) -> None:
        self._logs = logs
        self._walk = logs.walk
        self._watched = watched

    async def names(self) -> list[str]:
        return sorted(await self._logs.names())

    async def metadata(self, name: str) -> LogMetadata:
        if self._watched is not None:
            return await self._watched.read(name)
        return await self._logs.log(name).metadata()

    async def earliest(self, name: str) -> Position:
        return earliest(await self.metadata(name))

    async def latest(self, name: str) -> Position:
        """After every record appended so far (records from now on; see the walk)."""
        return await self._walk.latest(await self.metadata(name))

    async def at_time(self, name: str, timestamp_ms: int) -> Position:
        """The first record appended at or after ``timestamp_ms`` (else ``latest``)."""
        return await self._walk.position_at(await self.metadata(name), timestamp_ms)

    async def resolve(self, name: str, spec: str | Position) -> Position:
        if isinstance(spec, Position):
            return spec
        if spec == EARLIEST:
            return await self.earliest(name)
        if spec == LATEST:
            return await self.latest(name)
        raise ValueError(spec)

    async def spans(
        self,
        name: str,
        start: Position,
        end: Position | None = None,
        *,
        fail_on_data_loss: bool = True,
    ) -> tuple[list[EntrySpan], Position]:
        """The spans from ``start`` up to ``end`` (exclusive; None: the head) and the
        position after them.

        A position inside a record batch (index I > 0) starts at record I of its entry
        (the first span's ``first_index``), or ends before it (the last span takes that
        entry, with ``end_index`` I): the walk itself is asked for whole entries."""
        whole_end = None if end is None else Position(end.ledger_id, end.entry_id + (end.index > 0))
        walked = await self._walk.spans(
            name, await self.metadata(name), Position(start.ledger_id, start.entry_id), whole_end
        )
        for lost in walked.lost:
            self._data_lost(name, lost, fail_on_data_loss)
        spans = list(walked.spans)
        if spans and start.index and (spans[0].ledger_id, spans[0].first) == start[:2]:
            spans[0] = replace(spans[0], first_index=start.index)
        after = max(walked.after, start)  # nothing found: still after the start's index
        if (
            end is not None
            and end.index
            and spans
            and (spans[-1].ledger_id, spans[-1].last)
            == (
                end.ledger_id,
                end.entry_id,
            )
        ):
            spans[-1] = replace(spans[-1], end_index=end.index)
            after = end
        return spans, after

    async def entry_bytes(
        self, spans: Sequence[EntrySpan], known: Mapping[str, float] | None = None
    ) -> dict[str, float]:
        """Average bytes per entry of each log of ``spans`` not in ``known``, estimated from
        one ledger of it (its first span's): a sealed ledger's length over its entries, or an
        open one's length up to the span's last entry (one entry read). An entry holds one
        record or a record batch, so entry counts alone say little of a split's size."""
        found = dict(known or {})
        for span in spans:
            if span.log in found:
                continue
            handle = await self._walk.open(span.ledger_id)
            if handle is None:
                continue
            meta = handle.metadata
            if handle.is_closed and meta.last_entry_id >= 0:
                found[span.log] = meta.length / (meta.last_entry_id + 1)
            else:
                found[span.log] = (await handle.read_entry(span.last)).length / (span.last + 1)
        return found

    async def span_bytes(self, span: EntrySpan) -> int:
        """The bytes of the span's entries: the ledger's length up to its last entry less the
        length before its first (from the entries' digests; a whole sealed ledger's comes
        from its metadata). 0 when the ledger is gone."""
        handle = await self._walk.open(span.ledger_id)
        if handle is None:
            return 0
        meta = handle.metadata
        if handle.is_closed and span.first == 0 and span.last == meta.last_entry_id:
            return meta.length
        before = 0 if span.first == 0 else (await handle.read_entry(span.first - 1)).length
        return (await handle.read_entry(span.last)).length - before

    async def scan(
        self,
        spans: Sequence[EntrySpan],
        *,
        records_max: int | None = None,
        entries_max: int | None = None,
    ) -> Scan:
        """Count the records of one log's ``spans`` in order from their entries' heads,
        stopping at ``records_max`` records (the end: after the last one, maybe inside a
        batch) or after ``entries_max`` entries. A ledger gone counts nothing (reading it
        reports the loss)."""
        records = entries = 0
        for span in spans:
            if entries_max is not None and entries >= entries_max:
                break
            handle = await self._walk.open(span.ledger_id)
            if handle is None:
                continue
            try:
                # aclosing: stopping early cancels the reads ahead at once, not at GC
                async with contextlib.aclosing(handle.read(span.first, span.last)) as read:
                    async for entry in read:
                        if entries_max is not None and entries >= entries_max:
                            break
                        entries += 1
                        at = entry.entry_id
                        count = entry_record_count(entry.payload, span.ledger_id, at)
                        low = span.first_index if at == span.first else 0
                        high = span.end_index if at == span.last and span.end_index else count
                        have = max(0, min(high, count) - low)
                        if records_max is not None and have and records + have >= records_max:
                            cut = low + records_max - records
                            end = Position(span.ledger_id, at, cut)
                            if cut >= count:
                                end = Position(span.ledger_id, at + 1)
                            return Scan(records_max, entries, end)
                        records += have
            finally:
                await handle.close()
        return Scan(records, entries)

    async def first_timestamp(self, spans: Sequence[EntrySpan]) -> int | None:
        """The append timestamp (ms) of the first record of ``spans``: one entry read (two
        when it is a later chunk of a large record). None: no record (or its ledger gone)."""
        for span in spans:
            handle = await self._walk.open(span.ledger_id)
            if handle is None:
                continue
            try:
                entry_id = span.first
                payload = (await handle.read_entry(entry_id)).payload
                found = entry_first_timestamp(payload, span.ledger_id, entry_id, span.first_index)
                chunk = decode_chunk(payload, span.ledger_id, entry_id)
                if found is None and chunk is not None:
                    entry_id -= chunk.chunk_index
                    payload = (await handle.read_entry(entry_id)).payload
                    found = entry_first_timestamp(payload, span.ledger_id, entry_id)
            finally:
                await handle.close()
            if found is not None:
                return found
        return None

    @staticmethod
    def _data_lost(name: str, lost: LostRange, fail: bool) -> None:
        message = (
            f"log {name!r}: records from {lost.start} up to {lost.first_left} are gone "
            "(truncated or deleted) before they were read"
        )
        if fail:
            raise LogTruncatedError(message + "; set failOnDataLoss=false to skip them and go on")
        log.warning("%s; skipping them (failOnDataLoss=false)", message)
