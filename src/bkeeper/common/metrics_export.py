"""Prometheus exposition of :class:`~bkeeper.common.metrics.MetricSet` s, with prometheus-client.

A :class:`MetricSetCollector` turns the sets it is given into prometheus-client metric
families each time the registry is collected (a scrape), so the hot paths never touch
prometheus-client. Each process that exposes metrics (a bookie, a client on request, an
auto-recovery process) makes a ``CollectorRegistry`` of its own with :func:`new_registry`
(never the library's global one: several bookies may share one test process) and renders it
with :func:`exposition_text` (Prometheus text format 0.0.4, :data:`CONTENT_TYPE`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, generate_latest, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from bkeeper.common.metrics import Family, HistogramSnapshot, MetricSet

__all__ = [
    "CONTENT_TYPE",
    "MetricsHttpServer",
    "MetricSetCollector",
    "exposition_text",
    "new_registry",
]

#: The content type of :func:`exposition_text` (what Prometheus asks for by default).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class MetricSetCollector(Collector):
    """Collects the metric sets ``sets()`` returns at each scrape (sets come and go: an
    auditor elected later adds its own)."""

    def __init__(self, sets: Callable[[], Iterable[MetricSet]]) -> None:
        self._sets = sets

    def collect(self) -> Iterator[Metric]:
        merged: dict[str, list[Family]] = {}
        for metric_set in self._sets():
            for family in metric_set.families():
                merged.setdefault(family.name, []).append(family)
        for families in merged.values():
            yield _family(families)


def _family(families: list[Family]) -> Metric:
    first = families[0]
    name, labels = first.name, list(first.label_names)
    metric: CounterMetricFamily | GaugeMetricFamily | HistogramMetricFamily
    if first.kind == "counter":
        # prometheus-client adds "_total" itself; our names carry it already.
        metric = CounterMetricFamily(name.removesuffix("_total"), first.help, labels=labels)
    elif first.kind == "gauge":
        metric = GaugeMetricFamily(name, first.help, labels=labels)
    else:
        metric = HistogramMetricFamily(name, first.help, labels=labels)
    # One series per label values across the sets (a bookie's and an auditor's may share one).
    series = [item for family in families for item in family.series]
    merged = Family(name, first.kind, first.help, first.label_names, series)
    for label_values, value in merged.values():
        if isinstance(value, HistogramSnapshot):
            assert isinstance(metric, HistogramMetricFamily)
            buckets = [
                (_le(bound), count)
                for bound, count in zip(value.bounds, value.cumulative, strict=False)
            ]
            buckets.append(("+Inf", value.cumulative[-1]))
            metric.add_metric(list(label_values), buckets, value.sum)
        else:
            assert not isinstance(metric, HistogramMetricFamily)
            metric.add_metric(list(label_values), value)
    return metric


def _le(bound: float) -> str:
    return repr(float(bound))


def new_registry(sets: Callable[[], Iterable[MetricSet]]) -> CollectorRegistry:
    """A registry of its own (not prometheus-client's global one) over ``sets()``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(MetricSetCollector(sets))
    return registry


def exposition_text(registry: CollectorRegistry) -> bytes:
    """The registry in Prometheus text format 0.0.4."""
    return generate_latest(registry)


class MetricsHttpServer:
    """prometheus-client's small HTTP server (a thread of its own) serving ``/metrics`` of
    one registry, for a process with no admin HTTP server (a client, ``bkeeper
    autorecovery``): ``MetricsHttpServer(registry, host, port)`` (port 0: any free port),
    :attr:`port`, :meth:`close`."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int) -> None:
        self._server, self._thread = start_http_server(port, addr=host, registry=registry)
        self.port = int(self._server.server_port)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
