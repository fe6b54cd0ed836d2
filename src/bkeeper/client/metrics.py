"""Client-side metrics, on request (``ClientConfig.metrics``; off by default).

The client counts per batch, as the bookie does: adds once per batch of completions (each
counted with the latency of the batch's oldest add: from its send to its completion, an
upper bound for the others), batch reads once per BATCH_READ answer. Exposition:
:meth:`ClientMetrics.text` (``BookKeeper.metrics_text()``), or a small HTTP server of
prometheus-client's on a port of the caller's choosing (``BookKeeper.start_metrics_server``),
each over the client's own ``CollectorRegistry``.

prometheus-client is imported only when a client counts (metrics are off by default): every
process that imports the client (each Python worker Spark starts for a query) would pay its
import, 40-100 ms of CPU, for nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bkeeper.common.clock import Clock
from bkeeper.common.metrics import Counter, Histogram, MetricSet

if TYPE_CHECKING:
    from bkeeper.common.metrics_export import MetricsHttpServer

__all__ = ["CLIENT_OPS", "ClientMetrics"]

#: The values of the ``op`` label.
CLIENT_OPS = ("add", "batch_read")


class _Op:
    __slots__ = ("errors", "latency", "requests")

    def __init__(self, metrics: MetricSet, op: str) -> None:
        self.requests: Counter = metrics.counter(
            "bkeeper_client_requests_total",
            "Adds completed or failed; BATCH_READ requests answered or timed out.",
            op=op,
        )
        self.errors: Counter = metrics.counter(
            "bkeeper_client_request_errors_total",
            "Adds failed; BATCH_READ requests answered with an error or not in time.",
            op=op,
        )
        self.latency: Histogram = metrics.histogram(
            "bkeeper_client_request_latency_seconds",
            "Adds: from send to completion (per batch, its oldest add); batch reads: per request.",
            op=op,
        )


class ClientMetrics:
    """The metrics of one ``BookKeeper`` client."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.metric_set = MetricSet()
        self.add = _Op(self.metric_set, "add")
        self.batch_read = _Op(self.metric_set, "batch_read")
        self.read_entries = self.metric_set.counter(
            "bkeeper_client_read_entries_total", "Entries received by batch reads."
        )
        self.writers_degraded = self.metric_set.counter(
            "bkeeper_client_writers_degraded_total",
            "Times a writer went on degraded: a bookie lost, none to replace it, Qa still up.",
        )
        self.writers_healed = self.metric_set.counter(
            "bkeeper_client_writers_degraded_healed_total",
            "Times a degraded writer replaced its bookies down (degraded writes ended).",
        )
        from bkeeper.common.metrics_export import new_registry

        self.registry = new_registry(lambda: [self.metric_set])
        self._server: MetricsHttpServer | None = None

    def adds_completed(self, count: int, oldest_sent_at: float) -> None:
        add = self.add
        add.requests.value += count
        add.latency.observe_many(self.clock.monotonic() - oldest_sent_at, count)

    def text(self) -> bytes:
        """Everything, in Prometheus text format 0.0.4."""
        from bkeeper.common.metrics_export import exposition_text

        return exposition_text(self.registry)

    def start_server(self, port: int, host: str = "127.0.0.1") -> int:
        """Serve ``/metrics`` on ``host:port`` (0: any free port) from a thread of
        prometheus-client's; the port it listens on."""
        if self._server is None:
            from bkeeper.common.metrics_export import MetricsHttpServer

            self._server = MetricsHttpServer(self.registry, host, port)
        return self._server.port

    def stop_server(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
