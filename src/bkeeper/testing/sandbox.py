"""A local cluster in one command: ZooKeeper plus N bookie processes (``bkeeper sandbox``).

N is :data:`DEFAULT_BOOKIES` (4) unless told: the logs, the key-value store, Dice and the
Spark sink write ledgers of ensemble 3 by default, and a cluster heals the loss of a bookie
only with a spare one to copy its replicas to (E+1 writable bookies; docs/operations.md,
Spare bookies).

Layout under the data directory: ``zookeeper/`` and ``bookie-<i>/`` (kept across restarts,
so a restarted sandbox finds its ledgers). Every bookie runs auto-recovery unless
``autorecovery`` is off. Ports are fixed (ZooKeeper ``zookeeper_port``,
bookie ``i`` at ``bookie_port_base + i``) so that bookie ids, and with them the cookies, stay
the same from one start to the next; bookie ``i``'s admin HTTP server, if any, is at
``http_port_base + i``. With ``dashboard_port``, ``bkeeper dashboard`` runs too (a child
process like the bookies, log ``dashboard.log``), started once every bookie is ready; its
page is :attr:`Sandbox.dashboard_url`. The cluster is formatted on first start. Bookies and
the dashboard are child processes that die with the sandbox (parent-death signal), each in a
process group of its own (a Ctrl-C on the sandbox's terminal reaches the sandbox alone, which
stops them in order); ``stop`` sends SIGTERM to the dashboard and each bookie, then stops
ZooKeeper, leaving no process behind.

Each child is named by a :class:`~bkeeper.testing.supervision.Child`; :meth:`Sandbox.children`,
:meth:`Sandbox.child_log`, :meth:`Sandbox.child_exit_status`, :meth:`Sandbox.respawn_child`
and :meth:`Sandbox.child_ready` let :mod:`bkeeper.testing.sandbox_supervisor` watch them and
start one that exited again, on the same ports, ids and directories (so its cookie matches).

With ``secure`` (``bkeeper sandbox --secure``) the credentials of
:mod:`bkeeper.testing.sandbox_security` are made under ``security/``: the metadata URI carries
the ZooKeeper digest file (every node gets an ACL for that identity alone), bookies require TLS
and token authentication, and every child process gets the ``bkeeper`` group's client options
(:meth:`SandboxSecurity.client_args`) so that its clients (auto-recovery, the dashboard) use
TLS and the token; :attr:`Sandbox.client_env` is the same as environment variables, for users
(with ``BKEEPER_METADATA``, which it holds for a sandbox without ``secure`` too).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from urllib.parse import quote

from bkeeper.autorecovery.config import AutoRecoveryConfig
from bkeeper.common.errors import BKeeperError, ConfigError, ConnectionLossError
from bkeeper.meta.cluster import ClusterMetadata
from bkeeper.meta.uri import DIGEST_FILE_OPTION
from bkeeper.testing.child_process import file_size, spawn_child
from bkeeper.testing.sandbox_config import DEFAULT_BOOKIES, SandboxConfig
from bkeeper.testing.sandbox_security import SandboxSecurity
from bkeeper.testing.supervision import NO_PROCESS, Child, ChildKind
from bkeeper.testing.zookeeper import ZooKeeperConfig, ZooKeeperServer, port_free

__all__ = ["DEFAULT_BOOKIES", "Sandbox", "SandboxConfig"]

log = logging.getLogger(__name__)

#: What ``bkeeper dashboard`` prints once it serves.
_DASHBOARD_READY = re.compile(rb"dashboard ready on (http://\S+)")
#: What ``bkeeper autorecovery`` prints once it runs.
_AUTORECOVERY_READY = re.compile(rb" ready \(metadata ")


#: The most of a restarted child's output searched for its ready line (it comes early).
_READY_SEARCH_BYTES_MAX = 1024 * 1024


class Sandbox:
    """ZooKeeper and bookies as child processes. Use as a context manager."""

    def __init__(self, config: SandboxConfig) -> None:
        self.config = config
        self.zookeeper = ZooKeeperServer(
            ZooKeeperConfig(
                data_dir=config.data_dir / "zookeeper",
                port=config.zookeeper_port,
                zookeeper_home=config.zookeeper_home,
            )
        )
        self.bookies: list[subprocess.Popen[bytes]] = []
        self.dashboard: subprocess.Popen[bytes] | None = None
        #: The auto-recovery process beside each bookie (``autorecovery_nice`` set).
        self.autorecoveries: list[subprocess.Popen[bytes]] = []
        #: The dashboard's page, once it serves.
        self.dashboard_url: str | None = None
        #: The cluster's instance id, once started.
        self.instance_id: str | None = None
        #: Where each child's log was when it was last started (its ready line comes after).
        self._log_offsets: dict[Child, int] = {}
        self.security: SandboxSecurity | None = None
        if config.secure:
            self.security = SandboxSecurity.prepare(config.data_dir / "security")

    @property
    def metadata_uri(self) -> str:
        uri = self.zookeeper.uri(self.config.root)
        if self.security is not None:
            # Percent-encoded: the URI's query is parsed as one (a data directory with a
            # space, ``+``, ``&`` or ``%`` in its path would be another path, or refused).
            uri += f"?{DIGEST_FILE_OPTION}={quote(str(self.security.digest_file), safe='/')}"
        return uri

    def _client_args(self) -> list[str]:
        return [] if self.security is None else self.security.client_args()

    @property
    def client_env(self) -> dict[str, str]:
        """What a ``bkeeper`` command's environment needs to be a client of this sandbox:
        ``BKEEPER_METADATA`` (with the digest file when ``secure``), and when ``secure`` the
        TLS CA and the token file. Paths only, never a secret."""
        env = {"BKEEPER_METADATA": self.metadata_uri}
        if self.security is not None:
            env.update(self.security.client_env())
        return env

    def bookie_address(self, index: int) -> tuple[str, int]:
        return "127.0.0.1", self.config.bookie_port_base + index

    def admin_address(self, index: int) -> tuple[str, int] | None:
        """Where bookie ``index`` serves its admin HTTP API; None without ``http_port_base``."""
        base = self.config.http_port_base
        return None if base is None else ("127.0.0.1", base + index)

    def ports_in_use(self) -> list[tuple[str, int]]:
        """``(what, port)`` for each port of this sandbox that another process holds now."""
        wanted = [("ZooKeeper", self.config.zookeeper_port)]
        wanted += [(f"bookie {i}", self.bookie_address(i)[1]) for i in range(self.config.bookies)]
        for i in range(self.config.bookies):
            admin = self.admin_address(i)
            if admin is not None:
                wanted.append((f"bookie {i} admin", admin[1]))
        if self.config.dashboard_port is not None:
            wanted.append(("dashboard", self.config.dashboard_port))
        return [(what, port) for what, port in wanted if not port_free("127.0.0.1", port)]

    def start(self) -> None:
        """Start ZooKeeper and every bookie; return once each bookie is up and registered.

        ``ConfigError`` naming the port when one of the sandbox's ports is taken (checked
        first, so nothing of another cluster is mistaken for this one's)."""
        busy = self.ports_in_use()
        if busy:
            what, port = busy[0]
            raise ConfigError(f"port {port} ({what}) is in use by another process")
        self.config.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            self.zookeeper.start()
            self.instance_id = asyncio.run(self._format_if_new())
            log.debug("cluster %s (instance %s)", self.metadata_uri, self.instance_id)
            for index in range(self.config.bookies):
                self.bookies.append(self._spawn_bookie(index))
            for index, proc in enumerate(self.bookies):
                self._wait_bookie(index, proc)
            if self.config.autorecovery and self.config.autorecovery_nice is not None:
                for index in range(self.config.bookies):
                    self._start_autorecovery(index, self.config.autorecovery_nice)
            if self.config.dashboard_port is not None:
                self._start_dashboard(self.config.dashboard_port)
            if self.zookeeper.wait_nowait() is not None:
                raise BKeeperError(f"ZooKeeper exited; see {self.zookeeper.log_path}")
        except BaseException:
            self.stop()
            raise

    async def _format_if_new(self) -> str:
        async with await self._open_metadata() as cluster:
            instance_id = await cluster.instance_id()
            return instance_id if instance_id is not None else await cluster.format()

    async def _open_metadata(self) -> ClusterMetadata:
        """The cluster's metadata; a ZooKeeper that just started on a loaded machine may
        take longer than one connect timeout to grant its first session: it is tried again
        until ``start_timeout_s`` is spent."""
        deadline = time.monotonic() + self.config.start_timeout_s
        while True:
            try:
                return await ClusterMetadata.open(self.metadata_uri)
            except ConnectionLossError as exc:
                if time.monotonic() >= deadline:
                    raise
                log.info("%s; trying again", exc)  # expected while ZooKeeper starts

    def _bookie_log(self, index: int) -> Path:
        return self.config.data_dir / f"bookie-{index}.log"

    def bookie_command(self, index: int) -> list[str]:
        """The command line of bookie ``index``."""
        host, port = self.bookie_address(index)
        data_dir = self.config.data_dir / f"bookie-{index}"
        admin = self.admin_address(index)
        http = [] if admin is None else ["--http-port", str(admin[1])]
        cmd = [
            sys.executable, "-m", "bkeeper", *self._client_args(), "bookie",
            "--data-dir", str(data_dir), "--host", host, "--port", str(port), *http,
            "--metadata", self.metadata_uri, *self._split_args()[0],
        ]  # fmt: skip
        if self.security is not None:
            cmd += self.security.bookie_args()
        if self.config.autorecovery and self.config.autorecovery_nice is None:
            cmd.append("--autorecovery")
        for flag, dirs in (
            ("--ledger-dir", self.config.ledger_dirs),
            ("--journal-dir", self.config.journal_dirs),
        ):
            for directory in dirs:
                cmd += [flag, str(directory / f"bookie-{index}")]
        return cmd

    def _spawn_bookie(self, index: int) -> subprocess.Popen[bytes]:
        log_path = self._bookie_log(index)
        self._log_offsets[Child(ChildKind.BOOKIE, index)] = file_size(log_path)
        return spawn_child(self.bookie_command(index), log_path, env=self.config.bookie_env)

    def autorecovery_command(self, index: int) -> list[str]:
        """The command line of the auto-recovery process beside bookie ``index`` (its
        participant id is the bookie's: ``whoisauditor`` names the bookie)."""
        host, port = self.bookie_address(index)
        return [
            sys.executable, "-m", "bkeeper", *self._client_args(), "autorecovery",
            "--metadata", self.metadata_uri,
            "--id", f"{host}:{port}", *self._split_args()[1],
        ]  # fmt: skip

    def _split_args(self) -> tuple[list[str], list[str]]:
        """``bookie_args`` as (the bookies', the auto-recovery processes'): with
        ``autorecovery_nice`` the ``-o`` options naming an auto-recovery field go to the
        processes of their own; otherwise every argument is the bookies'."""
        args = list(self.config.bookie_args)
        if self.config.autorecovery_nice is None:
            return args, []
        fields = {f.name for f in dataclasses.fields(AutoRecoveryConfig)}
        bookie: list[str] = []
        recovery: list[str] = []
        position = 0
        while position < len(args):
            arg = args[position]
            value = args[position + 1] if position + 1 < len(args) else None
            if arg == "-o" and value is not None and value.partition("=")[0].strip() in fields:
                recovery += [arg, value]
                position += 2
            else:
                bookie.append(arg)
                position += 1
        return bookie, recovery

    def _start_autorecovery(self, index: int, nice: int) -> subprocess.Popen[bytes]:
        """Start it and wait for its "ready" line (it is stopped with the sandbox even if
        it never gets there)."""
        proc = self._spawn_autorecovery(index, nice)
        child = Child(ChildKind.AUTORECOVERY, index)
        self._wait_line(proc, self.child_log(child), self._log_offsets[child],
                        _AUTORECOVERY_READY, f"auto-recovery {index}", "")  # fmt: skip
        return proc

    def _spawn_autorecovery(self, index: int, nice: int) -> subprocess.Popen[bytes]:
        log_path = self.child_log(Child(ChildKind.AUTORECOVERY, index))
        self._log_offsets[Child(ChildKind.AUTORECOVERY, index)] = file_size(log_path)
        proc = spawn_child(self.autorecovery_command(index), log_path, nice)
        if index < len(self.autorecoveries):
            self.autorecoveries[index] = proc
        else:
            self.autorecoveries.append(proc)
        return proc

    def _wait_line(
        self,
        proc: subprocess.Popen[bytes],
        log_path: Path,
        offset: int,
        pattern: re.Pattern[bytes],
        what: str,
        where: str,
    ) -> re.Match[bytes]:
        """Wait until ``proc`` writes ``pattern`` into ``log_path`` (past ``offset``): its
        match. ``BKeeperError`` with its last line if it exits first, or after
        ``start_timeout_s``."""
        deadline = time.monotonic() + self.config.start_timeout_s
        while time.monotonic() < deadline:
            with log_path.open("rb") as file:
                file.seek(offset)
                output = file.read()
            found = pattern.search(output)
            if found:
                return found
            if proc.poll() is not None:
                tail = output.decode(errors="replace").strip().splitlines()[-1:]
                raise BKeeperError(
                    f"{what} exited with code {proc.returncode}: "
                    f"{tail[0] if tail else 'no output'} (log: {log_path})"
                )
            time.sleep(0.05)
        raise BKeeperError(f"{what} was not ready{where} in time ({log_path})")

    def dashboard_command(self, port: int) -> list[str]:
        """The command line of the sandbox's dashboard."""
        return [
            sys.executable, "-m", "bkeeper", *self._client_args(), "dashboard",
            "--metadata", self.metadata_uri,
            "--host", "127.0.0.1", "--port", str(port),
        ]  # fmt: skip

    def _start_dashboard(self, port: int) -> None:
        """Start the dashboard and wait for its "dashboard ready on <url>" line."""
        proc = self._spawn_dashboard(port)
        child = Child(ChildKind.DASHBOARD)
        found = self._wait_line(proc, self.child_log(child), self._log_offsets[child],
                                _DASHBOARD_READY, "the dashboard", f" on port {port}")  # fmt: skip
        self.dashboard_url = found.group(1).decode()

    def _spawn_dashboard(self, port: int) -> subprocess.Popen[bytes]:
        log_path = self.child_log(Child(ChildKind.DASHBOARD))
        self._log_offsets[Child(ChildKind.DASHBOARD)] = file_size(log_path)
        self.dashboard = spawn_child(self.dashboard_command(port), log_path)
        return self.dashboard

    def _wait_bookie(self, index: int, proc: subprocess.Popen[bytes]) -> None:
        """Wait for the bookie's own "ready" line (printed once it listens and registered)."""
        host, port = self.bookie_address(index)
        offset = self._log_offsets.get(Child(ChildKind.BOOKIE, index), 0)
        self._wait_line(proc, self._bookie_log(index), offset, self._bookie_ready(index),
                        f"bookie {index}", f" on {host}:{port}")  # fmt: skip

    def _bookie_ready(self, index: int) -> re.Pattern[bytes]:
        host, port = self.bookie_address(index)
        return re.compile(re.escape(f"ready on {host}:{port}".encode()))

    def stop(self) -> None:
        """SIGTERM the dashboard and every bookie (they drain and checkpoint), then stop
        ZooKeeper; a process stopped with SIGSTOP (a verify fault) is continued first."""
        zookeeper = self.zookeeper.pid
        if zookeeper is not None:  # paused: the bookies' last steps would wait on it
            with contextlib.suppress(ProcessLookupError):
                os.kill(zookeeper, signal.SIGCONT)
        procs = ([] if self.dashboard is None else [self.dashboard]) + self.autorecoveries
        procs += self.bookies
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)  # a stopped (SIGSTOP) one takes no SIGTERM
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.config.stop_timeout_s
        for proc in procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.bookies.clear()
        self.autorecoveries.clear()
        self.dashboard = None
        self.dashboard_url = None
        self.zookeeper.stop()

    def kill_bookie(self, index: int, sig: int = signal.SIGKILL) -> None:
        """Signal bookie ``index`` and the auto-recovery process beside it, if any."""
        if index < len(self.autorecoveries):
            os.kill(self.autorecoveries[index].pid, sig)
        os.kill(self.bookies[index].pid, sig)

    def restart_bookie(self, index: int) -> None:
        """Start bookie ``index`` again (after :meth:`kill_bookie`), with its data, and wait
        until it is ready; its auto-recovery process too, if it has one."""
        old = self.bookies[index]
        if old.poll() is None:
            raise BKeeperError(f"bookie {index} is still running (pid {old.pid})")
        proc = self._spawn_bookie(index)
        self.bookies[index] = proc
        self._wait_bookie(index, proc)
        nice = self.config.autorecovery_nice
        beside = self.autorecoveries[index] if index < len(self.autorecoveries) else None
        if nice is not None and beside is not None and beside.poll() is not None:
            self._start_autorecovery(index, nice)

    def children(self) -> list[Child]:
        """Every child process this sandbox runs, in the order it starts them."""
        found = [Child(ChildKind.ZOOKEEPER)]
        found += [Child(ChildKind.BOOKIE, i) for i in range(len(self.bookies))]
        found += [Child(ChildKind.AUTORECOVERY, i) for i in range(len(self.autorecoveries))]
        if self.dashboard is not None:
            found.append(Child(ChildKind.DASHBOARD))
        return found

    def child_log(self, child: Child) -> Path:
        """Where ``child``'s output goes (appended to across restarts)."""
        if child.kind is ChildKind.ZOOKEEPER:
            return self.zookeeper.log_path
        if child.kind is ChildKind.BOOKIE:
            return self._bookie_log(child.index)
        if child.kind is ChildKind.AUTORECOVERY:
            return self.config.data_dir / f"autorecovery-{child.index}.log"
        return self.config.data_dir / "dashboard.log"

    def child_exit_status(self, child: Child) -> int | None:
        """``child``'s exit status (``Popen.returncode``: a signal is negative); None while it
        runs; :data:`~bkeeper.testing.supervision.NO_PROCESS` for ZooKeeper after a start
        that failed (it leaves no process)."""
        if child.kind is ChildKind.ZOOKEEPER:
            if self.zookeeper.pid is None:
                return NO_PROCESS
            return self.zookeeper.wait_nowait()
        return self._process(child).poll()

    def _process(self, child: Child) -> subprocess.Popen[bytes]:
        if child.kind is ChildKind.BOOKIE:
            return self.bookies[child.index]
        if child.kind is ChildKind.AUTORECOVERY:
            return self.autorecoveries[child.index]
        if self.dashboard is None:
            raise BKeeperError("the sandbox runs no dashboard")
        return self.dashboard

    def respawn_child(self, child: Child) -> None:
        """Start ``child``, which exited, again as it was: same command line, so same ports,
        id and directories. A bookie, auto-recovery process or dashboard is only spawned
        (:meth:`child_ready` tells when it serves); ZooKeeper is waited for (its start checks
        that it serves), ``BKeeperError`` if it does not."""
        if self.child_exit_status(child) is None:
            raise BKeeperError(f"{child} is still running")
        if child.kind is ChildKind.ZOOKEEPER:
            self.zookeeper.stop()  # reaps the one that exited
            self.zookeeper.start()
        elif child.kind is ChildKind.BOOKIE:
            self.bookies[child.index] = self._spawn_bookie(child.index)
        elif child.kind is ChildKind.AUTORECOVERY:
            self._spawn_autorecovery(child.index, self.config.autorecovery_nice or 0)
        else:
            assert self.config.dashboard_port is not None  # it ran, so it has a port
            self._spawn_dashboard(self.config.dashboard_port)

    def child_ready(self, child: Child) -> bool:
        """True once ``child``, since it was last started, said it serves (its ready line);
        ZooKeeper: once it answers."""
        if child.kind is ChildKind.ZOOKEEPER:
            return self.zookeeper.is_ready()
        if child.kind is ChildKind.BOOKIE:
            pattern = self._bookie_ready(child.index)
        else:
            pattern = (
                _AUTORECOVERY_READY if child.kind is ChildKind.AUTORECOVERY else _DASHBOARD_READY
            )
        with self.child_log(child).open("rb") as file:
            file.seek(self._log_offsets.get(child, 0))
            found = pattern.search(file.read(_READY_SEARCH_BYTES_MAX))
        if found is not None and child.kind is ChildKind.DASHBOARD:
            self.dashboard_url = found.group(1).decode()
        return found is not None

    def bookie_data_dir(self, index: int) -> Path:
        return self.config.data_dir / f"bookie-{index}"

    def __enter__(self) -> Sandbox:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
