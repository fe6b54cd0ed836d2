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
The bridge and namespaces themselves are :class:`bkeeper.testing.netns.BridgeNetwork`'s (the
multi-host test cluster uses them too); this module names verify's hosts and peers.
"""

from __future__ import annotations

from bkeeper.common.errors import ConfigError
from bkeeper.testing.netns import (
    CAP_NET_ADMIN,
    CAP_SYS_ADMIN,
    BridgeNetwork,
    SubnetFamily,
    effective_capabilities,
    run_ip,
)
from bkeeper.testing.sandbox import Sandbox, SandboxConfig
from bkeeper.testing.zookeeper import ZooKeeperConfig, ZooKeeperServer

__all__ = ["NetnsSandbox", "Network", "effective_capabilities", "privileges_missing"]

#: A network holds its subnet by binding an abstract Unix socket of this name (``{n}``: the
#: subnet) while it exists, so that two ``bkeeper verify`` processes on one machine never
#: take the same one (two bridges with one subnet leave ZooKeeper unreachable from both);
#: the kernel frees the name when the process ends, and no file is left behind.
SUBNET_LOCK_NAME = "\0bkeeper-verify-subnet-{n}"


#: Nemeses that mount a tmpfs per bookie (``CAP_SYS_ADMIN``).
MOUNTING = frozenset({"disk-full"})


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


#: Where verify's networks take their subnets: ``10.231.<n>.0/24``, interfaces ``bkv...``.
VERIFY_SUBNETS = SubnetFamily(octet=231, prefix="bkv", lock_name=SUBNET_LOCK_NAME)


def _ip(*args: str) -> None:
    run_ip(*args)


class Network(BridgeNetwork):
    """A bridge and one namespace per bookie and per kv member (module doc)."""

    def __init__(self, bookies: int, tag: str | None = None, members: int = 0) -> None:
        super().__init__(bookies + members, VERIFY_SUBNETS, tag, bridge_addresses=2)
        self.bookies = bookies
        self.members = members

    def ip(self, *args: str) -> None:
        _ip(*args)  # this module's name, looked up at each call (a test stands in for it)

    @property
    def zookeeper_ip(self) -> str:
        return self.bridge_address(1)

    def member_host(self, member: int) -> int:
        """The host index of kv member ``member`` (its namespace, its address)."""
        if not 0 <= member < self.members:
            raise ConfigError(f"no kv member {member} in the network ({self.members} members)")
        return self.bookies + member

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
        self.cut_address(index, self.peer_ip(peer))

    def uncut(self, index: int, peer: str) -> None:
        self.uncut_address(index, self.peer_ip(peer))


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
