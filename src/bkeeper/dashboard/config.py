"""The dashboard's configuration: where it serves, what it watches, its limits, and the
credentials it uses as a client of a secured cluster (which also guard its own page)."""

from __future__ import annotations

from dataclasses import dataclass, field

from bkeeper.common.auth import TOKEN_PLUGIN, ClientAuthConfig
from bkeeper.common.errors import ConfigError
from bkeeper.common.tls import TlsClientConfig
from bkeeper.common.validate import check_port, check_positive_ints

__all__ = ["DashboardConfig"]


@dataclass(frozen=True)
class DashboardConfig:
    """``metadata_uri``: the cluster (``zk://...``). Every list the dashboard shows, every
    history it keeps and every request it sends to a bookie has a bound here.

    ``tls`` and ``auth``: the dashboard's credentials as a client of the bookies (their port,
    and their admin HTTP servers: HTTPS with ``tls`` when a bookie registered an ``https``
    endpoint, ``Authorization: Bearer <token>`` with ``auth``'s token). With a token, the
    dashboard's own page and API ask browsers for that same token
    (:mod:`bkeeper.dashboard.login`)."""

    metadata_uri: str
    host: str = "127.0.0.1"
    port: int = 8090
    #: Bookies are probed (state, disk) and their ``/metrics`` scraped this often.
    scrape_interval_ms: int = 2_000
    #: Ledgers, named logs and the under-replication queue are read this often.
    metadata_interval_ms: int = 5_000
    #: Points kept per bookie and per series (at 2 s: 10 minutes).
    history_points_max: int = 300
    #: One request to a bookie's admin HTTP server (probe or scrape) at most this long.
    bookie_request_timeout_ms: int = 5_000
    #: Largest ``/metrics`` answer read from a bookie.
    metrics_bytes_max: int = 4 * 1024 * 1024
    #: Bookies shown (registered ones first, then those only known by their cookie).
    bookies_max: int = 256
    #: Newest ledgers shown; ledger ids walked to count them (past it: "more than").
    ledgers_shown_max: int = 50
    ledgers_scanned_max: int = 100_000
    #: Open ledgers among those shown whose LAC is asked of their bookies, per refresh.
    lac_reads_max: int = 20
    #: Named logs shown, and ledgers read per log to add up its size.
    logs_shown_max: int = 50
    log_ledgers_read_max: int = 100
    #: Under-replicated ledgers listed; queue entries walked to count them.
    under_replicated_shown_max: int = 100
    under_replicated_scanned_max: int = 100_000
    #: Metadata reads (and LAC reads) under way at once.
    metadata_reads_concurrent_max: int = 16
    tls: TlsClientConfig | None = None
    auth: ClientAuthConfig | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not self.metadata_uri:
            raise ConfigError("metadata_uri: the dashboard needs a cluster (zk://...)")
        check_port("port", self.port)
        check_positive_ints(
            self,
            "scrape_interval_ms",
            "metadata_interval_ms",
            "history_points_max",
            "bookie_request_timeout_ms",
            "metrics_bytes_max",
            "bookies_max",
            "ledgers_shown_max",
            "ledgers_scanned_max",
            "lac_reads_max",
            "logs_shown_max",
            "log_ledgers_read_max",
            "under_replicated_shown_max",
            "under_replicated_scanned_max",
            "metadata_reads_concurrent_max",
        )
        if self.ledgers_scanned_max < self.ledgers_shown_max:
            raise ConfigError(
                f"ledgers_scanned_max: {self.ledgers_scanned_max} is less than "
                f"ledgers_shown_max ({self.ledgers_shown_max})"
            )

    @property
    def login_token(self) -> str | None:
        """The token browsers must present (the dashboard's own), or None: the page is open."""
        if self.auth is None or self.auth.plugin != TOKEN_PLUGIN:
            return None
        return self.auth.token
