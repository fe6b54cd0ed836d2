"""The dashboard's charts from Prometheus text: parsing, rates, p99, bounded history (pure)."""

from __future__ import annotations

import math

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from bkeeper.common.errors import ConfigError, ProtocolError
from bkeeper.dashboard import DashboardConfig
from bkeeper.dashboard.series import (
    History,
    Point,
    Scrape,
    histogram_quantile,
    parse_scrape,
    point_between,
)

BUCKETS = (0.001, 0.002, 0.005, 0.01)


def exposition(adds: int, reads: dict[str, int], latencies_s: list[float]) -> str:
    """Prometheus text as prometheus-client writes it, with the metric names the bookie uses."""
    registry = CollectorRegistry()
    requests = Counter("bkeeper_bookie_requests", "requests", ["op"], registry=registry)
    latency = Histogram(
        "bkeeper_bookie_request_latency_seconds", "latency", ["op"], buckets=BUCKETS,
        registry=registry,
    )  # fmt: skip
    requests.labels("add").inc(adds)
    requests.labels("write_lac").inc(7)  # neither an add nor a read
    for op, n in reads.items():
        requests.labels(op).inc(n)
    for seconds in latencies_s:
        latency.labels("add").observe(seconds)
    latency.labels("read").observe(0.5)  # not an add: not in the add p99
    Gauge("bkeeper_autorecovery_under_replicated_ledgers", "ur", registry=registry).set(4)
    Counter("bkeeper_autorecovery_rereplicated_ledgers", "rr", registry=registry).inc(3)
    return generate_latest(registry).decode()


def test_a_scrape_takes_adds_reads_and_the_add_latency_buckets() -> None:
    text = exposition(10, {"read": 5, "batch_read": 2, "long_poll": 1}, [0.0015] * 4)
    scrape = parse_scrape(text, 100.0)
    assert scrape.time_s == 100.0
    assert scrape.adds == 10
    assert scrape.reads == 8
    assert scrape.add_latency_buckets == (
        (0.001, 0.0), (0.002, 4.0), (0.005, 4.0), (0.01, 4.0), (math.inf, 4.0)
    )  # fmt: skip
    assert scrape.under_replicated == 4
    assert scrape.rereplicated_ledgers == 3
    assert scrape.rereplicated_bytes is None


def test_text_without_the_bookie_metrics_is_all_zero() -> None:
    scrape = parse_scrape("# nothing here\n", 1.0)
    assert (scrape.adds, scrape.reads, scrape.add_latency_buckets) == (0.0, 0.0, ())


def test_text_that_is_not_prometheus_is_refused_naming_it() -> None:
    with pytest.raises(ProtocolError, match=r"^not Prometheus text: "):
        parse_scrape("bkeeper_bookie_requests_total{op=add} one\n", 1.0)


def test_quantile_interpolates_within_the_bucket_as_prometheus_does() -> None:
    buckets = [(0.001, 50.0), (0.002, 90.0), (0.005, 100.0), (math.inf, 100.0)]
    # rank 99 of 100: in (0.002, 0.005], 9 of its 10 observations below it
    assert histogram_quantile(0.99, buckets) == pytest.approx(0.002 + 0.003 * 0.9)
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.001)
    assert histogram_quantile(0.99, [(0.001, 0.0), (math.inf, 0.0)]) is None
    assert histogram_quantile(0.99, []) is None
    # in +Inf: the highest finite bound
    assert histogram_quantile(0.99, [(0.001, 1.0), (math.inf, 100.0)]) == 0.001


def test_a_point_is_the_rate_and_p99_between_two_scrapes() -> None:
    before = parse_scrape(exposition(10, {"read": 5}, [0.0015] * 10), 100.0)
    after = parse_scrape(exposition(30, {"read": 45}, [0.0015] * 10 + [0.004] * 10), 102.0)
    point = point_between(before, after, 5_000)
    assert point is not None
    assert (point.time_ms, point.adds_per_s, point.reads_per_s) == (5_000, 10.0, 20.0)
    # the 10 new adds are all in (0.002, 0.005]: p99 from those alone, not the older ones
    assert point.add_p99_s == pytest.approx(0.002 + 0.003 * 0.99)


def test_a_restarted_bookie_counts_from_zero_again() -> None:
    before = Scrape(10.0, 1000.0, 500.0, ((0.001, 900.0), (math.inf, 1000.0)))
    after = Scrape(12.0, 40.0, 4.0, ((0.001, 40.0), (math.inf, 40.0)))
    assert point_between(before, after, 1) == Point(1, 20.0, 2.0, pytest.approx(0.001 * 0.99))


def test_no_point_unless_time_went_forward() -> None:
    scrape = Scrape(10.0, 1.0, 1.0, ())
    assert point_between(scrape, scrape, 1) is None


def test_history_keeps_at_most_points_max_and_forgets_gone_bookies() -> None:
    history = History(points_max=3)
    assert history.add("b1", Scrape(0.0, 0.0, 0.0, ()), 0) is None  # the first: no interval
    for second in range(1, 6):
        point = history.add("b1", Scrape(float(second), second * 10.0, 0.0, ()), second * 1000)
        assert point == Point(second * 1000, 10.0, 0.0, None)
    history.add("b2", Scrape(0.0, 0.0, 0.0, ()), 0)
    assert [p.time_ms for p in history.points()["b1"]] == [3000, 4000, 5000]
    assert history.points()["b2"] == []
    history.keep_only(["b2"])
    assert list(history.points()) == ["b2"]
    assert history.last_scrape("b1") is None


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("metadata_uri", "", "metadata_uri: the dashboard needs a cluster"),
        ("port", 70000, "port"),
        ("history_points_max", 0, "history_points_max: must be a positive integer, got 0"),
        ("ledgers_scanned_max", 10, "ledgers_scanned_max: 10 is less than ledgers_shown_max"),
    ],
)
def test_config_names_the_bad_field(field: str, value: object, message: str) -> None:
    options: dict[str, object] = {"metadata_uri": "zk://h:1/ledgers", field: value}
    with pytest.raises(ConfigError, match=f"^{message}"):
        DashboardConfig(**options)  # type: ignore[arg-type]
