"""How far a stream reading named logs is behind their heads, in records, time, entries and
bytes (no pyspark).

Spark's Python streaming API has no hook for a source's own metrics (``metrics: {}`` in every
progress report), so lag travels another way: the stream reader reports each log's head with
``reportLatestOffset`` (``latestOffset`` in a progress report, next to ``endOffset``), and
:func:`measure` turns an end and a head into records, time, entries and bytes behind per
log.
:class:`LagReport` sums them up as Kafka's source does (min/avg/max over logs) plus totals.
:class:`bkeeper.spark.LagListener` does it for every progress report of a running query;
``bkeeper log lag --checkpoint DIR`` for the last committed batch of a query that is not
running (:func:`checkpoint_offsets`).

Bytes are exact: an entry's ledger length (its digest's running total) says how many bytes
its ledger held up to it, so a partial ledger costs at most two entry reads and a whole
sealed ledger none (its metadata's length).

Records: an entry holds one record or a batch of them, and only its head says how many, so
counting costs an entry read per entry. Records behind are exact when a log is at most
``exact_entries_max`` (default :data:`EXACT_ENTRIES_MAX`) entries behind: those entries are
read and counted. Further behind, the first ``exact_entries_max`` unread entries are counted
and the rest estimated at their records per entry; ``LogLag.records_exact`` is then false
and the summary and the table print ``~`` before the number ("estimated" in JSON).

Time behind: the age of the oldest unread record, its append timestamp (one entry read, the
first unread) against the measuring machine's clock (0 when nothing is unread; clocks of
writers and reader that disagree shift it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bkeeper.common.clock import SystemClock
from bkeeper.common.errors import BKeeperError, ConfigError
from bkeeper.namedlog import Position
from bkeeper.spark.log_view import LogView
from bkeeper.spark.options import positions_from_offset

__all__ = [
    "EXACT_ENTRIES_MAX",
    "LagReport",
    "LogLag",
    "checkpoint_offsets",
    "exact_offset",
    "measure",
]

#: Entries behind up to which a log's records behind are counted exactly (each entry is read:
#: a batch entry is up to ``batch_max_bytes``); beyond, they are estimated from this many.
EXACT_ENTRIES_MAX = 100


@dataclass(frozen=True)
class LogLag:
    """One log: where the stream is, the head, and what lies between."""

    position: Position
    head: Position
    entries_behind: int
    bytes_behind: int
    #: Records from the position to the head: exact, or estimated (``records_exact``).
    records_behind: int = 0
    records_exact: bool = True
    #: The append timestamp (ms) of the first unread record (None: nothing unread).
    oldest_unread_ms: int | None = None
    #: Its age when measured (0: nothing unread).
    time_behind_ms: int = 0

    @property
    def records_text(self) -> str:
        """Records behind as printed: ``~N`` when estimated."""
        return f"{self.records_behind}" if self.records_exact else f"~{self.records_behind}"


@dataclass(frozen=True)
class LagReport:
    """The lag of every log of one stream after one batch (``batch_id``)."""

    batch_id: int
    logs: Mapping[str, LogLag] = field(default_factory=dict)

    @property
    def entries_behind(self) -> dict[str, int]:
        return {name: lag.entries_behind for name, lag in self.logs.items()}

    @property
    def bytes_behind(self) -> dict[str, int]:
        return {name: lag.bytes_behind for name, lag in self.logs.items()}

    @property
    def records_behind(self) -> dict[str, int]:
        return {name: lag.records_behind for name, lag in self.logs.items()}

    @property
    def records_behind_total(self) -> int:
        return sum(self.records_behind.values())

    @property
    def records_exact(self) -> bool:
        """Whether every log's records behind were counted, none estimated."""
        return all(lag.records_exact for lag in self.logs.values())

    @property
    def time_behind_ms(self) -> int:
        """The age of the oldest unread record of all logs."""
        return max((lag.time_behind_ms for lag in self.logs.values()), default=0)

    @property
    def entries_behind_total(self) -> int:
        return sum(self.entries_behind.values())

    @property
    def bytes_behind_total(self) -> int:
        return sum(self.bytes_behind.values())

    @property
    def entries_behind_min(self) -> int:
        return min(self.entries_behind.values(), default=0)

    @property
    def entries_behind_max(self) -> int:
        return max(self.entries_behind.values(), default=0)

    @property
    def entries_behind_avg(self) -> float:
        values = self.entries_behind.values()
        return sum(values) / len(values) if values else 0.0

    def summary(self) -> str:
        """One line: totals, and min/avg/max over logs."""
        records = ("" if self.records_exact else "~") + str(self.records_behind_total)
        estimated = "" if self.records_exact else " (estimated)"
        return (
            f"batch {self.batch_id}: {records} records behind{estimated}, oldest unread "
            f"{self.time_behind_ms / 1000:.1f} s old; {self.entries_behind_total} entries behind "
            f"({self.bytes_behind_total} bytes) in {len(self.logs)} logs; entries per log "
            f"min/avg/max "
            f"{self.entries_behind_min}/{self.entries_behind_avg:.1f}/{self.entries_behind_max}"
        )

    def to_json(self) -> dict[str, Any]:
        def stats(values: list[int]) -> dict[str, float | int]:
            return {
                "total": sum(values),
                "min": min(values, default=0),
                "avg": sum(values) / len(values) if values else 0.0,
                "max": max(values, default=0),
            }

        return {
            "batch": self.batch_id,
            "logs": {
                name: {
                    "position": str(lag.position),
                    "head": str(lag.head),
                    "records_behind": lag.records_behind,
                    "records": "exact" if lag.records_exact else "estimated",
                    "oldest_unread_ms": lag.oldest_unread_ms,
                    "time_behind_ms": lag.time_behind_ms,
                    "entries_behind": lag.entries_behind,
                    "bytes_behind": lag.bytes_behind,
                }
                for name, lag in sorted(self.logs.items())
            },
            "records_behind": {
                **stats(list(self.records_behind.values())),
                "records": "exact" if self.records_exact else "estimated",
            },
            "time_behind_ms": self.time_behind_ms,
            "entries_behind": stats(list(self.entries_behind.values())),
            "bytes_behind": stats(list(self.bytes_behind.values())),
        }


def exact_offset(text: str | None) -> dict[str, Position] | None:
    """The positions of a bkeeper stream offset (JSON), None when ``text`` is not one (another
    source's offset, or no offset)."""
    if not text:
        return None
    try:
        positions = positions_from_offset(text)
    except (ConfigError, BKeeperError):
        return None
    if not positions or not all(isinstance(p, Position) for p in positions.values()):
        return None
    return {name: p for name, p in positions.items() if isinstance(p, Position)}


async def measure(
    view: LogView,
    positions: Mapping[str, Position],
    heads: Mapping[str, Position] | None = None,
    *,
    now_ms: int | None = None,
    exact_entries_max: int = EXACT_ENTRIES_MAX,
) -> dict[str, LogLag]:
    """Records, time, entries and bytes from each log's position up to its head (``heads``,
    else the head now); records exact up to ``exact_entries_max`` entries behind, else
    estimated (module doc). Ranges lost to a truncation count as nothing behind."""
    now_ms = SystemClock().wall_ms() if now_ms is None else now_ms
    found = {}
    for name, position in sorted(positions.items()):
        head = heads[name] if heads is not None and name in heads else await view.latest(name)
        spans, _ = await view.spans(name, position, head, fail_on_data_loss=False)
        entries = sum(span.count for span in spans)
        size = 0
        for span in spans:
            size += await view.span_bytes(span)
        counted = await view.scan(spans, entries_max=exact_entries_max)
        exact = counted.entries >= entries
        records = counted.records
        if not exact and counted.entries:
            records += round(counted.records / counted.entries * (entries - counted.entries))
        oldest = await view.first_timestamp(spans) if entries else None
        behind_ms = 0 if oldest is None else max(0, now_ms - oldest)
        found[name] = LogLag(position, head, entries, size, records, exact, oldest, behind_ms)
    return found


def checkpoint_offsets(checkpoint: Path) -> tuple[int, dict[str, Position]]:
    """The last committed batch of a streaming query's checkpoint and where it left each
    bkeeper log (every source of the query that reads named logs)."""
    commits = checkpoint / "commits"
    offsets = checkpoint / "offsets"
    if not offsets.is_dir():
        raise ConfigError(f"{checkpoint} is not a streaming query's checkpoint (no offsets/)")
    committed = sorted(
        (int(p.name) for p in commits.iterdir() if p.name.isdigit()) if commits.is_dir() else []
    )
    if not committed:
        raise ConfigError(f"checkpoint {checkpoint}: no batch committed yet")
    batch = committed[-1]
    lines = (offsets / str(batch)).read_text().splitlines()
    positions: dict[str, Position] = {}
    for line in lines[2:]:  # a version line, the batch's metadata, then one line per source
        found = exact_offset(line)
        if found:
            positions.update(found)
    if not positions:
        raise ConfigError(f"checkpoint {checkpoint}: batch {batch} read no bkeeper log")
    return batch, positions


def parse_progress_offsets(
    source: Mapping[str, Any],
) -> tuple[dict[str, Position], dict[str, Position]] | None:
    """(end, head) of one source's progress, when it is a bkeeper source with a head."""
    end = exact_offset(_text(source.get("endOffset")))
    head = exact_offset(_text(source.get("latestOffset")))
    if end is None or head is None:
        return None
    return end, head


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value)
