"""A bridge and one Linux network namespace per host: a machine's worth of hosts, each with
an address of its own, for tests and tools that need more than loopback.

:class:`BridgeNetwork` makes a bridge in the host's namespace holding the subnet's first
address (``10.<octet>.<n>.1/24``, where connections from the host's namespace come from) and,
when asked, a few more after it (``.2``, ``.3``, ...); and, per host ``i``, a namespace
holding one end of a veth pair (``10.<octet>.<n>.<10+i>``) whose other end is enslaved to the
bridge. Everything reaches everything at layer 2, with no forwarding.

* :meth:`BridgeNetwork.isolate` takes host ``i``'s host-side link down: it can reach nothing
  and nothing reaches it until :meth:`BridgeNetwork.heal` brings the link up again;
* :meth:`BridgeNetwork.cut_address` adds a blackhole route in host ``i``'s namespace to one
  address: what the host sends there is dropped silently, so connections between the two
  stall and time out as over a broken link, while the host still talks to everyone else.

Which subnet: a :class:`SubnetFamily` names the second octet, the interface names' prefix and
the abstract-socket lock of each subnet. ``<n>`` is the first, from one derived from the tag
(the process id by default), that no interface of the host uses and no other network of this
machine holds (the lock: an abstract Unix socket bound while the network exists, which the
kernel frees when the process ends, leaving no file behind). Two families with different
octets never clash.

Needs root (``CAP_NET_ADMIN`` and ``CAP_SYS_ADMIN``) and ``ip`` with bridge and veth support:
:meth:`BridgeNetwork.setup` raises ``ConfigError`` saying what failed, after removing what it
made; :meth:`BridgeNetwork.teardown` removes everything it made, even after a setup stopped in
the middle (a SIGTERM, a Ctrl-C).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import socket
import subprocess
from dataclasses import dataclass

from bkeeper.common.errors import ConfigError

__all__ = [
    "CAP_NET_ADMIN",
    "CAP_SYS_ADMIN",
    "FIRST_HOST_OCTET",
    "FIRST_SUBNET",
    "SUBNETS",
    "BridgeNetwork",
    "SubnetFamily",
    "effective_capabilities",
    "namespaces_unavailable",
    "run_ip",
    "subnets_in_use",
]

log = logging.getLogger(__name__)

#: Subnets ``10.<octet>.<n>.0/24`` a network may take: ``n`` from :data:`FIRST_SUBNET` on.
SUBNETS = 240
FIRST_SUBNET = 10
#: Host ``i`` is at ``.<FIRST_HOST_OCTET + i>``: the bridge's addresses come before.
FIRST_HOST_OCTET = 10
#: Hosts one network holds at most (addresses up to ``.254``).
HOSTS_MAX = 254 - FIRST_HOST_OCTET
#: An interface name's length at most (Linux's ``IFNAMSIZ`` less the terminating NUL).
INTERFACE_NAME_CHARS_MAX = 15

#: Capability bits (``linux/capability.h``): namespaces and links, mounts.
CAP_NET_ADMIN = 12
CAP_SYS_ADMIN = 21

#: What ``ip`` says when asked to remove a link or a namespace that is not there.
_ALREADY_GONE = ("Cannot find device", "No such file or directory")


@dataclass(frozen=True)
class SubnetFamily:
    """Where one kind of network takes its subnet: ``10.<octet>.<n>.0/24``, interfaces named
    ``<prefix><tag>...``, and ``lock_name.format(n=n)`` the abstract socket held per subnet
    (it starts with a NUL: the abstract namespace)."""

    octet: int
    prefix: str
    lock_name: str

    def __post_init__(self) -> None:
        if not 0 < self.octet < 256:
            raise ConfigError(f"subnet family: octet {self.octet} is not in 1..255")
        if not self.prefix.isalpha() or len(self.prefix) > 4:
            raise ConfigError(f"subnet family: prefix {self.prefix!r} is not 1-4 letters")
        if not self.lock_name.startswith("\0") or "{n}" not in self.lock_name:
            raise ConfigError("subnet family: the lock name is abstract ('\\0...') with {n}")


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


def namespaces_unavailable() -> str | None:
    """Why this process cannot make a :class:`BridgeNetwork`, in one line (None: it can)."""
    capabilities = effective_capabilities()
    if not (capabilities >> CAP_NET_ADMIN & 1 and capabilities >> CAP_SYS_ADMIN & 1):
        return "network namespaces need root (CAP_NET_ADMIN and CAP_SYS_ADMIN)"
    if shutil.which("ip") is None:
        return "network namespaces need the `ip` command (iproute2)"
    return None


def run_ip(*args: str) -> None:
    """``ip ARGS``; ``ConfigError`` with what ``ip`` said when it fails."""
    result = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        reason = result.stderr.strip() or f"exit code {result.returncode}"
        raise ConfigError(f"ip {' '.join(args)}: {reason}")


def subnets_in_use(octet: int) -> set[int]:
    """The ``n`` of every ``10.<octet>.<n>.x`` address on the host's interfaces."""
    result = subprocess.run(
        ["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True, check=False
    )
    return {int(n) for n in re.findall(rf"inet 10\.{octet}\.(\d+)\.", result.stdout)}


class BridgeNetwork:
    """A bridge and ``hosts`` namespaces (module doc). ``bridge_addresses``: how many
    addresses the bridge holds (``.1`` the clients', then ``.2``...)."""

    def __init__(
        self,
        hosts: int,
        family: SubnetFamily,
        tag: str | None = None,
        bridge_addresses: int = 1,
    ) -> None:
        if not 0 <= hosts <= HOSTS_MAX:
            raise ConfigError(f"a network holds 0..{HOSTS_MAX} hosts, not {hosts}")
        if not 1 <= bridge_addresses < FIRST_HOST_OCTET:
            raise ConfigError(f"bridge_addresses: {bridge_addresses} is not in 1..9")
        self.hosts = hosts
        self.family = family
        tag = tag or str(os.getpid() % 100_000)
        if not tag.isdigit():
            raise ConfigError(f"network tag {tag!r} is not a number")
        self.tag = tag
        self.bridge_addresses = bridge_addresses
        self.subnet = FIRST_SUBNET + int(tag) % SUBNETS
        self.bridge = f"{family.prefix}{tag}b"
        longest = self.inner_link(max(hosts - 1, 0))
        if len(longest) > INTERFACE_NAME_CHARS_MAX:
            raise ConfigError(f"interface name {longest!r} is longer than 15 characters")
        self._made: list[tuple[str, str]] = []  # ("ns"|"link", name), in creation order
        self._subnet_lock: socket.socket | None = None  # bound to the subnet's lock name

    def address(self, last_octet: int) -> str:
        return f"10.{self.family.octet}.{self.subnet}.{last_octet}"

    @property
    def bridge_ip(self) -> str:
        """The bridge's first address: connections from the host's namespace come from it."""
        return self.address(1)

    def bridge_address(self, k: int) -> str:
        """The bridge's address ``k`` (0: :attr:`bridge_ip`)."""
        if not 0 <= k < self.bridge_addresses:
            raise ConfigError(f"the bridge has {self.bridge_addresses} addresses, not {k + 1}")
        return self.address(1 + k)

    def host_ip(self, index: int) -> str:
        return self.address(FIRST_HOST_OCTET + index)

    def namespace(self, index: int) -> str:
        return f"{self.family.prefix}{self.tag}n{index}"

    def host_link(self, index: int) -> str:
        """Host ``index``'s veth end in the host's namespace (on the bridge)."""
        return f"{self.family.prefix}{self.tag}h{index}"

    def inner_link(self, index: int) -> str:
        """Host ``index``'s veth end inside its namespace."""
        return f"{self.family.prefix}{self.tag}i{index}"

    def in_namespace(self, index: int) -> list[str]:
        """The command prefix that runs a command in host ``index``'s namespace."""
        return ["ip", "netns", "exec", self.namespace(index)]

    def ip(self, *args: str) -> None:
        """Every ``ip`` command of the network goes through here."""
        run_ip(*args)

    def setup(self) -> None:
        """Make the bridge and the namespaces (module doc); ``ConfigError`` saying what
        failed, with nothing left behind."""
        if shutil.which("ip") is None:
            raise ConfigError("network namespaces need the `ip` command (iproute2)")
        self._claim_subnet()
        # Each thing is noted before it is made: a stop (SIGTERM, Ctrl-C) may land between
        # the two, and teardown passes over what is not there.
        try:
            self._made.append(("link", self.bridge))
            self.ip("link", "add", self.bridge, "type", "bridge")
            for k in range(self.bridge_addresses):
                self.ip("addr", "add", f"{self.bridge_address(k)}/24", "dev", self.bridge)
            self.ip("link", "set", self.bridge, "up")
            for index in range(self.hosts):
                self._add_host(index)
        except BaseException:  # a failed step, or a stop in the middle: nothing left behind
            try:
                self.teardown()
            except ConfigError as exc:  # the error that stopped the setup is the one raised
                log.warning("network %s: not all of it removed: %s", self.bridge, exc)
            raise

    def _add_host(self, index: int) -> None:
        ns, host, inner = self.namespace(index), self.host_link(index), self.inner_link(index)
        self._made.append(("ns", ns))
        self.ip("netns", "add", ns)
        self._made.append(("link", host))
        self.ip("link", "add", host, "type", "veth", "peer", "name", inner)
        self.ip("link", "set", inner, "netns", ns)
        self.ip("link", "set", host, "master", self.bridge)
        self.ip("link", "set", host, "up")
        self.ip("-n", ns, "addr", "add", f"{self.host_ip(index)}/24", "dev", inner)
        self.ip("-n", ns, "link", "set", inner, "up")
        self.ip("-n", ns, "link", "set", "lo", "up")

    def _claim_subnet(self) -> None:
        """Take the first subnet from :attr:`subnet` on that no interface of the host uses
        and no other network holds (the family's lock)."""
        used = subnets_in_use(self.family.octet)
        for step in range(SUBNETS):
            subnet = FIRST_SUBNET + (self.subnet - FIRST_SUBNET + step) % SUBNETS
            if subnet in used:
                continue
            lock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                lock.bind(self.family.lock_name.format(n=subnet))
            except OSError:  # EADDRINUSE: another network holds it
                lock.close()
                continue
            self.subnet, self._subnet_lock = subnet, lock
            return
        raise ConfigError(
            f"no free subnet 10.{self.family.octet}.<n>.0/24 for the network ({SUBNETS} tried)"
        )

    def isolate(self, index: int) -> None:
        self.ip("link", "set", self.host_link(index), "down")

    def heal(self, index: int) -> None:
        self.ip("link", "set", self.host_link(index), "up")

    def cut_address(self, index: int, address: str) -> None:
        """Drop what host ``index`` sends to ``address`` (module doc) until
        :meth:`uncut_address`."""
        self.ip("-n", self.namespace(index), "route", "add", "blackhole", f"{address}/32")

    def uncut_address(self, index: int, address: str) -> None:
        self.ip("-n", self.namespace(index), "route", "del", "blackhole", f"{address}/32")

    def teardown(self) -> None:
        """Remove what :meth:`setup` made (each step tried; the first failure raised)."""
        failed: ConfigError | None = None
        for kind, name in reversed(self._made):
            try:
                if kind == "ns":
                    self.ip("netns", "del", name)
                else:
                    self.ip("link", "del", name)
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
