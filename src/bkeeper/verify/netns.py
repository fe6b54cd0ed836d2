"""Network partitions for ``bkeeper verify``: each bookie (and each kv member of the kv
workload) in a Linux network namespace of its own, joined to the others and to the host by a
bridge.

:class:`Network` makes a bridge in the host's namespace with two addresses: the clients'
(``10.231.<n>.1/24``, the bridge's primary address, which connections from the host's
namespace come from) and ZooKeeper's (``10.231.<n>.2``, where it listens); and, per bookie, a
namespace holding one end of a veth pair (``10.231.<n>.<10+i>``) whose other end is enslaved
to the bridge. Clients, ZooKeeper and bookies all reach each other at layer 2, with no
forwarding. The kv workload's members, when asked for, get namespaces after the bookies'
(host ``bookies + i`` is member ``i``, at ``10.231.<n>.<10+bookies+i>``). ``<n>`` is the
first from one derived from the process id that no interface of the host uses and no other
network of this machine holds (an abstract socket per subnet).

* :meth:`Network.isolate` takes host ``i``'s host-side link down: it can reach nothing and
  nothing reaches it (ZooKeeper included) until the link comes up again;
* :meth:`Network.cut` adds a blackhole route in host ``i``'s namespace to one peer's
  address (ZooKeeper's, the clients', or a bookie's): what the host sends there is dropped
  silently, so connections between the two stall and time out as over a broken link, while
  the host still talks to everyone else. (``tc`` filters would cut one way
  only as well, but this kernel has no classifiers; routes need nothing beyond ``ip``.)

Needs root (``CAP_NET_ADMIN`` and ``CAP_SYS_ADMIN``) and ``ip`` with bridge and veth support;
:meth:`Network.setup` raises ``ConfigError`` saying what failed, and the run skips the
``partition`` nemesis with that reason. :meth:`Network.teardown` removes everything it made.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import socket
import subprocess

from bkeeper.common.errors import ConfigError
from bkeeper.testing.sandbox import Sandbox, SandboxConfig
from bkeeper.testing.zookeeper import ZooKeeperConfig, ZooKeeperServer

__all__ = ["NetnsSandbox", "Network", "effective_capabilities", "privileges_missing"]

log = logging.getLogger(__name__)


#: Subnets ``10.231.<n>.0/24`` a network may take: ``n`` from 10 on.
SUBNETS = 240
#: A network holds its subnet by binding an abstract Unix socket of this name (``{n}``: the
#: subnet) while it exists, so that two ``bkeeper verify`` processes on one machine never
#: take the same one (two bridges with one subnet leave ZooKeeper unreachable from both);
#: the kernel frees the name when the process ends, and no file is left behind.
SUBNET_LOCK_NAME = "\0bkeeper-verify-subnet-{n}"


#: Capability bits (``linux/capability.h``): namespaces and links, mounts.
CAP_NET_ADMIN = 12
CAP_SYS_ADMIN = 21
#: Nemeses that mount a tmpfs per bookie (``CAP_SYS_ADMIN``).
MOUNTING = frozenset({"disk-full"})


def effective_capabilities(status: str | None = None) -> int:
    """This process's effective capability set (``CapEff`` of ``/proc/self/status``, or of
    ``status``'s text); 0 where it cannot be read."""
    if status is None:
        try:
            with open("/proc/self/status", encoding="ascii") as f:
                status = f.read()
        except OSError:
            return 0
    for line in status.splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    return 0


def privileges_missing(
    nemeses: tuple[str, ...] | list[str],
    partitions: frozenset[str],
    capabilities: int,
    ip_found: bool,
) -> str | None:
    """Why these nemeses cannot run here, in one line (None: they can). ``partitions``: the
    nemeses that need network namespaces (``ip netns``: ``CAP_NET_ADMIN`` and
    ``CAP_SYS_ADMIN``); ``disk-full`` mounts a tmpfs (``CAP_SYS_ADMIN``)."""
    has_net = bool(capabilities >> CAP_NET_ADMIN & 1)
    has_sys = bool(capabilities >> CAP_SYS_ADMIN & 1)
    blocked = [
        name
        for name in nemeses
        if (name in partitions and not (has_net and has_sys and ip_found))
        or (name in MOUNTING and not has_sys)
    ]
    if not blocked:
        return None
    rest = [name for name in nemeses if name not in blocked]
    why = "root (CAP_NET_ADMIN and CAP_SYS_ADMIN)"
    if any(name in partitions for name in blocked) and not ip_found:
        why += " and the `ip` command (iproute2)"
    instead = f"--nemesis {','.join(rest)}" if rest else "--nemesis none"
    return (
        f"nemesis {', '.join(blocked)} need{'s' if len(blocked) == 1 else ''} {why}: "
        "partitions put each bookie in a network namespace (ip netns), disk-full mounts a "
        f"tmpfs per bookie; run as root, or without them: {instead}"
    )


def _subnets_in_use() -> set[int]:
    """The ``n`` of every ``10.231.<n>.x`` address on the host's interfaces."""
    result = subprocess.run(
        ["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True, check=False
    )
    return {int(n) for n in re.findall(r"inet 10\.231\.(\d+)\.", result.stdout)}


#: What ``ip`` says when asked to remove a link or a namespace that is not there.
_ALREADY_GONE = ("Cannot find device", "No such file or directory")


def _ip(*args: str) -> None:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        reason = result.stderr.strip() or f"exit code {result.returncode}"
        raise ConfigError(f"ip {' '.join(args)}: {reason}")


class Network:
    """A bridge and one namespace per bookie and per kv member (module doc)."""

    def __init__(self, bookies: int, tag: str | None = None, members: int = 0) -> None:
        self.bookies = bookies
        self.members = members
        tag = tag or str(os.getpid() % 100_000)
        self.tag = tag
        self.subnet = 10 + int(tag) % SUBNETS
        self.bridge = f"bkv{tag}b"
        self._made: list[tuple[str, str]] = []  # ("ns"|"link", name), in creation order
        self._subnet_lock: socket.socket | None = None  # bound to the subnet's lock name

    @property
    def bridge_ip(self) -> str:
        """The clients' address (connections from the host's namespace come from it)."""
        return f"10.231.{self.subnet}.1"

    @property
    def zookeeper_ip(self) -> str:
        return f"10.231.{self.subnet}.2"

    def host_ip(self, index: int) -> str:
        """Host ``index``'s address: bookie ``index``'s, or a member's (:meth:`member_host`)."""
        return f"10.231.{self.subnet}.{10 + index}"

    def member_host(self, member: int) -> int:
        """The host index of kv member ``member`` (its namespace, its address)."""
        if not 0 <= member < self.members:
            raise ConfigError(f"no kv member {member} in the network ({self.members} members)")
        return self.bookies + member

    def namespace(self, index: int) -> str:
        return f"bkv{self.tag}n{index}"

    def host_link(self, index: int) -> str:
        return f"bkv{self.tag}h{index}"

    def setup(self) -> None:
        if shutil.which("ip") is None:
            raise ConfigError("network partitions need the `ip` command (iproute2)")
        self._claim_subnet()
        # Each thing is noted before it is made: a stop (SIGTERM, Ctrl-C) may land between
        # the two, and teardown passes over what is not there.
        try:
            self._made.append(("link", self.bridge))
            _ip("link", "add", self.bridge, "type", "bridge")
            _ip("addr", "add", f"{self.bridge_ip}/24", "dev", self.bridge)
            _ip("addr", "add", f"{self.zookeeper_ip}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            for index in range(self.bookies + self.members):
                ns, host = self.namespace(index), self.host_link(index)
                inner = f"bkv{self.tag}i{index}"
                self._made.append(("ns", ns))
                _ip("netns", "add", ns)
                self._made.append(("link", host))
                _ip("link", "add", host, "type", "veth", "peer", "name", inner)
                _ip("link", "set", inner, "netns", ns)
                _ip("link", "set", host, "master", self.bridge)
                _ip("link", "set", host, "up")
                _ip("-n", ns, "addr", "add", f"{self.host_ip(index)}/24", "dev", inner)
                _ip("-n", ns, "link", "set", inner, "up")
                _ip("-n", ns, "link", "set", "lo", "up")
        except BaseException:  # a failed step, or a stop in the middle: nothing left behind
            try:
                self.teardown()
            except ConfigError as exc:  # the error that stopped the setup is the one raised
                log.warning("verify network %s: not all of it removed: %s", self.tag, exc)
            raise

    def _claim_subnet(self) -> None:
        """Take the first subnet from :attr:`subnet` on that no interface of the host uses
        and no other network holds (:data:`SUBNET_LOCK_NAME`)."""
        used = _subnets_in_use()
        for step in range(SUBNETS):
            subnet = 10 + (self.subnet - 10 + step) % SUBNETS
            if subnet in used:
                continue
            lock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                lock.bind(SUBNET_LOCK_NAME.format(n=subnet))
            except OSError:  # EADDRINUSE: another network holds it
                lock.close()
                continue
            self.subnet, self._subnet_lock = subnet, lock
            return
        raise ConfigError(
            f"no free subnet 10.231.<n>.0/24 for the verify network ({SUBNETS} tried)"
        )

    def isolate(self, index: int) -> None:
        _ip("link", "set", self.host_link(index), "down")

    def heal(self, index: int) -> None:
        _ip("link", "set", self.host_link(index), "up")

    def peer_ip(self, peer: str) -> str:
        """``"zookeeper"``, ``"clients"`` or ``"bookie-<j>"`` -> its address."""
        if peer == "zookeeper":
            return self.zookeeper_ip
        if peer == "clients":
            return self.bridge_ip
        name, _, index = peer.partition("-")
        if name == "bookie" and index.isdigit() and int(index) < self.bookies:
            return self.host_ip(int(index))
        raise ConfigError(f"no peer {peer!r} (zookeeper, clients, bookie-0..{self.bookies - 1})")

    def cut(self, index: int, peer: str) -> None:
        """Drop what host ``index`` sends to ``peer`` (module doc) until :meth:`uncut`."""
        _ip("-n", self.namespace(index), "route", "add", "blackhole", f"{self.peer_ip(peer)}/32")

    def uncut(self, index: int, peer: str) -> None:
        _ip("-n", self.namespace(index), "route", "del", "blackhole", f"{self.peer_ip(peer)}/32")

    def teardown(self) -> None:
        """Remove what :meth:`setup` made (each step tried; the first failure raised)."""
        failed: ConfigError | None = None
        for kind, name in reversed(self._made):
            try:
                if kind == "ns":
                    _ip("netns", "del", name)
                else:
                    _ip("link", "del", name)
            except ConfigError as exc:
                # a veth goes with its namespace; a setup stopped short did not make them all
                if not any(gone in str(exc) for gone in _ALREADY_GONE):
                    failed = failed or exc
        self._made.clear()
        if self._subnet_lock is not None:
            self._subnet_lock.close()  # frees the subnet for other networks
            self._subnet_lock = None
        if failed is not None:
            raise failed


class NetnsSandbox(Sandbox):
    """A :class:`~bkeeper.testing.sandbox.Sandbox` whose bookies run in ``network``'s
    namespaces and whose ZooKeeper listens on its bridge (ZooKeeper's address)."""

    def __init__(self, config: SandboxConfig, network: Network) -> None:
        super().__init__(config)
        self.network = network
        self.zookeeper = ZooKeeperServer(
            ZooKeeperConfig(
                data_dir=config.data_dir / "zookeeper",
                port=config.zookeeper_port,
                host=network.zookeeper_ip,
                zookeeper_home=config.zookeeper_home,
            )
        )

    def bookie_address(self, index: int) -> tuple[str, int]:
        return self.network.host_ip(index), self.config.bookie_port_base + index

    def bookie_command(self, index: int) -> list[str]:
        namespace = self.network.namespace(index)
        return ["ip", "netns", "exec", namespace, *super().bookie_command(index)]

    def ports_in_use(self) -> list[tuple[str, int]]:
        return []  # bookies listen in namespaces of their own; ZooKeeper checks its port
