"""What a Spark read of named logs covers: which logs, where each starts and ends (no pyspark).

Batch: every log named (or matching ``logPattern``) from its starting position to its ending
position (default: the head when planned). Streaming: offsets are exact positions per log;
each trigger advances every log from its offset towards its head (or the head frozen for
``Trigger.AvailableNow``), at most ``maxEntriesPerTrigger`` entries in all, shared among
logs in proportion to their backlog, or exactly ``maxRecordsPerTrigger`` records while that
many are waiting (shared in proportion to the logs' backlogs in entries; a log with fewer
records than its share leaves the rest to the others; the entries' heads are read on the
driver to count them, :meth:`LogView.scan`, only as far as the batch goes). A log that
appears later under ``logPattern`` starts at its earliest record, as Kafka's source does for
new partitions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from bkeeper.common.errors import ConfigError, LogNotFoundError
from bkeeper.namedlog import LATEST, Position
from bkeeper.spark.log_view import LogView
from bkeeper.spark.options import LOGS_MAX, SourceOptions
from bkeeper.spark.plan import (
    EntrySpan,
    limit_spans,
    share_records,
    spans_before,
    spans_from,
)

__all__ = [
    "Move",
    "advance",
    "batch_spans",
    "count_records",
    "log_names",
    "move",
    "spans_between",
    "start_positions",
]


async def log_names(view: LogView, options: SourceOptions) -> list[str]:
    """The logs a read covers: those named (each must exist) or those matching."""
    if options.log_pattern is None:
        for name in options.logs:
            await view.metadata(name)  # LogNotFoundError names a missing log
        return list(dict.fromkeys(options.logs))
    names = [name for name in await view.names() if options.matches(name)]
    if len(names) > LOGS_MAX:
        raise ConfigError(
            f"logPattern {options.log_pattern!r} matches {len(names)} logs; at most "
            f"{LOGS_MAX} per query"
        )
    return names


async def start_positions(
    view: LogView, options: SourceOptions, names: list[str]
) -> dict[str, Position]:
    """Where each log starts: ``startingTimestamp`` if set (for every log or for this one),
    else ``startingPosition``."""
    _covered(options.starting, names, "startingPosition")
    _covered(options.starting_timestamps, names, "startingTimestamp")
    positions = {}
    for name in names:
        timestamp = options.starting_timestamps.get(name, options.starting_timestamp_ms)
        if timestamp is not None:
            positions[name] = await view.at_time(name, timestamp)
        else:
            spec = options.starting.get(name, options.starting_default)
            positions[name] = await view.resolve(name, spec)
    return positions


def _covered(named: Mapping[str, object], names: list[str], option: str) -> None:
    unknown = sorted(set(named) - set(names))
    if unknown:
        raise ConfigError(f"option {option} names logs this read does not cover: {unknown}")


async def batch_spans(view: LogView, options: SourceOptions) -> list[EntrySpan]:
    """Every span a batch read covers, log by log."""
    names = await log_names(view, options)
    _covered(options.ending, names, "endingPosition")
    _covered(options.ending_timestamps, names, "endingTimestamp")
    starts = await start_positions(view, options, names)
    found: list[EntrySpan] = []
    for name in names:
        spec = options.ending.get(name, LATEST)
        end_ms = options.ending_timestamps.get(name, options.ending_timestamp_ms)
        if end_ms is not None:  # before the first record appended at or after it
            end: Position | None = await view.at_time(name, end_ms)
        else:
            end = None if spec == LATEST else await view.resolve(name, spec)
        spans, _ = await view.spans(
            name, starts[name], end, fail_on_data_loss=options.fail_on_data_loss
        )
        found.extend(spans)
    return found


@dataclass(frozen=True)
class Move:
    """One trigger's move: the end offsets, the heads, the entries covered and their spans
    (those of the micro-batch from the start to ``ends``, in log order), and the records
    covered when a record limit counted them (else None)."""

    ends: dict[str, Position]
    heads: dict[str, Position]
    covered: int
    spans: list[EntrySpan]
    records: int | None = None


async def advance(
    view: LogView,
    options: SourceOptions,
    start: Mapping[str, Position],
    *,
    targets: Mapping[str, Position] | None = None,
    max_entries: int | None = None,
) -> tuple[dict[str, Position], dict[str, Position], int]:
    """One trigger's move: (end offsets, heads, entries covered); see :func:`move`."""
    found = await move(view, options, start, targets=targets, max_entries=max_entries)
    return found.ends, found.heads, found.covered


async def move(
    view: LogView,
    options: SourceOptions,
    start: Mapping[str, Position],
    *,
    targets: Mapping[str, Position] | None = None,
    max_entries: int | None = None,
    max_records: int | None = None,
) -> Move:
    """One trigger's move. ``targets`` (frozen for AvailableNow) bound each log;
    ``max_entries`` bounds the entries of all logs, ``max_records`` their records. Named
    logs are not looked up apart from their walk (one metadata read per log and trigger); a
    missing one fails the walk."""
    if targets is not None:
        names = list(targets)
    elif options.log_pattern is None:
        names = list(dict.fromkeys(options.logs))
    else:
        names = await log_names(view, options)
    spans: dict[str, list[EntrySpan]] = {}
    heads: dict[str, Position] = {}
    for name in names:
        try:
            origin = start[name] if name in start else await view.earliest(name)
            spans[name], heads[name] = await view.spans(
                name,
                origin,
                None if targets is None else targets[name],
                fail_on_data_loss=options.fail_on_data_loss,
            )
        except LogNotFoundError:
            if options.fail_on_data_loss and name in start:
                raise
            continue  # a log deleted under a logPattern read (or with failOnDataLoss off)
    if max_records is not None:
        return await _move_records(view, start, spans, heads, max_records)
    chosen = spans if max_entries is None else limit_spans(spans, max_entries)
    ends = dict(start)
    covered = 0
    batch: list[EntrySpan] = []
    for name, items in sorted(chosen.items()):
        count = sum(s.count for s in items)
        covered += count
        batch.extend(items)
        if count == sum(s.count for s in spans[name]):  # a prefix as long as the whole
            ends[name] = heads[name]
        elif items:
            ends[name] = Position(items[-1].ledger_id, items[-1].last + 1)
        # else: the limit left this log nothing this time (more busy logs than entries)
    return Move(ends, heads, covered, batch)


async def _move_records(
    view: LogView,
    start: Mapping[str, Position],
    spans: Mapping[str, list[EntrySpan]],
    heads: Mapping[str, Position],
    limit: int,
) -> Move:
    """A move of exactly ``limit`` records (fewer only when fewer are waiting): each round
    shares what is left of the limit among the logs with records left (``share_records``)
    and counts each log's share from where it stopped (``LogView.scan``); a log that runs
    out leaves its rest to the next round. Each round fills the limit or exhausts a log."""
    rest = {name: list(items) for name, items in spans.items()}
    cuts: dict[str, Position | None] = {}  # None: all its spans
    budget = limit
    busy = sorted(name for name in rest if rest[name])
    while budget > 0 and busy:
        shares = share_records({name: sum(s.count for s in rest[name]) for name in busy}, budget)
        for name in list(busy):
            if not shares[name]:
                continue
            scan = await view.scan(rest[name], records_max=shares[name])
            budget -= scan.records
            cuts[name] = scan.end
            rest[name] = [] if scan.end is None else spans_from(rest[name], scan.end)
            if not rest[name]:
                busy.remove(name)
    ends = dict(start)
    batch: list[EntrySpan] = []
    for name in sorted(spans):
        if name not in cuts:
            continue  # nothing to read, or the limit left it nothing this time
        cut = cuts[name]
        items = spans[name] if cut is None else spans_before(spans[name], cut)
        batch.extend(items)
        ends[name] = heads[name] if cut is None else cut
    covered = sum(span.count for span in batch)
    return Move(ends, dict(heads), covered, batch, records=limit - budget)


async def count_records(view: LogView, spans: list[EntrySpan], wanted: int) -> int:
    """The records of ``spans``, counted only up to ``wanted`` (``minRecordsPerTrigger``:
    whether that many are waiting, never the whole backlog)."""
    return (await view.scan(spans, records_max=wanted)).records


async def spans_between(
    view: LogView,
    options: SourceOptions,
    start: Mapping[str, Position],
    end: Mapping[str, Position],
) -> list[EntrySpan]:
    """The spans of one micro-batch, from offsets ``start`` to ``end``."""
    found: list[EntrySpan] = []
    for name in sorted(end):
        origin = start[name] if name in start else await view.earliest(name)
        if origin == end[name]:
            continue
        spans, _ = await view.spans(
            name, origin, end[name], fail_on_data_loss=options.fail_on_data_loss
        )
        found.extend(spans)
    return found
