"""Metric primitives: plain Python objects, cheap enough for the hot paths that batch.

A component owns its metrics (one :class:`MetricSet` per bookie, client or auditor instance,
never a global registry: tests run several bookies in one process) and updates them with
attribute arithmetic: :class:`Counter` and :class:`Gauge` hold a number in ``value``, a
:class:`Histogram` has fixed buckets and counts an observation with one ``bisect``. Hot paths
count per batch (``Histogram.observe_many(value, n)``: n observations of one value), never
per entry. Values that are cheaper to read than to keep up to date are gauges read at
collection time (``Gauge(read=...)``), and a set's ``on_collect`` hooks refresh several
under one lock.

Nothing here imports prometheus-client: the exposition (``bkeeper.common.metrics_export``)
walks :meth:`MetricSet.families` when scraped. Updates are not locked: a counter or a
histogram is updated by one thread (the event loop, or one journal thread: each journal has
histograms of its own, merged when collected), and readers tolerate a scrape that sees an
update half done (a bucket counted, the sum not yet).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Literal

from bkeeper.common.errors import ConfigError

__all__ = [
    "BYTES_BUCKETS",
    "COUNT_BUCKETS",
    "LATENCY_BUCKETS_S",
    "Counter",
    "Family",
    "Gauge",
    "Histogram",
    "HistogramSnapshot",
    "MetricSet",
]

#: Seconds: 50 µs to 10 s (an in-memory read to a stuck fsync).
LATENCY_BUCKETS_S: tuple[float, ...] = (
    0.00005,
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
#: Counts per batch: 1 to 10,000.
COUNT_BUCKETS: tuple[float, ...] = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000)
#: Bytes per batch: 1 KiB to 64 MiB.
BYTES_BUCKETS: tuple[float, ...] = tuple(float(1024 * 4**i) for i in range(9))

Kind = Literal["counter", "gauge", "histogram"]
Labels = tuple[tuple[str, str], ...]


class Counter:
    """A count that only grows: ``counter.value += n``."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value: float = 0

    def inc(self, amount: float = 1) -> None:
        self.value += amount


class Gauge:
    """A value that goes up and down: set ``value``, or give ``read`` (called when collected)."""

    __slots__ = ("read", "value")

    def __init__(self, read: Callable[[], float] | None = None) -> None:
        self.value: float = 0
        self.read = read

    def set(self, value: float) -> None:
        self.value = value

    def current(self) -> float:
        return self.value if self.read is None else self.read()


@dataclass(frozen=True)
class HistogramSnapshot:
    """Cumulative bucket counts (``le`` each bound, then +Inf), sum and count."""

    bounds: tuple[float, ...]
    cumulative: tuple[int, ...]
    sum: float
    count: int


class Histogram:
    """Fixed buckets: ``counts[i]`` observations of at most ``bounds[i]`` (and above all of
    them, the last); the bucket is found by bisect."""

    __slots__ = ("bounds", "count", "counts", "sum")

    def __init__(self, bounds: Sequence[float] = LATENCY_BUCKETS_S) -> None:
        bounds = tuple(float(b) for b in bounds)
        if not bounds or any(b >= c for b, c in pairwise(bounds)):
            raise ConfigError(f"histogram bounds: must be increasing and not empty, got {bounds}")
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def observe_many(self, value: float, n: int) -> None:
        """``n`` observations of ``value`` (a batch whose members share one measure)."""
        self.counts[bisect_left(self.bounds, value)] += n
        self.sum += value * n
        self.count += n

    def snapshot(self) -> HistogramSnapshot:
        return _merge(self.bounds, [self])


def _merge(bounds: tuple[float, ...], parts: Sequence[Histogram]) -> HistogramSnapshot:
    counts = [0] * (len(bounds) + 1)
    total = 0.0
    for part in parts:
        if part.bounds != bounds:
            raise ConfigError("histograms merged into one series must share their bounds")
        for i, n in enumerate(part.counts):
            counts[i] += n
        total += part.sum
    cumulative: list[int] = []
    running = 0
    for n in counts:
        running += n
        cumulative.append(running)
    return HistogramSnapshot(bounds, tuple(cumulative), total, running)


Metric = Counter | Gauge | Histogram


@dataclass
class Family:
    """One metric name: its kind, help text, label names and the series under it. Several
    primitives with the same label values are one series (summed; histograms merged)."""

    name: str
    kind: Kind
    help: str
    label_names: tuple[str, ...]
    series: list[tuple[tuple[str, ...], Metric]] = field(default_factory=list)

    def values(self) -> Iterator[tuple[tuple[str, ...], float | HistogramSnapshot]]:
        """Each series' label values and value (a snapshot for a histogram), merged."""
        grouped: dict[tuple[str, ...], list[Metric]] = {}
        for labels, metric in self.series:
            grouped.setdefault(labels, []).append(metric)
        for labels, metrics in grouped.items():
            if self.kind == "histogram":
                parts = [m for m in metrics if isinstance(m, Histogram)]
                yield labels, _merge(parts[0].bounds, parts)
            elif self.kind == "gauge":
                yield labels, sum(m.current() for m in metrics if isinstance(m, Gauge))
            else:
                yield labels, sum(m.value for m in metrics if isinstance(m, Counter))


class MetricSet:
    """The metrics of one component instance, by name; what an exposition walks."""

    def __init__(self) -> None:
        self._families: dict[str, Family] = {}
        self._hooks: list[Callable[[], None]] = []

    def counter(self, name: str, help: str, **labels: str) -> Counter:
        counter = Counter()
        self._add(name, "counter", help, labels, counter)
        return counter

    def gauge(
        self, name: str, help: str, read: Callable[[], float] | None = None, **labels: str
    ) -> Gauge:
        gauge = Gauge(read)
        self._add(name, "gauge", help, labels, gauge)
        return gauge

    def histogram(
        self,
        name: str,
        help: str,
        bounds: Sequence[float] = LATENCY_BUCKETS_S,
        **labels: str,
    ) -> Histogram:
        histogram = Histogram(bounds)
        self._add(name, "histogram", help, labels, histogram)
        return histogram

    def on_collect(self, hook: Callable[[], None]) -> None:
        """Call ``hook()`` before every collection (to refresh gauges in one go)."""
        self._hooks.append(hook)

    def families(self) -> list[Family]:
        """Run the hooks, then every family (in the order first registered)."""
        for hook in self._hooks:
            hook()
        return list(self._families.values())

    def family(self, name: str) -> Family:
        return self._families[name]

    def _add(
        self, name: str, kind: Kind, help: str, labels: dict[str, str], metric: Metric
    ) -> None:
        names = tuple(sorted(labels))
        family = self._families.get(name)
        if family is None:
            family = self._families[name] = Family(name, kind, help, names)
        elif family.kind != kind or family.label_names != names:
            raise ConfigError(
                f"metric {name}: registered as a {family.kind} with labels "
                f"{family.label_names}, now as a {kind} with {names}"
            )
        family.series.append((tuple(labels[n] for n in names), metric))
