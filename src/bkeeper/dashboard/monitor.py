"""The dashboard's view of the cluster, refreshed in the background.

Two loops, owned by :class:`ClusterMonitor`: every ``scrape_interval_ms`` the bookies (the
registry and cookies, then each bookie's admin HTTP server: state, disk, ``/metrics``, all
at once), every ``metadata_interval_ms`` the ledgers, named logs and the under-replication
queue. Pages read the latest snapshot, so any number of browsers cost the cluster nothing
more. A refresh that fails keeps the previous snapshot and records the error with its time
(``errors``, shown on the page); the error is logged once when it first appears.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from bkeeper.client import BookKeeper, ClientConfig
from bkeeper.common.clock import Clock, default_clock
from bkeeper.common.errors import ProtocolError
from bkeeper.common.tasks import TaskOwner
from bkeeper.dashboard.config import DashboardConfig
from bkeeper.dashboard.metadata_view import (
    BookieEntry,
    ledger_page,
    list_bookies,
    log_page,
    recovery_view,
)
from bkeeper.dashboard.probe import BookieProbe, bookie_session, probe_bookie
from bkeeper.dashboard.series import History, Point, Scrape, parse_scrape
from bkeeper.meta.cluster import ClusterMetadata

__all__ = ["ClusterMonitor"]

log = logging.getLogger(__name__)

#: An empty answer until the first refresh is done.
_PENDING: dict[str, Any] = {"pending": True}


class ClusterMonitor:
    """``await start()`` (first refresh done), then read the snapshots; ``await aclose()``."""

    def __init__(self, config: DashboardConfig, clock: Clock | None = None) -> None:
        self.config = config
        self.clock: Clock = clock or default_clock()
        self.history = History(config.history_points_max)
        self.under_replicated_history: deque[tuple[int, int]] = deque(
            maxlen=config.history_points_max
        )
        self.instance_id: str | None = None
        self.bookies: list[dict[str, Any]] = []
        self.bookies_more = 0  # past bookies_max
        self.ledgers: dict[str, Any] = dict(_PENDING)
        self.logs: dict[str, Any] = dict(_PENDING)
        self.recovery: dict[str, Any] = dict(_PENDING)
        self.errors: dict[str, dict[str, Any]] = {}
        self.updated_ms: dict[str, int] = {}
        self._cluster: ClusterMetadata | None = None
        self._bk: BookKeeper | None = None
        self._session: aiohttp.ClientSession | None = None
        self._tasks = TaskOwner("dashboard", tasks_max=2)

    async def start(self) -> None:
        """Open the cluster (``ClusterNotFoundError`` if the URI holds none), refresh once,
        then keep refreshing in the background."""
        cluster = await ClusterMetadata.open(self.config.metadata_uri, require_cluster=True)
        self._cluster = cluster
        try:
            self.instance_id = await cluster.instance_id()
            client = ClientConfig(tls=self.config.tls, auth=self.config.auth)
            self._bk = await BookKeeper(config=client, cluster=cluster).start()
            self._session = bookie_session(self.config.tls, self.config.auth)
            await self.refresh_bookies()
            await self.refresh_metadata()
        except BaseException:
            await self.aclose()
            raise
        self._tasks.spawn(
            self._every(self.config.scrape_interval_ms, "bookies", self.refresh_bookies), "bookies"
        )
        self._tasks.spawn(
            self._every(self.config.metadata_interval_ms, "metadata", self.refresh_metadata),
            "metadata",
        )

    async def aclose(self) -> None:
        await self._tasks.aclose()
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._bk is not None:
            await self._bk.close()
            self._bk = None
        if self._cluster is not None:
            await self._cluster.aclose()
            self._cluster = None

    async def _every(
        self, interval_ms: int, what: str, refresh: Callable[[], Awaitable[None]]
    ) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            await self._guarded(what, refresh)

    async def _guarded(self, what: str, refresh: Callable[[], Awaitable[None]]) -> None:
        try:
            await refresh()
        except Exception as exc:
            message = f"{type(exc).__name__}: {exc}"
            if self.errors.get(what, {}).get("error") != message:
                log.warning("dashboard: refreshing %s failed: %s", what, message, exc_info=exc)
            self.errors[what] = {"error": message, "time_ms": self.clock.wall_ms()}
        else:
            self.errors.pop(what, None)

    # -- bookies -------------------------------------------------------------------------
    async def refresh_bookies(self) -> None:
        assert self._cluster is not None and self._session is not None
        entries, more = await list_bookies(self._cluster, self.config.bookies_max)
        timeout_s = self.config.bookie_request_timeout_ms / 1000
        session, bytes_max = self._session, self.config.metrics_bytes_max
        probes = await asyncio.gather(
            *(
                probe_bookie(session, e.http_url, timeout_s, bytes_max)
                if e.http_url is not None and e.state != "down"
                else _no_probe(e)
                for e in entries
            )
        )
        now_s, now_ms = self.clock.monotonic(), self.clock.wall_ms()
        rows = [self._bookie_row(e, p, now_s, now_ms) for e, p in zip(entries, probes, strict=True)]
        self.history.keep_only(e.bookie_id for e in entries)
        self.bookies = rows
        self.bookies_more = more
        self.updated_ms["bookies"] = now_ms

    def _bookie_row(
        self, entry: BookieEntry, probe: BookieProbe, now_s: float, now_ms: int
    ) -> dict[str, Any]:
        metrics_error = probe.metrics_error
        point: Point | None = None
        scrape: Scrape | None = None
        if probe.metrics_text is not None:
            try:
                scrape = parse_scrape(probe.metrics_text, now_s)
            except ProtocolError as exc:
                metrics_error = f"{entry.http_url}/metrics: {exc}"
            else:
                point = self.history.add(entry.bookie_id, scrape, now_ms)
        row = dataclasses.asdict(entry)
        row.update(
            http_error=probe.http_error,
            reported_read_only=probe.read_only,
            free_bytes=probe.free_bytes,
            total_bytes=probe.total_bytes,
            metrics_error=metrics_error,
            adds_per_s=None if point is None else point.adds_per_s,
            reads_per_s=None if point is None else point.reads_per_s,
            add_p99_ms=None if point is None or point.add_p99_s is None else point.add_p99_s * 1e3,
            rereplicated_ledgers=None if scrape is None else scrape.rereplicated_ledgers,
            rereplicated_bytes=None if scrape is None else scrape.rereplicated_bytes,
        )
        return row

    # -- ledgers, logs, recovery ---------------------------------------------------------
    async def refresh_metadata(self) -> None:
        assert self._cluster is not None and self._bk is not None
        cluster, config = self._cluster, self.config
        ledgers = await ledger_page(cluster, self._bk, config)
        logs = await log_page(cluster, config)
        recovery = await recovery_view(cluster, config)
        now_ms = self.clock.wall_ms()
        self.ledgers = dataclasses.asdict(ledgers)
        self.logs = dataclasses.asdict(logs)
        self.recovery = dataclasses.asdict(recovery)
        self.under_replicated_history.append((now_ms, recovery.under_replicated))
        self.updated_ms["metadata"] = now_ms

    # -- what the pages read -------------------------------------------------------------
    def overview(self) -> dict[str, Any]:
        return {
            "cluster": {"metadata_uri": self.config.metadata_uri, "instance_id": self.instance_id},
            "bookies": self.bookies,
            "bookies_more": self.bookies_more,
            "recovery": self.recovery,
            "errors": self.errors,
            "updated_ms": self.updated_ms,
            "refresh_ms": self.config.scrape_interval_ms,
        }

    def series(self) -> dict[str, Any]:
        bookies = {
            bookie: {
                "time_ms": [p.time_ms for p in points],
                "adds_per_s": [p.adds_per_s for p in points],
                "reads_per_s": [p.reads_per_s for p in points],
                "add_p99_ms": [None if p.add_p99_s is None else p.add_p99_s * 1e3 for p in points],
            }
            for bookie, points in self.history.points().items()
        }
        return {
            "metrics_available": any(
                b["http_url"] is not None and b["metrics_error"] is None for b in self.bookies
            ),
            "points_max": self.config.history_points_max,
            "bookies": bookies,
            "under_replicated": {
                "time_ms": [t for t, _n in self.under_replicated_history],
                "count": [n for _t, n in self.under_replicated_history],
            },
        }


async def _no_probe(entry: BookieEntry) -> BookieProbe:
    if entry.state == "down":
        return BookieProbe(http_error="not registered: the bookie is down")
    return BookieProbe(http_error="registered no admin HTTP endpoint (start it with --http-port)")
