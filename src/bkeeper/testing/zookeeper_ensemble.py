"""Run a ZooKeeper ensemble (a quorum of servers) for tests: :class:`ZooKeeperEnsemble`.

Each server of :class:`ZooKeeperEnsembleConfig` has a host address of its own, a client port,
a quorum port (followers to the leader) and an election port, and a directory
``<data_dir>/server-<k>/`` with its ``zoo.cfg``, its ``data/myid`` (``k + 1``: ZooKeeper's ids
start at 1), its ``log4j2.properties`` and its output, ``zookeeper.log``. Every ``zoo.cfg``
lists the whole ensemble (``server.<k+1>=host:quorum:election``). A server may run behind a
command prefix (``["ip", "netns", "exec", "<namespace>"]``: a host of its own, see
:mod:`bkeeper.testing.netns`); the prefix must ``exec`` the command, so that the process this
module signals is ZooKeeper's own JVM.

* :meth:`ZooKeeperEnsemble.start` starts every server and waits until the quorum serves: each
  answers ``srvr`` with a mode, and one of them says ``leader``;
* :meth:`ZooKeeperEnsemble.kill_server` (SIGKILL), :meth:`ZooKeeperEnsemble.stop_server`
  (SIGTERM) and :meth:`ZooKeeperEnsemble.start_server` (the same directory, so the same id
  and data; it waits until the server serves again) act on one server;
* :meth:`ZooKeeperEnsemble.leader` asks every server which one leads.

Sizes: at least :data:`SERVERS_MIN` (3) servers, one server being :class:`ZooKeeperServer`'s
job; an even number is refused unless ``allow_even_size``, as it tolerates no more failures
than one server fewer (2 tolerate none, 4 only one) while a quorum needs one more answer.
Ports: no two sockets of the ensemble (a server's three ports, the servers' on one host) may
be the same: ``ConfigError`` naming both. Errors in the style of
:class:`~bkeeper.testing.zookeeper.ZooKeeperServer`: ``ConfigError`` naming the log file of the
server that exited or did not answer in time.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from bkeeper.common.errors import ConfigError
from bkeeper.common.validate import check_port
from bkeeper.testing.zookeeper import (
    die_with_parent_thread,
    find_java,
    find_zookeeper_classpath,
    free_port,
    log4j2_properties,
    port_free,
    server_mode,
    stop_server_process,
)

__all__ = [
    "SERVERS_MIN",
    "EnsembleServer",
    "ZooKeeperEnsemble",
    "ZooKeeperEnsembleConfig",
    "loopback_servers",
]

_MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
#: An ensemble has at least this many servers (one lost leaves a quorum).
SERVERS_MIN = 3
#: Seconds between two looks at the servers while waiting for them.
_POLL_INTERVAL_S = 0.05


@dataclass(frozen=True)
class EnsembleServer:
    """One server: its address, its three ports, and the command prefix it runs behind."""

    host: str
    client_port: int = 2181
    quorum_port: int = 2888
    election_port: int = 3888
    command_prefix: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.host:
            raise ConfigError("an ensemble server needs a host address")
        for name in ("client_port", "quorum_port", "election_port"):
            check_port(name, getattr(self, name), zero_allowed=False)

    @property
    def sockets(self) -> dict[str, tuple[str, int]]:
        """Each port's name -> (host, port)."""
        return {
            "client": (self.host, self.client_port),
            "quorum": (self.host, self.quorum_port),
            "election": (self.host, self.election_port),
        }


def loopback_servers(count: int = SERVERS_MIN) -> tuple[EnsembleServer, ...]:
    """``count`` servers on 127.0.0.1, 127.0.0.2, ... (Linux answers on all of 127/8), each
    with three ports that were free a moment ago."""
    servers = []
    for k in range(count):
        host = f"127.0.0.{k + 1}"
        ports = [free_port(host) for _ in range(3)]
        while len(set(ports)) < 3:  # two picks alike (rare): pick again
            ports = [free_port(host) for _ in range(3)]
        servers.append(EnsembleServer(host, ports[0], ports[1], ports[2]))
    return tuple(servers)


@dataclass(frozen=True)
class ZooKeeperEnsembleConfig:
    """The servers and how they run. ``tick_time_ms`` sets the session timeout range they
    grant ([2, 20] ticks); ``init_limit_ticks`` and ``sync_limit_ticks``: how long a follower
    may take to sync with a new leader and may fall behind it. ``connect_timeout_ms``: a
    server's connection attempts to a peer (ZooKeeper's ``cnxTimeout``; a peer on a link
    that is down costs this much per election round)."""

    data_dir: Path
    servers: tuple[EnsembleServer, ...]
    tick_time_ms: int = 2000
    init_limit_ticks: int = 10
    sync_limit_ticks: int = 5
    connect_timeout_ms: int = 2000
    start_timeout_s: float = 60.0
    stop_timeout_s: float = 10.0
    log_level: str = "WARN"
    zookeeper_home: Path | None = None
    java: str = "java"
    allow_even_size: bool = False

    def __post_init__(self) -> None:
        count = len(self.servers)
        if count < SERVERS_MIN:
            raise ConfigError(
                f"a ZooKeeper ensemble has at least {SERVERS_MIN} servers, not {count} (one "
                "server: bkeeper.testing.zookeeper.ZooKeeperServer)"
            )
        if count % 2 == 0 and not self.allow_even_size:
            raise ConfigError(
                f"a ZooKeeper ensemble of {count} servers tolerates no more failures than one "
                f"of {count - 1} ({(count - 1) // 2}) and needs one more answer per write: use "
                f"{count - 1} or {count + 1} servers (or allow_even_size)"
            )
        for name in ("tick_time_ms", "init_limit_ticks", "sync_limit_ticks"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}: must be >= 1")
        if self.connect_timeout_ms < 1 or self.start_timeout_s <= 0 or self.stop_timeout_s <= 0:
            raise ConfigError("connect_timeout_ms, start_timeout_s and stop_timeout_s: > 0")
        self._check_sockets()

    def _check_sockets(self) -> None:
        """No two sockets of the ensemble alike (module doc)."""
        seen: dict[tuple[str, int], str] = {}
        for k, server in enumerate(self.servers):
            for what, address in server.sockets.items():
                name = f"server {k}'s {what} port"
                if address in seen:
                    raise ConfigError(
                        f"ZooKeeper ensemble: {seen[address]} and {name} are both "
                        f"{address[0]}:{address[1]}"
                    )
                seen[address] = name


class ZooKeeperEnsemble:
    """The ensemble's servers as child processes; a context manager (``with`` starts and
    stops). Servers are numbered from 0 here (``myid`` is ``k + 1``)."""

    def __init__(self, config: ZooKeeperEnsembleConfig) -> None:
        self.config = config
        self._processes: list[subprocess.Popen[bytes] | None] = [None] * len(config.servers)

    @property
    def servers(self) -> tuple[EnsembleServer, ...]:
        return self.config.servers

    @property
    def connect_string(self) -> str:
        return ",".join(f"{s.host}:{s.client_port}" for s in self.config.servers)

    def uri(self, root: str = "/ledgers") -> str:
        """The metadata service URI of the ensemble with ledgers under ``root``."""
        return f"zk://{self.connect_string}{root}"

    def server_dir(self, k: int) -> Path:
        return self.config.data_dir / f"server-{k}"

    def log_path(self, k: int) -> Path:
        return self.server_dir(k) / "zookeeper.log"

    def pid(self, k: int) -> int | None:
        process = self._processes[k]
        return None if process is None or process.poll() is not None else process.pid

    def mode(self, k: int) -> str | None:
        """Server ``k``'s mode (``leader``, ``follower``), None while it serves no requests."""
        server = self.config.servers[k]
        return server_mode(server.host, server.client_port)

    def leader(self) -> int | None:
        """The index of the server that says it leads; None if none does (an election)."""
        for k in range(len(self.config.servers)):
            if self.mode(k) == "leader":
                return k
        return None

    def running(self) -> list[int]:
        """The servers whose process runs."""
        return [k for k in range(len(self.config.servers)) if self.pid(k) is not None]

    def start(self) -> None:
        """Start every server, wait until the quorum serves (module doc); ``ConfigError``
        naming a server's log if one exits or the quorum does not form in time. A failed
        start stops every server it started."""
        try:
            for k in range(len(self.config.servers)):
                self._spawn(k)
            self.wait_serving(range(len(self.config.servers)), "the ensemble to elect a leader")
        except BaseException:
            self.stop()
            raise

    def start_server(self, k: int) -> None:
        """Start server ``k`` again (after :meth:`kill_server` or :meth:`stop_server`) with
        its data, and wait until it serves (follows the leader, or leads)."""
        if self.pid(k) is not None:
            raise ConfigError(f"ZooKeeper server {k} is still running (pid {self.pid(k)})")
        self._spawn(k)
        try:
            self.wait_serving([k], f"server {k} to rejoin the ensemble")
        except BaseException:
            self.stop_server(k)
            raise

    def kill_server(self, k: int) -> None:
        """SIGKILL server ``k`` and reap it; a no-op when it is not running."""
        process, self._processes[k] = self._processes[k], None
        if process is None or process.poll() is not None:
            return
        process.kill()
        process.wait()

    def stop_server(self, k: int) -> None:
        """SIGTERM server ``k`` (SIGKILL after ``stop_timeout_s``) and reap it; a no-op when
        it is not running."""
        process, self._processes[k] = self._processes[k], None
        if process is not None:
            stop_server_process(process, self.config.stop_timeout_s)

    def stop(self) -> None:
        """Stop every server (SIGTERM to all, then wait for each)."""
        processes = [p for p in self._processes if p is not None and p.poll() is None]
        self._processes = [None] * len(self.config.servers)
        for process in processes:
            process.send_signal(signal.SIGCONT)
            process.terminate()
        deadline = time.monotonic() + self.config.stop_timeout_s
        for process in processes:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def wait_serving(
        self, servers: Sequence[int], what: str, timeout_s: float | None = None
    ) -> None:
        """Wait until each of ``servers`` serves and one server of the ensemble leads, for at
        most ``timeout_s`` (default ``start_timeout_s``); ``ConfigError`` saying ``what`` was
        waited for, and naming the log of a server that exited or did not answer."""
        limit_s = self.config.start_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + limit_s
        while True:
            for k in servers:
                process = self._processes[k]
                if process is None or process.poll() is not None:
                    raise ConfigError(
                        f"ZooKeeper server {k} exited while waiting for {what}; see "
                        f"{self.log_path(k)}"
                    )
            silent = [k for k in servers if self.mode(k) is None]
            if not silent and self.leader() is not None:
                return
            if time.monotonic() >= deadline:
                silent = silent or list(servers)
                logs = ", ".join(str(self.log_path(k)) for k in silent)
                raise ConfigError(
                    f"ZooKeeper ensemble: no {what} within {limit_s:g} s "
                    f"(not serving: server {', '.join(map(str, silent))}); see {logs}"
                )
            time.sleep(_POLL_INTERVAL_S)

    def __enter__(self) -> ZooKeeperEnsemble:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _spawn(self, k: int) -> None:
        server = self.config.servers[k]
        java = find_java(self.config.java)
        classpath = find_zookeeper_classpath(self.config.zookeeper_home)
        if not server.command_prefix:  # behind a prefix (a namespace) it has its own ports
            for what, (host, port) in server.sockets.items():
                if not port_free(host, port):
                    raise ConfigError(
                        f"ZooKeeper server {k}'s {what} port {host}:{port} is in use by "
                        "another process"
                    )
        config_file = self._write_config(k)
        command = [
            *server.command_prefix,
            java,
            "-Dzookeeper.admin.enableServer=false",
            f"-Dlog4j2.configurationFile=file:{self.server_dir(k) / 'log4j2.properties'}",
            "-cp",
            classpath,
            _MAIN_CLASS,
            str(config_file),
        ]
        with self.log_path(k).open("ab") as log:
            self._processes[k] = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                # Only prctl() runs in the child, and only when forked from the main thread.
                preexec_fn=die_with_parent_thread(),  # noqa: PLW1509
            )

    def _write_config(self, k: int) -> Path:
        directory = self.server_dir(k)
        server = self.config.servers[k]
        (directory / "data").mkdir(parents=True, exist_ok=True)
        (directory / "data" / "myid").write_text(f"{k + 1}\n")
        lines = [
            f"tickTime={self.config.tick_time_ms}",
            f"initLimit={self.config.init_limit_ticks}",
            f"syncLimit={self.config.sync_limit_ticks}",
            f"cnxTimeout={self.config.connect_timeout_ms}",
            f"dataDir={directory / 'data'}",
            f"clientPort={server.client_port}",
            f"clientPortAddress={server.host}",
            "admin.enableServer=false",
            "4lw.commands.whitelist=ruok,srvr,mntr",
        ]
        lines += [
            f"server.{j + 1}={peer.host}:{peer.quorum_port}:{peer.election_port}"
            for j, peer in enumerate(self.config.servers)
        ]
        config_file = directory / "zoo.cfg"
        config_file.write_text("\n".join(lines) + "\n")
        (directory / "log4j2.properties").write_text(log4j2_properties(self.config.log_level))
        return config_file
