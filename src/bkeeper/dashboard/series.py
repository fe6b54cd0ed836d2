"""What the dashboard plots, from bookies' Prometheus text: pure, no I/O.

A scrape of one bookie's ``/metrics`` becomes a :class:`Scrape` (the counters and the add
latency histogram the charts need, by the names of docs/operations.md "## Metrics"); two
scrapes of the same bookie make a :class:`Point`: adds/s, reads/s (``read``, ``batch_read``
and ``long_poll`` requests) and the p99 of add latency over the interval between them,
computed from the histogram's bucket deltas the way Prometheus' ``histogram_quantile`` does
(linear within the bucket; the highest finite bound when it falls in ``+Inf``). A counter
that went down means the bookie restarted: its new value is the increase, as Prometheus'
``rate`` takes it. :class:`History` keeps at most ``points_max`` points per bookie.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from bkeeper.common.errors import ProtocolError

__all__ = ["History", "Point", "Scrape", "histogram_quantile", "parse_scrape", "point_between"]

REQUESTS = "bkeeper_bookie_requests_total"
LATENCY_BUCKET = "bkeeper_bookie_request_latency_seconds_bucket"
UNDER_REPLICATED = "bkeeper_autorecovery_under_replicated_ledgers"
REREPLICATED_LEDGERS = "bkeeper_autorecovery_rereplicated_ledgers_total"
REREPLICATED_BYTES = "bkeeper_autorecovery_rereplicated_bytes_total"
READ_OPS = frozenset({"read", "batch_read", "long_poll"})
QUANTILE = 0.99


@dataclass(frozen=True)
class Scrape:
    """One bookie's counters at ``time_s`` (the dashboard's monotonic clock)."""

    time_s: float
    adds: float
    reads: float
    #: ``(upper bound, cumulative count)`` of the add latency histogram, ascending.
    add_latency_buckets: tuple[tuple[float, float], ...]
    rereplicated_ledgers: float | None = None
    rereplicated_bytes: float | None = None
    under_replicated: float | None = None


@dataclass(frozen=True)
class Point:
    """One interval of one bookie: ``time_ms`` (wall clock, for the chart's axis) ends it."""

    time_ms: int
    adds_per_s: float
    reads_per_s: float
    add_p99_s: float | None  # None: no add in the interval


def parse_scrape(text: str, time_s: float) -> Scrape:
    """The :class:`Scrape` in Prometheus text ``text``; ``ProtocolError`` naming the problem
    when it is not Prometheus text. Metrics it does not name count as 0 (absent)."""
    adds = reads = 0.0
    buckets: dict[float, float] = {}
    others: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                name, labels, value = sample.name, sample.labels, float(sample.value)
                op = labels.get("op")
                if name == REQUESTS and op == "add":
                    adds += value
                elif name == REQUESTS and op in READ_OPS:
                    reads += value
                elif name == LATENCY_BUCKET and op == "add":
                    bound = float(labels["le"])
                    buckets[bound] = buckets.get(bound, 0.0) + value
                elif name in (UNDER_REPLICATED, REREPLICATED_LEDGERS, REREPLICATED_BYTES):
                    others[name] = others.get(name, 0.0) + value
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        raise ProtocolError(f"not Prometheus text: {exc}") from exc
    return Scrape(
        time_s,
        adds,
        reads,
        tuple(sorted(buckets.items())),
        others.get(REREPLICATED_LEDGERS),
        others.get(REREPLICATED_BYTES),
        others.get(UNDER_REPLICATED),
    )


def _increase(before: float, after: float) -> float:
    return after if after < before else after - before


def histogram_quantile(q: float, buckets: Iterable[tuple[float, float]]) -> float | None:
    """The ``q`` quantile of cumulative ``(upper bound, count)`` buckets; None if empty."""
    ordered = sorted(buckets)
    if not ordered or ordered[-1][1] <= 0:
        return None
    rank = q * ordered[-1][1]
    lower, below = 0.0, 0.0
    for bound, count in ordered:
        if count >= rank:
            if math.isinf(bound):
                return lower
            if count == below:
                return bound
            return lower + (bound - lower) * (rank - below) / (count - below)
        lower, below = bound, count
    return lower


def point_between(before: Scrape, after: Scrape, time_ms: int) -> Point | None:
    """The interval from ``before`` to ``after``; None unless time went forward."""
    elapsed_s = after.time_s - before.time_s
    if elapsed_s <= 0:
        return None
    old = dict(before.add_latency_buckets)
    deltas = [(bound, count - old.get(bound, 0.0)) for bound, count in after.add_latency_buckets]
    if any(delta < 0 for _bound, delta in deltas):  # restarted: everything is new
        deltas = list(after.add_latency_buckets)
    return Point(
        time_ms,
        _increase(before.adds, after.adds) / elapsed_s,
        _increase(before.reads, after.reads) / elapsed_s,
        histogram_quantile(QUANTILE, deltas),
    )


@dataclass
class _Series:
    last: Scrape | None = None
    points: deque[Point] = field(default_factory=deque)


class History:
    """Points per bookie, at most ``points_max`` each (the oldest go first)."""

    def __init__(self, points_max: int) -> None:
        self.points_max = points_max
        self._series: dict[str, _Series] = {}

    def add(self, bookie_id: str, scrape: Scrape, time_ms: int) -> Point | None:
        """Record ``scrape``; the point it ends, if there was an earlier scrape."""
        series = self._series.setdefault(bookie_id, _Series(None, deque(maxlen=self.points_max)))
        point = None if series.last is None else point_between(series.last, scrape, time_ms)
        if point is not None:
            series.points.append(point)
        series.last = scrape
        return point

    def keep_only(self, bookie_ids: Iterable[str]) -> None:
        """Forget the bookies not in ``bookie_ids`` (gone from the cluster)."""
        wanted = set(bookie_ids)
        for gone in [b for b in self._series if b not in wanted]:
            del self._series[gone]

    def last_scrape(self, bookie_id: str) -> Scrape | None:
        series = self._series.get(bookie_id)
        return None if series is None else series.last

    def points(self) -> Mapping[str, list[Point]]:
        return {bookie: list(s.points) for bookie, s in sorted(self._series.items())}
