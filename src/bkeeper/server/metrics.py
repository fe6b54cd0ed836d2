"""The bookie's ``/metrics``: its metric sets in Prometheus text format, with prometheus-client.

Each bookie has a ``CollectorRegistry`` of its own (:func:`bookie_registry`; several bookies
may run in one process), whose one collector walks the bookie's metric sets at each scrape:
its own (storage, requests, connections, GC: see ``docs/operations.md`` "## Metrics" for
every name) and any another component of the process added (an auditor's). Counting costs
the hot paths nothing per entry (see :mod:`bkeeper.common.metrics`); building the text costs
the scrape, on the event loop, in proportion to the number of series (a few hundred).

With ``metrics_enabled`` off the bookie has no metric set and serves no ``/metrics`` (404).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry

from bkeeper.common.metrics import MetricSet
from bkeeper.common.metrics_export import CONTENT_TYPE, exposition_text, new_registry
from bkeeper.server.connections import ConnectionTable
from bkeeper.server.handlers import BookieState

if TYPE_CHECKING:  # aiohttp is imported by a bookie that serves HTTP only (server.bookie)
    from aiohttp import web

__all__ = ["METRICS_PATH", "bookie_registry", "metrics_handler", "register_bookie_gauges"]

METRICS_PATH = "/metrics"


def bookie_registry(sets: Callable[[], Iterable[MetricSet]]) -> CollectorRegistry:
    """A registry of one bookie's metric sets (``sets()`` is read at each scrape)."""
    return new_registry(sets)


def metrics_handler(
    registry: CollectorRegistry,
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """The ``GET /metrics`` route of the admin HTTP server."""
    from aiohttp import web  # see the TYPE_CHECKING import

    async def metrics(_request: web.Request) -> web.StreamResponse:
        response = web.Response(body=exposition_text(registry))
        response.headers["Content-Type"] = CONTENT_TYPE
        return response

    return metrics


def register_bookie_gauges(
    metrics: MetricSet, connections: ConnectionTable, state: BookieState
) -> None:
    """The bookie's own series: connections, requests in flight, oversized frames (the
    table's counter), read-only mode."""
    metrics.gauge(
        "bkeeper_bookie_connections",
        "Client connections open.",
        read=lambda: len(connections),
    )
    metrics.gauge(
        "bkeeper_bookie_in_flight_requests",
        "Requests received and not yet answered.",
        read=lambda: sum(c.requests_in_flight for c in connections.connections),
    )
    connections.oversized_frames = metrics.counter(
        "bkeeper_bookie_oversized_frames_total",
        "Frames over max_frame_bytes answered EBADREQ, their bodies dropped unread.",
    )
    metrics.gauge(
        "bkeeper_bookie_read_only",
        "1 while the bookie is read-only, 0 while writable.",
        read=lambda: 1.0 if state.readonly else 0.0,
    )
