"""The metric primitives (pure) and their Prometheus exposition, parsed back."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from bkeeper.common.errors import ConfigError
from bkeeper.common.metrics import Histogram, MetricSet
from bkeeper.common.metrics_export import exposition_text, new_registry


def samples(text: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition: (name, sorted labels) -> value."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text.decode())
        for s in family.samples
    }


def test_histogram_buckets_by_upper_bound_inclusive():
    h = Histogram((1.0, 2.0, 5.0))
    for value in (0.5, 1.0, 1.5, 2.0, 5.0, 7.0):
        h.observe(value)
    h.observe_many(3.0, 4)
    assert h.counts == [2, 2, 5, 1]
    assert h.count == 10
    assert h.sum == pytest.approx(0.5 + 1 + 1.5 + 2 + 5 + 7 + 12)
    snap = h.snapshot()
    assert snap.cumulative == (2, 4, 9, 10)


def test_histogram_bounds_must_increase():
    with pytest.raises(ConfigError, match="histogram bounds"):
        Histogram((1.0, 1.0))
    with pytest.raises(ConfigError, match="histogram bounds"):
        Histogram(())


def test_same_name_must_keep_kind_and_labels():
    metrics = MetricSet()
    metrics.counter("x_total", "x", op="a")
    with pytest.raises(ConfigError, match="x_total"):
        metrics.gauge("x_total", "x", op="a")
    with pytest.raises(ConfigError, match="x_total"):
        metrics.counter("x_total", "x", kind="a")


def test_exposition_parses_and_merges_series():
    one, two = MetricSet(), MetricSet()
    one.counter("bk_requests_total", "Requests.", op="add").inc(3)
    one.counter("bk_requests_total", "Requests.", op="read").inc(2)
    two.counter("bk_requests_total", "Requests.", op="add").inc(4)  # same series: summed
    one.gauge("bk_conns", "Connections.", read=lambda: 7)
    h1 = one.histogram("bk_latency_seconds", "Latency.", (0.1, 1.0))
    h2 = two.histogram("bk_latency_seconds", "Latency.", (0.1, 1.0))  # merged
    h1.observe(0.05)
    h2.observe_many(0.5, 3)
    h2.observe(2.0)
    refreshed = []
    one.on_collect(lambda: refreshed.append(1))
    text = exposition_text(new_registry(lambda: [one, two]))
    got = samples(text)
    assert got[("bk_requests_total", (("op", "add"),))] == 7
    assert got[("bk_requests_total", (("op", "read"),))] == 2
    assert got[("bk_conns", ())] == 7
    assert got[("bk_latency_seconds_bucket", (("le", "0.1"),))] == 1
    assert got[("bk_latency_seconds_bucket", (("le", "1.0"),))] == 4
    assert got[("bk_latency_seconds_bucket", (("le", "+Inf"),))] == 5
    assert got[("bk_latency_seconds_count", ())] == 5
    assert got[("bk_latency_seconds_sum", ())] == pytest.approx(3.55)
    assert refreshed == [1]
    assert b"# TYPE bk_requests_total counter" in text
    assert b"# TYPE bk_latency_seconds histogram" in text
