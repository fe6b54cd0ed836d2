"""Planning reads of named logs for Spark: spans of entries, splits and read limits.

A *span* is a run of consecutive entries of one ledger, all confirmed (at or below the LAC
when planned, or in a sealed ledger), so reading it is deterministic: a replayed Spark task
reads exactly the same records. :class:`LogView` walks a log's ledger list from a position
and returns the spans up to an end (or the head) and the position after them; the pure
functions split spans into Spark partitions and share a read limit among logs.

Rules of the walk:

* A position ``(L, E)`` is record E of ledger L; when L is not in the list it means the first
  record of the first ledger after L (so ``(L + 1, 0)`` follows a sealed ledger L).
* The walk stops at the first ledger that is not sealed, at its LAC: a ledger being sealed
  after a roll may still gain confirmed entries past the LAC seen now, so nothing after it
  is read yet.
* Data loss: a start before the log's first ledger, when a truncation moved past it, or a
  ledger of the list whose metadata is gone. With ``fail_on_data_loss`` this raises
  :class:`LogTruncatedError` naming the gap; otherwise the walk skips it and logs a warning.
* Sealed ledgers' last entry ids never change, so they are cached (``sealed_cache_max``).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from bkeeper.common.errors import LedgerNotFoundError, LogTruncatedError
from bkeeper.namedlog import EARLIEST, LATEST, NamedLogs, Position
from bkeeper.namedlog.metadata import LogMetadata

__all__ = ["Bounds", "LogView", "Span", "limit_spans", "partition_spans", "split_spans"]

log = logging.getLogger(__name__)

#: Sealed ledgers whose last entry id a view remembers.
SEALED_CACHE_MAX = 100_000


@dataclass(frozen=True, order=True)
class Span:
    """Entries ``first..last`` (inclusive) of ``ledger_id`` in ``log``; ``sealed`` says the
    ledger was sealed when planned (else the span ends at or below its LAC)."""

    log: str
    ledger_id: int
    first: int
    last: int
    sealed: bool = True

    @property
    def count(self) -> int:
        return self.last - self.first + 1


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

    def narrow(self, spans: Sequence[Span]) -> list[Span]:
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
                kept.append(Span(span.log, span.ledger_id, first, last, span.sealed))
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


def split_spans(spans: Sequence[Span], max_entries: int) -> list[Span]:
    """``spans`` cut into pieces of at most ``max_entries`` entries, in order."""
    pieces = []
    for span in spans:
        for first in range(span.first, span.last + 1, max_entries):
            last = min(span.last, first + max_entries - 1)
            pieces.append(Span(span.log, span.ledger_id, first, last, span.sealed))
    return pieces


def partition_spans(spans: Sequence[Span], max_entries: int) -> list[tuple[Span, ...]]:
    """Spark partitions: ``spans`` split to at most ``max_entries`` entries each, and runs
    of small ones (many small ledgers) packed together up to that size, in order."""
    groups: list[tuple[Span, ...]] = []
    group: list[Span] = []
    size = 0
    for piece in split_spans(spans, max_entries):
        if group and size + piece.count > max_entries:
            groups.append(tuple(group))
            group, size = [], 0
        group.append(piece)
        size += piece.count
    if group:
        groups.append(tuple(group))
    return groups


def limit_spans(spans: Mapping[str, Sequence[Span]], max_entries: int) -> dict[str, list[Span]]:
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


def _prefix(spans: Sequence[Span], count: int) -> list[Span]:
    kept = []
    for span in spans:
        if count <= 0:
            break
        if span.count <= count:
            kept.append(span)
        else:
            kept.append(Span(span.log, span.ledger_id, span.first, span.first + count - 1,
                             span.sealed))  # fmt: skip
        count -= kept[-1].count
    return kept


class LogView:
    """Reads logs' structure for planning (driver side); see the module docstring."""

    def __init__(self, logs: NamedLogs, sealed_cache_max: int = SEALED_CACHE_MAX) -> None:
        self._logs = logs
        self._sealed: OrderedDict[int, int] = OrderedDict()
        self._sealed_cache_max = sealed_cache_max

    async def names(self) -> list[str]:
        return sorted(await self._logs.names())

    async def metadata(self, name: str) -> LogMetadata:
        return await self._logs.log(name).metadata()

    async def earliest(self, name: str) -> Position:
        meta = await self.metadata(name)
        return Position(meta.ledgers[0].ledger_id, 0) if meta.ledgers else Position(0, 0)

    async def latest(self, name: str) -> Position:
        """After the last confirmed record of the log's last ledger (records from now on)."""
        meta = await self.metadata(name)
        if not meta.ledgers:
            return Position(0, 0)
        ledger_id = meta.ledgers[-1].ledger_id
        last = await self._last_entry(ledger_id)
        return Position(ledger_id, (last[0] if last else -1) + 1)

    async def at_time(self, name: str, timestamp_ms: int) -> Position:
        """The first record appended at or after ``timestamp_ms`` (else ``latest``)."""
        reader = await self._logs.log(name).open_reader(timestamp_ms)
        try:
            return await reader.seek()
        finally:
            await reader.close()

    async def resolve(self, name: str, spec: str | Position) -> Position:
        if isinstance(spec, Position):
            return spec
        if spec == EARLIEST:
            return await self.earliest(name)
        if spec == LATEST:
            return await self.latest(name)
        raise ValueError(spec)

    async def _last_entry(self, ledger_id: int) -> tuple[int, bool] | None:
        """(last entry id, sealed) of a ledger: its last entry if sealed, else its LAC;
        None when the ledger is gone."""
        cached = self._sealed.get(ledger_id)
        if cached is not None:
            self._sealed.move_to_end(ledger_id)
            return cached, True
        logs = self._logs
        try:
            handle = await logs.bk.open_ledger(ledger_id, logs.config.password, recovery=False)
        except LedgerNotFoundError:
            return None
        if handle.is_closed:
            last = handle.metadata.last_entry_id
            self._sealed[ledger_id] = last
            if len(self._sealed) > self._sealed_cache_max:
                self._sealed.popitem(last=False)
            return last, True
        return await handle.read_last_add_confirmed(), False

    async def spans(
        self,
        name: str,
        start: Position,
        end: Position | None = None,
        *,
        fail_on_data_loss: bool = True,
    ) -> tuple[list[Span], Position]:
        """The spans from ``start`` up to ``end`` (exclusive; None: the head) and the
        position after them."""
        meta = await self.metadata(name)
        ledgers = meta.ledgers
        index = next((i for i, x in enumerate(ledgers) if x.ledger_id >= start.ledger_id), None)
        if index is None:
            return [], start
        if index == 0 and ledgers[0].ledger_id != start.ledger_id:
            first = Position(ledgers[0].ledger_id, 0)
            mark = meta.truncated_before
            if mark is not None and start < mark:
                self._data_lost(name, start, first, fail_on_data_loss)
        found: list[Span] = []
        after = start
        for ledger in ledgers[index:]:
            ledger_id = ledger.ledger_id
            if end is not None and ledger_id > end.ledger_id:
                return found, end
            first_entry = start.entry_id if ledger_id == start.ledger_id else 0
            last_entry = await self._last_entry(ledger_id)
            if last_entry is None:
                after = Position(ledger_id + 1, 0)
                self._data_lost(name, Position(ledger_id, first_entry), after, fail_on_data_loss)
                continue
            last, sealed = last_entry
            if end is not None and ledger_id == end.ledger_id:
                last = min(last, end.entry_id - 1)
            if first_entry <= last:
                found.append(Span(name, ledger_id, first_entry, last, sealed))
            after = Position(ledger_id, max(first_entry, last + 1))
            if not sealed or (end is not None and ledger_id == end.ledger_id):
                break
        return found, after

    @staticmethod
    def _data_lost(name: str, start: Position, first: Position, fail: bool) -> None:
        message = (
            f"log {name!r}: records from {start} up to {first} are gone (truncated or "
            "deleted) before they were read"
        )
        if fail:
            raise LogTruncatedError(message + "; set failOnDataLoss=false to skip them and go on")
        log.warning("%s; skipping them (failOnDataLoss=false)", message)
