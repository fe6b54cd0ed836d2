"""Span arithmetic of a named log's ledger list, pure: runs of confirmed entries
(:class:`EntrySpan`), ranges lost to truncation (:class:`LostRange`), a ledger's end, where a
log starts and which listed ledger a position falls in. The walk that reads ledgers to find
them is :class:`~bkeeper.namedlog.walk.LogWalk` (its module docstring gives the rules)."""

from __future__ import annotations

from dataclasses import dataclass, field

from bkeeper.namedlog.core.log_metadata import LogMetadata
from bkeeper.namedlog.core.records import Position

__all__ = ["EntrySpan", "LedgerEnd", "LostRange", "Walked", "earliest", "locate"]


@dataclass(frozen=True, order=True)
class EntrySpan:
    """Confirmed entries ``first..last`` (inclusive) of ledger ``ledger_id`` of log ``log``;
    ``sealed`` says the ledger was sealed when walked (else the span ends at or below its
    LAC). Reading one is deterministic: a replayed read gets exactly the same records."""

    log: str
    ledger_id: int
    first: int
    last: int
    sealed: bool = True
    #: Of entry ``first``'s records, those from this index on (0: all).
    first_index: int = 0
    #: Of entry ``last``'s records, those before this index only (0: all).
    end_index: int = 0

    @property
    def count(self) -> int:
        return self.last - self.first + 1


@dataclass(frozen=True)
class LostRange:
    """Records from ``start`` up to (not including) ``first_left`` are gone: truncated, or
    their ledger deleted, before they were read."""

    start: Position
    first_left: Position


@dataclass(frozen=True)
class Walked:
    """What :meth:`LogWalk.spans` found: the spans in log order, the position after them,
    and the ranges lost on the way."""

    spans: list[EntrySpan]
    after: Position
    lost: list[LostRange] = field(default_factory=list)


@dataclass(frozen=True)
class LedgerEnd:
    """A ledger's last confirmed entry: its last entry when ``sealed``, else its LAC."""

    last: int
    sealed: bool


def earliest(meta: LogMetadata) -> Position:
    """The first record of the log (``(0, 0)`` when it has no ledger)."""
    return Position(meta.ledgers[0].ledger_id, 0) if meta.ledgers else Position(0, 0)


def locate(meta: LogMetadata, position: Position) -> int | None:
    """The index in ``meta.ledgers`` of the ledger ``position`` falls in: the first one whose
    id is at least ``position.ledger_id`` (None: past the last ledger)."""
    return next((i for i, x in enumerate(meta.ledgers) if x.ledger_id >= position.ledger_id), None)
