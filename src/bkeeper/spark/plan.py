"""Planning reads of named logs for Spark: spans of entries, splits and read limits.

A span (:class:`~bkeeper.namedlog.walk.EntrySpan`) is a run of consecutive confirmed entries
of one ledger (at or below the LAC when planned, or in a sealed ledger), so reading it is
deterministic: a replayed Spark task reads exactly the same records. The log's structure is
the walk's (:mod:`bkeeper.namedlog.walk`: the positions, what ``latest`` means, where spans
stop); :class:`~bkeeper.spark.log_view.LogView` asks it for the spans up to an end (or the head)
and the position after them, and decides what data loss means for Spark. This module's pure
functions split spans into Spark partitions and share a read limit among logs.

Records, not entries: an entry holds one record or a batch of them, so a limit in records
(``maxRecordsPerTrigger``) needs the record count of the entries it covers. Only entry heads
say it, so :meth:`~bkeeper.spark.log_view.LogView.scan` reads the entries of a span in order
on the driver, as far as the limit needs and no further (the batch's own entries, read once
more by its tasks), and gives the position after the last record it counted: ``(L, E, I)``
when that cuts the batch in entry E, which the next batch starts from (``first_index``).
:func:`spans_before` and :func:`spans_from` cut spans at such a position.

Data loss (a start before the log's first ledger when a truncation moved past it, or a
ledger of the list whose metadata is gone): with ``fail_on_data_loss`` the view raises
:class:`LogTruncatedError` naming the first gap; otherwise it skips each and logs a warning.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from bkeeper.namedlog import EntrySpan, Position

__all__ = [
    "Bounds",
    "EntrySpan",
    "at_least",
    "entry_caps",
    "limit_spans",
    "partition_spans",
    "share_records",
    "spans_before",
    "spans_from",
    "split_spans",
]


@dataclass(frozen=True)
class Bounds:
    """What pushed-down filters allow: a set of logs and inclusive ranges of ledger and entry
    ids (None: no bound). Narrowing spans with them only drops entries the filters reject,
    so Spark evaluating the filters again gives the same rows, from fewer reads."""

    logs: frozenset[str] | None = None
    ledger_min: int | None = None
    ledger_max: int | None = None
    entry_min: int | None = None
    entry_max: int | None = None

    def restrict(self, column: str, op: str, value: object) -> Bounds:
        """These bounds and ``column op value`` (op: ``=``, ``<``, ``<=``, ``>``, ``>=``,
        ``in``); unknown columns, ops and values change nothing."""
        if column == "log":
            names = _names(op, value)
            if names is None:
                return self
            return replace(self, logs=names if self.logs is None else self.logs & names)
        if column not in ("ledger", "entry"):
            return self
        low, high = _int_range(op, value)
        key_min, key_max = f"{column}_min", f"{column}_max"
        current_min, current_max = getattr(self, key_min), getattr(self, key_max)
        if low is not None:
            current_min = low if current_min is None else max(current_min, low)
        if high is not None:
            current_max = high if current_max is None else min(current_max, high)
        return replace(self, **{key_min: current_min, key_max: current_max})

    def narrow(self, spans: Sequence[EntrySpan]) -> list[EntrySpan]:
        kept = []
        for span in spans:
            if self.logs is not None and span.log not in self.logs:
                continue
            if self.ledger_min is not None and span.ledger_id < self.ledger_min:
                continue
            if self.ledger_max is not None and span.ledger_id > self.ledger_max:
                continue
            first = span.first if self.entry_min is None else max(span.first, self.entry_min)
            last = span.last if self.entry_max is None else min(span.last, self.entry_max)
            if first <= last:
                kept.append(_piece(span, first, last))
        return kept


def _names(op: str, value: object) -> frozenset[str] | None:
    if op == "=" and isinstance(value, str):
        return frozenset((value,))
    if op == "in" and isinstance(value, tuple | list | frozenset | set):
        names = [v for v in value if isinstance(v, str)]
        return frozenset(names) if len(names) == len(value) else None
    return None


def _int_range(op: str, value: object) -> tuple[int | None, int | None]:
    """The inclusive id range ``x op value`` allows (None, None when it says nothing)."""
    if op == "in" and isinstance(value, tuple | list | frozenset | set):
        ints = [v for v in value if isinstance(v, int) and not isinstance(v, bool)]
        if ints and len(ints) == len(value):
            return min(ints), max(ints)
        return None, None
    if not isinstance(value, int) or isinstance(value, bool):
        return None, None
    return {
        "=": (value, value),
        ">": (value + 1, None),
        ">=": (value, None),
        "<": (None, value - 1),
        "<=": (None, value),
    }.get(op, (None, None))


def _piece(span: EntrySpan, first: int, last: int) -> EntrySpan:
    """Entries ``first..last`` of ``span``: a piece keeps the span's ``first_index`` only
    if it starts at the span's first entry, and its ``end_index`` only if it ends at its last."""
    return replace(
        span,
        first=first,
        last=last,
        first_index=span.first_index if first == span.first else 0,
        end_index=span.end_index if last == span.last else 0,
    )


def split_spans(
    spans: Sequence[EntrySpan],
    max_entries: int,
    entry_caps: Mapping[str, int] | None = None,
) -> list[EntrySpan]:
    """``spans`` cut into pieces of at most ``max_entries`` entries (or the log's cap in
    ``entry_caps``, when smaller: see :func:`entry_caps`), in order."""
    pieces = []
    for span in spans:
        step = _cap(span, max_entries, entry_caps)
        for first in range(span.first, span.last + 1, step):
            pieces.append(_piece(span, first, min(span.last, first + step - 1)))
    return pieces


def _cap(span: EntrySpan, max_entries: int, entry_caps: Mapping[str, int] | None) -> int:
    if entry_caps is None or span.log not in entry_caps:
        return max_entries
    return max(1, min(max_entries, entry_caps[span.log]))


def entry_caps(entry_bytes: Mapping[str, float], max_bytes: int) -> dict[str, int]:
    """Entries per split of each log so that a split holds about ``max_bytes`` bytes, from
    each log's average entry size (``LogView.entry_bytes``)."""
    return {log: max(1, int(max_bytes // size)) for log, size in entry_bytes.items() if size > 0}


def partition_spans(
    spans: Sequence[EntrySpan],
    max_entries: int,
    entry_caps: Mapping[str, int] | None = None,
) -> list[tuple[EntrySpan, ...]]:
    """Spark partitions: ``spans`` split to at most ``max_entries`` entries each (or their
    log's cap in ``entry_caps``: about ``maxBytesPerSplit`` bytes), and runs of small ones
    (many small ledgers) packed together up to that size, in order."""
    groups: list[tuple[EntrySpan, ...]] = []
    group: list[EntrySpan] = []
    size = 0.0
    for piece in split_spans(spans, max_entries, entry_caps):
        share = piece.count / _cap(piece, max_entries, entry_caps)
        if group and size + share > 1.0:
            groups.append(tuple(group))
            group, size = [], 0.0
        group.append(piece)
        size += share
    if group:
        groups.append(tuple(group))
    return groups


def at_least(
    groups: Sequence[tuple[EntrySpan, ...]], minimum: int | None
) -> list[tuple[EntrySpan, ...]]:
    """``minPartitions``: ``groups`` (Spark partitions, in order) with the largest one cut in
    two halves of its entries until there are ``minimum`` of them, or every one holds a
    single entry (a partition reads whole entries: never more partitions than entries)."""
    if minimum is None or len(groups) >= minimum:
        return list(groups)
    # (-entries, order key, group): the order key keeps the halves where their group was.
    heap: list[tuple[int, tuple[int, ...], tuple[EntrySpan, ...]]] = [
        (-_entries(g), (i,), g) for i, g in enumerate(groups)
    ]
    heapq.heapify(heap)
    while len(heap) < minimum and heap and -heap[0][0] > 1:
        _, key, group = heapq.heappop(heap)
        left, right = _halves(group)
        heapq.heappush(heap, (-_entries(left), (*key, 0), left))
        heapq.heappush(heap, (-_entries(right), (*key, 1), right))
    return [group for _, _, group in sorted(heap, key=lambda item: item[1])]


def _entries(group: Sequence[EntrySpan]) -> int:
    return sum(span.count for span in group)


def _halves(group: tuple[EntrySpan, ...]) -> tuple[tuple[EntrySpan, ...], tuple[EntrySpan, ...]]:
    half = _entries(group) // 2
    left: list[EntrySpan] = []
    right: list[EntrySpan] = []
    taken = 0
    for span in group:
        if taken >= half:
            right.append(span)
        elif taken + span.count <= half:
            left.append(span)
            taken += span.count
        else:
            cut = span.first + half - taken
            left.append(_piece(span, span.first, cut - 1))
            right.append(_piece(span, cut, span.last))
            taken = half
    return tuple(left), tuple(right)


def spans_before(spans: Sequence[EntrySpan], end: Position) -> list[EntrySpan]:
    """The part of one log's ``spans`` before ``end`` (exclusive; with an index, entry E is
    kept up to that record: ``end_index``)."""
    kept = []
    for span in spans:
        if span.ledger_id < end.ledger_id:
            kept.append(span)
            continue
        if span.ledger_id > end.ledger_id:
            break
        last = min(span.last, end.entry_id if end.index else end.entry_id - 1)
        if last < span.first:
            break
        piece = _piece(span, span.first, last)
        if end.index and last == end.entry_id:
            piece = replace(piece, end_index=end.index)
        kept.append(piece)
    return kept


def spans_from(spans: Sequence[EntrySpan], start: Position) -> list[EntrySpan]:
    """The part of one log's ``spans`` from ``start`` on (with an index, entry E from that
    record on: ``first_index``)."""
    kept = []
    for span in spans:
        if span.ledger_id != start.ledger_id:
            if span.ledger_id > start.ledger_id:
                kept.append(span)
            continue
        if span.last < start.entry_id:
            continue
        if start.entry_id < span.first or (start.entry_id == span.first and not start.index):
            kept.append(span)
            continue
        piece = _piece(span, start.entry_id, span.last)
        if start.index:
            piece = replace(piece, first_index=max(start.index, piece.first_index))
        if piece.first == piece.last and piece.end_index and piece.first_index >= piece.end_index:
            continue  # nothing left of it
        kept.append(piece)
    return kept


def share_records(backlog: Mapping[str, int], limit: int) -> dict[str, int]:
    """``limit`` records shared among logs in proportion to ``backlog`` (their entries
    behind: their records are not counted yet), every log with a backlog getting at least
    one while the limit allows, the busiest first; logs with none get 0."""
    busy = sorted((name for name in backlog if backlog[name] > 0), key=lambda n: (-backlog[n], n))
    share = dict.fromkeys(backlog, 0)
    for name in busy[:limit]:
        share[name] = 1
    rest = limit - sum(share.values())
    total = sum(backlog[name] for name in busy)
    for name in busy:
        share[name] += rest * backlog[name] // total if total else 0
    spare = limit - sum(share.values())
    for name in busy[:spare]:
        share[name] += 1
    return share


def limit_spans(
    spans: Mapping[str, Sequence[EntrySpan]], max_entries: int
) -> dict[str, list[EntrySpan]]:
    """At most ``max_entries`` entries in all, shared among logs in proportion to their
    backlog (every log with a backlog gets at least one entry while the limit allows);
    each log keeps a prefix of its spans."""
    backlog = {name: sum(s.count for s in items) for name, items in spans.items()}
    total = sum(backlog.values())
    if total <= max_entries:
        return {name: list(items) for name, items in spans.items()}
    busy = sorted((name for name in backlog if backlog[name]), key=lambda n: (-backlog[n], n))
    share = dict.fromkeys(backlog, 0)
    for name in busy[:max_entries]:
        share[name] = 1
    rest = max_entries - sum(share.values())
    extra = sum(backlog[name] - share[name] for name in busy)
    for name in busy:
        share[name] += rest * (backlog[name] - share[name]) // extra if extra else 0
    spare = max_entries - sum(share.values())
    for name in busy:
        if spare <= 0:
            break
        if share[name] < backlog[name]:
            share[name] += 1
            spare -= 1
    return {name: _prefix(spans[name], share[name]) for name in spans}


def _prefix(spans: Sequence[EntrySpan], count: int) -> list[EntrySpan]:
    kept = []
    for span in spans:
        if count <= 0:
            break
        if span.count <= count:
            kept.append(span)
        else:
            kept.append(_piece(span, span.first, span.first + count - 1))
        count -= kept[-1].count
    return kept
