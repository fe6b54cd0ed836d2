"""What a sandbox is asked to run (:class:`SandboxConfig`): how many bookies, on which ports
(checked not to overlap), with which options; :mod:`bkeeper.testing.sandbox` runs it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from bkeeper.common.errors import ConfigError

__all__ = ["DEFAULT_BOOKIES", "SandboxConfig"]


#: Bookies a sandbox starts unless told: the default ensemble (3, of ``LogConfig`` and the
#: Spark sink) plus one spare, so that the loss of one bookie can be re-replicated.
DEFAULT_BOOKIES = 4


@dataclass(frozen=True)
class SandboxConfig:
    data_dir: Path
    bookies: int = DEFAULT_BOOKIES
    zookeeper_port: int = 2181
    bookie_port_base: int = 3181
    http_port_base: int | None = None
    root: str = "/ledgers"
    start_timeout_s: float = 30.0
    stop_timeout_s: float = 30.0
    zookeeper_home: Path | None = None
    bookie_args: tuple[str, ...] = field(default=())
    #: Bookie n keeps its entry logs (journals) in ``<dir>/bookie-<n>`` of each of these
    #: (none: under its data directory).
    ledger_dirs: tuple[Path, ...] = ()
    journal_dirs: tuple[Path, ...] = ()
    #: Every bookie runs auto-recovery (``bookie --autorecovery``): one of them is elected
    #: auditor, each runs a replication worker.
    autorecovery: bool = True
    #: None: auto-recovery runs inside each bookie. A number: it runs in a process of its own
    #: beside each bookie (``bkeeper autorecovery --id <bookie id>``, as Java's
    #: ``bookkeeper autorecovery`` daemon), at this ``nice`` value (0..19): repair then takes
    #: the CPU the bookies leave. ``kill_bookie`` kills the bookie's as well (its host died).
    autorecovery_nice: int | None = None
    #: Where ``bkeeper dashboard`` serves (on 127.0.0.1); None: no dashboard.
    dashboard_port: int | None = None
    #: TLS (required), token authentication and ZooKeeper ACLs (module doc).
    secure: bool = False
    #: Environment variables added to each bookie process's (fault injection, e.g.
    #: :data:`bkeeper.storage.slow_sync.ENV_VAR`).
    bookie_env: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not 1 <= self.bookies <= 64:
            raise ConfigError(f"bookies: {self.bookies} is not between 1 and 64")
        if self.autorecovery_nice is not None and not 0 <= self.autorecovery_nice <= 19:
            raise ConfigError(f"autorecovery_nice: {self.autorecovery_nice} is not in 0..19")
        for name in ("zookeeper_port", "bookie_port_base", "http_port_base", "dashboard_port"):
            port = getattr(self, name)
            if port is None and name in ("http_port_base", "dashboard_port"):
                continue
            if not 0 < port < 65536 - self.bookies:
                raise ConfigError(f"{name}: {port} is not a usable TCP port")
        last = self.bookies - 1
        ranges = {"ZooKeeper": (self.zookeeper_port, self.zookeeper_port)}
        ranges["bookies"] = (self.bookie_port_base, self.bookie_port_base + last)
        if self.http_port_base is not None:
            ranges["admin"] = (self.http_port_base, self.http_port_base + last)
        if self.dashboard_port is not None:
            ranges["dashboard"] = (self.dashboard_port, self.dashboard_port)
        ports = [port for low, high in ranges.values() for port in range(low, high + 1)]
        if len(set(ports)) != len(ports):
            shown = ", ".join(
                f"{what} {low}" if low == high else f"{what} {low}-{high}"
                for what, (low, high) in ranges.items()
            )
            raise ConfigError(f"the sandbox's ports overlap: {shown}")
