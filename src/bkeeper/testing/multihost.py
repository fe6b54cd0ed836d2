"""A cluster of many hosts on one machine: :class:`MultiHostCluster` (issue 42).

Every process has a host of its own, a Linux network namespace with its own address on one
bridge (:class:`~bkeeper.testing.netns.BridgeNetwork`, subnet ``10.232.<n>.0/24``, interfaces
``bkm...``): ZooKeeper server ``k`` is host ``k`` (a :class:`ZooKeeperEnsemble` of
``zookeepers`` servers, each at ``10.232.<n>.<10+k>`` on the usual ports 2181, 2888, 3888),
bookie ``i`` is host ``zookeepers + i``; clients run in the machine's own namespace and
connect from the bridge's address (:attr:`MultiHostCluster.client_ip`, ``.1``), as
``bkeeper verify`` does. Nothing listens on loopback: a bookie registers the address of its
namespace, the one clients reach it at.

Bookies are ``bkeeper bookie`` processes run with ``--conf`` (``bookie_conf``: by default the
repository's ``deploy/conf/bookie.conf`` when there is one) and per-bookie flags, which win
over the file: ``--host`` (its address), ``--port``, ``--bookie-id`` (``<address>:<port>``),
``-o http_host=`` (its address: a file's admin server listens on its machine's),
``--data-dir`` (``<data_dir>/bookie-<i>``, and its ledger and journal directories under it),
``--metadata`` (the ensemble's URI) and its network location (:func:`location_options`).
Bookie ``i`` is in rack ``/rack-<i % racks>`` (with ``regions``: ``/region-<r>/rack-<j>``,
rack ``j`` in region ``j % regions``), or at ``locations[i]``.

* :meth:`MultiHostCluster.start` makes the network, starts the ensemble, formats the cluster,
  starts every bookie and waits until each said it is ready (it prints that once it listens
  and is registered); a failed start removes all it made;
* :meth:`MultiHostCluster.stop` (and leaving a ``with`` block) stops every process and removes
  every namespace and link, each step tried even when one before failed;
* :meth:`MultiHostCluster.cut_rack` / :meth:`MultiHostCluster.heal_rack` take the host-side
  links of a rack's bookies down / up (nothing reaches them, they reach nothing, ZooKeeper
  included);
* :meth:`MultiHostCluster.stop_bookie` (SIGTERM, wait), :meth:`MultiHostCluster.kill_bookie`
  (SIGKILL), :meth:`MultiHostCluster.start_bookie` (same address, port and data), and
  :meth:`MultiHostCluster.rolling_restart`.

Every wait is bounded by a named limit of :class:`MultiHostConfig` and fails saying what it
waited for. Processes are children that die with this process (a parent-death signal, tied
to the thread that starts them: start them from the main thread, or from one that outlives
them). Needs root and ``ip`` (:func:`~bkeeper.testing.netns.namespaces_unavailable`).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from bkeeper.common.errors import BKeeperError, ConfigError, ConnectionLossError
from bkeeper.meta.cluster import ClusterMetadata
from bkeeper.testing.bookie_process import wait_ready
from bkeeper.testing.child_process import file_size, spawn_child
from bkeeper.testing.netns import BridgeNetwork, SubnetFamily
from bkeeper.testing.zookeeper_ensemble import (
    EnsembleServer,
    ZooKeeperEnsemble,
    ZooKeeperEnsembleConfig,
)

__all__ = [
    "MULTIHOST_SUBNETS",
    "MultiHostCluster",
    "MultiHostConfig",
    "default_bookie_conf",
    "location_options",
]

#: Where multi-host clusters take their subnets: ``10.232.<n>.0/24`` (verify's are 10.231),
#: interfaces ``bkm<tag>...``, one abstract-socket lock per subnet.
MULTIHOST_SUBNETS = SubnetFamily(
    octet=232, prefix="bkm", lock_name="\0bkeeper-multihost-subnet-{n}"
)
#: The repository's bookie configuration (when this module runs from a checkout).
REPOSITORY_BOOKIE_CONF = Path(__file__).resolve().parents[3] / "deploy" / "conf" / "bookie.conf"
#: Clusters made by this process so far: each takes a tag (and interface names) of its own.
_clusters_made = itertools.count()


def default_bookie_conf() -> Path | None:
    """The repository's ``deploy/conf/bookie.conf`` if there is one, else None."""
    return REPOSITORY_BOOKIE_CONF if REPOSITORY_BOOKIE_CONF.is_file() else None


def location_options(location: str) -> list[str]:
    """The ``bkeeper bookie`` options that give it ``location`` (the one place that says how
    a bookie learns its rack)."""
    return ["-o", f"network_location={location}"]


@dataclass(frozen=True)
class MultiHostConfig:
    """What a :class:`MultiHostCluster` runs (module doc). ``tick_time_ms``: the ensemble's
    (sessions of [2, 20] ticks). ``bookie_args``: more ``bkeeper bookie`` options for every
    bookie."""

    data_dir: Path
    bookies: int = 6
    racks: int = 3
    regions: int = 0
    locations: tuple[str, ...] = ()
    zookeepers: int = 3
    bookie_port: int = 3181
    root: str = "/ledgers"
    bookie_conf: Path | None = field(default_factory=default_bookie_conf)
    bookie_args: tuple[str, ...] = ()
    tick_time_ms: int = 500
    zookeeper_home: Path | None = None
    #: How long the ensemble may take to elect its first leader, and each bookie to be ready.
    start_timeout_s: float = 60.0
    #: How long a bookie may take to exit after SIGTERM.
    stop_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        if not 1 <= self.bookies <= 64:
            raise ConfigError(f"bookies: {self.bookies} is not between 1 and 64")
        if not 1 <= self.racks <= self.bookies:
            raise ConfigError(f"racks: {self.racks} is not between 1 and bookies")
        if not 0 <= self.regions <= self.racks:
            raise ConfigError(f"regions: {self.regions} is not between 0 and racks")
        if self.locations and len(self.locations) != self.bookies:
            raise ConfigError(f"locations: {len(self.locations)} given for {self.bookies} bookies")
        for location in self.locations:
            if not location.startswith("/") or location.endswith("/"):
                raise ConfigError(f"locations: {location!r} is not /rack or /region/rack")
        if self.bookie_conf is not None and not self.bookie_conf.is_file():
            raise ConfigError(f"bookie_conf: {self.bookie_conf} is not a file")
        if self.start_timeout_s <= 0 or self.stop_timeout_s <= 0:
            raise ConfigError("start_timeout_s and stop_timeout_s must be > 0")

    def location(self, index: int) -> str:
        """Bookie ``index``'s network location."""
        if self.locations:
            return self.locations[index]
        rack = index % self.racks
        if self.regions:
            return f"/region-{rack % self.regions}/rack-{rack}"
        return f"/rack-{rack}"


class MultiHostCluster:
    """ZooKeeper servers and bookies, each on a host of its own (module doc)."""

    def __init__(self, config: MultiHostConfig) -> None:
        self.config = config
        tag = str(os.getpid() % 100_000 * 100 + next(_clusters_made) % 100)
        self.network = BridgeNetwork(config.zookeepers + config.bookies, MULTIHOST_SUBNETS, tag=tag)
        self._zookeeper: ZooKeeperEnsemble | None = None
        self._bookies: dict[int, subprocess.Popen[bytes]] = {}
        self._stopped: set[int] = set()  # bookies stopped or killed on purpose

    @property
    def zookeeper(self) -> ZooKeeperEnsemble:
        """The ensemble (once :meth:`start` made it)."""
        if self._zookeeper is None:
            raise BKeeperError("the multi-host cluster is not started")
        return self._zookeeper

    @property
    def metadata_uri(self) -> str:
        return self.zookeeper.uri(self.config.root)

    @property
    def client_ip(self) -> str:
        """The address clients in this process's namespace connect from."""
        return self.network.bridge_ip

    def bookie_host(self, index: int) -> int:
        """The network host (namespace) of bookie ``index``."""
        if not 0 <= index < self.config.bookies:
            raise ConfigError(f"no bookie {index} (0..{self.config.bookies - 1})")
        return self.config.zookeepers + index

    def bookie_address(self, index: int) -> tuple[str, int]:
        return self.network.host_ip(self.bookie_host(index)), self.config.bookie_port

    def bookie_id(self, index: int) -> str:
        host, port = self.bookie_address(index)
        return f"{host}:{port}"

    @property
    def bookie_ids(self) -> list[str]:
        return [self.bookie_id(i) for i in range(self.config.bookies)]

    @property
    def racks(self) -> dict[str, str]:
        """Bookie id -> network location."""
        return {self.bookie_id(i): self.config.location(i) for i in range(self.config.bookies)}

    def rack_bookies(self, rack: str) -> list[int]:
        """The bookies at location ``rack``; ``ConfigError`` naming the racks if none."""
        found = [i for i in range(self.config.bookies) if self.config.location(i) == rack]
        if not found:
            known = sorted(set(self.racks.values()))
            raise ConfigError(f"no bookie in rack {rack!r} (racks: {', '.join(known)})")
        return found

    def bookie_data_dir(self, index: int) -> Path:
        return self.config.data_dir / f"bookie-{index}"

    def bookie_log(self, index: int) -> Path:
        return self.config.data_dir / f"bookie-{index}.log"

    def bookie_running(self, index: int) -> bool:
        proc = self._bookies.get(index)
        return proc is not None and proc.poll() is None

    def start(self) -> None:
        """Make the network, start the ensemble, format the cluster, start every bookie and
        wait until each is ready (module doc)."""
        self.config.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            self.network.setup()
            self._zookeeper = ZooKeeperEnsemble(self._ensemble_config())
            self._zookeeper.start()
            asyncio.run(self._format())
            offsets = {i: self._spawn_bookie(i) for i in range(self.config.bookies)}
            for index, offset in offsets.items():
                self._wait_bookie(index, offset)
        except BaseException:
            self.stop()
            raise

    def _ensemble_config(self) -> ZooKeeperEnsembleConfig:
        servers = tuple(
            EnsembleServer(
                self.network.host_ip(k), command_prefix=tuple(self.network.in_namespace(k))
            )
            for k in range(self.config.zookeepers)
        )
        return ZooKeeperEnsembleConfig(
            data_dir=self.config.data_dir / "zookeeper",
            servers=servers,
            tick_time_ms=self.config.tick_time_ms,
            start_timeout_s=self.config.start_timeout_s,
            zookeeper_home=self.config.zookeeper_home,
        )

    async def _format(self) -> None:
        """Format the cluster; a connection lost while the ensemble settles is tried again
        until ``start_timeout_s`` is spent."""
        deadline = time.monotonic() + self.config.start_timeout_s
        while True:
            try:
                async with await ClusterMetadata.open(self.metadata_uri) as cluster:
                    if await cluster.instance_id() is None:
                        await cluster.format()
                    return
            except ConnectionLossError as exc:
                if time.monotonic() >= deadline:
                    raise BKeeperError(
                        f"the cluster at {self.metadata_uri} could not be formatted within "
                        f"{self.config.start_timeout_s:g} s: {exc}"
                    ) from exc

    def bookie_command(self, index: int) -> list[str]:
        """Bookie ``index``'s command line, run in its namespace."""
        host, port = self.bookie_address(index)
        data_dir = self.bookie_data_dir(index)
        conf = [] if self.config.bookie_conf is None else ["--conf", str(self.config.bookie_conf)]
        return [
            *self.network.in_namespace(self.bookie_host(index)),
            sys.executable, "-m", "bkeeper", "bookie", *conf,
            # What a machine's file says of its own machine (address, id, admin address,
            # directories: deploy/conf/bookie.conf's THIS MACHINE lines), made this host's.
            "--host", host, "--port", str(port), "--bookie-id", f"{host}:{port}",
            "-o", f"http_host={host}", "--data-dir", str(data_dir),
            "--ledger-dir", str(data_dir / "current" / "ledgers"),
            "--journal-dir", str(data_dir / "current" / "journal"),
            "--metadata", self.metadata_uri,
            *location_options(self.config.location(index)), *self.config.bookie_args,
        ]  # fmt: skip

    def _spawn_bookie(self, index: int) -> int:
        """Start bookie ``index``; the offset of its log its ready line comes after."""
        log_path = self.bookie_log(index)
        offset = file_size(log_path)
        self._bookies[index] = spawn_child(self.bookie_command(index), log_path)
        return offset

    def _wait_bookie(self, index: int, offset: int) -> None:
        try:
            wait_ready(self._bookies[index], self.bookie_log(index), offset,
                       self.config.start_timeout_s)  # fmt: skip
        except BKeeperError as exc:
            raise BKeeperError(f"bookie {index} ({self.bookie_id(index)}): {exc}") from exc

    def start_bookie(self, index: int) -> None:
        """Start bookie ``index`` again (same address, port and data) and wait until it is
        ready (registered), at most ``start_timeout_s``."""
        if self.bookie_running(index):
            raise BKeeperError(f"bookie {index} is still running")
        self._stopped.discard(index)
        self._wait_bookie(index, self._spawn_bookie(index))

    def stop_bookie(self, index: int) -> None:
        """SIGTERM bookie ``index`` and wait until it exited (it drains, checkpoints and
        unregisters). ``BKeeperError`` naming its log if it had exited by itself, if it
        exits with a status other than 0, or if it takes longer than ``stop_timeout_s``
        (it is killed then); a no-op on one this cluster stopped or killed already."""
        proc = self._process(index)
        if proc.poll() is not None:
            if index in self._stopped:
                return
            raise BKeeperError(
                f"bookie {index} had exited by itself (status {proc.returncode}); see "
                f"{self.bookie_log(index)}"
            )
        self._stopped.add(index)
        proc.send_signal(signal.SIGCONT)  # a stopped (SIGSTOP) one takes no SIGTERM
        proc.terminate()
        try:
            status = proc.wait(self.config.stop_timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise BKeeperError(
                f"bookie {index} did not exit within {self.config.stop_timeout_s:g} s of "
                f"SIGTERM (killed); see {self.bookie_log(index)}"
            ) from None
        if status != 0:
            raise BKeeperError(
                f"bookie {index} exited with status {status} after SIGTERM; see "
                f"{self.bookie_log(index)}"
            )

    def kill_bookie(self, index: int) -> None:
        """SIGKILL bookie ``index`` and reap it."""
        proc = self._process(index)
        self._stopped.add(index)
        if proc.poll() is None:
            proc.kill()
        proc.wait()

    def _process(self, index: int) -> subprocess.Popen[bytes]:
        proc = self._bookies.get(index)
        if proc is None:
            raise BKeeperError(f"bookie {index} was never started")
        return proc

    def rolling_restart(self, between: Callable[[int], None] | None = None) -> None:
        """Restart every bookie, one at a time: stop it, start it, wait until it is ready;
        ``between(i)`` after bookie ``i`` is back, before the next."""
        for index in range(self.config.bookies):
            self.stop_bookie(index)
            self.start_bookie(index)
            if between is not None:
                between(index)

    def cut_rack(self, rack: str) -> None:
        """Take the host-side link of every bookie of ``rack`` down (module doc)."""
        for index in self.rack_bookies(rack):
            self.network.isolate(self.bookie_host(index))

    def heal_rack(self, rack: str) -> None:
        for index in self.rack_bookies(rack):
            self.network.heal(self.bookie_host(index))

    def stop(self) -> None:
        """Stop every bookie (SIGTERM, SIGKILL after ``stop_timeout_s``), the ensemble, and
        remove the network; each step is tried, the first failure raised after the last."""
        procs = [p for p in self._bookies.values() if p.poll() is None]
        for proc in procs:
            proc.send_signal(signal.SIGCONT)
            proc.terminate()
        deadline = time.monotonic() + self.config.stop_timeout_s
        for proc in procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._bookies.clear()
        try:
            if self._zookeeper is not None:
                self._zookeeper.stop()
        finally:
            self.network.teardown()

    def __enter__(self) -> MultiHostCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
