"""Network namespaces for ``bkeeper verify`` (root only): a bookie's namespace cut from one
peer (ZooKeeper's address, the clients') reaches the others, and again that peer once the cut
heals."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from bkeeper.common.errors import ConfigError
from bkeeper.verify.netns import Network

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root"),
    pytest.mark.usefixtures("subprocesses"),
]

PROBE = """
import socket, sys
s = socket.socket()
s.settimeout(1.0)
try:
    s.connect((sys.argv[1], int(sys.argv[2])))
    print("connected")
except OSError as exc:
    print(type(exc).__name__)
"""


@pytest.fixture
def network() -> Iterator[Network]:
    net = Network(2, tag=str(90_000 + os.getpid() % 9_000))
    net.setup()
    try:
        yield net
    finally:
        net.teardown()


def reach(net: Network, index: int, host: str, port: int) -> str:
    result = subprocess.run(
        ["ip", "netns", "exec", net.namespace(index), sys.executable, "-c", PROBE, host, str(port)],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return result.stdout.strip()


def listener(host: str) -> socket.socket:
    sock = socket.socket()
    sock.bind((host, 0))
    sock.listen(8)
    return sock


def test_a_cut_drops_one_peer_only_until_it_heals(network: Network) -> None:
    zk = listener(network.zookeeper_ip)
    clients = listener(network.bridge_ip)
    try:
        zk_port, clients_port = zk.getsockname()[1], clients.getsockname()[1]
        assert reach(network, 0, network.zookeeper_ip, zk_port) == "connected"
        network.cut(0, "zookeeper")
        assert reach(network, 0, network.zookeeper_ip, zk_port) != "connected"
        assert reach(network, 0, network.bridge_ip, clients_port) == "connected"
        assert reach(network, 1, network.zookeeper_ip, zk_port) == "connected"
        network.uncut(0, "zookeeper")
        assert reach(network, 0, network.zookeeper_ip, zk_port) == "connected"
        network.cut(1, "clients")
        assert reach(network, 1, network.bridge_ip, clients_port) != "connected"
        assert reach(network, 1, network.zookeeper_ip, zk_port) == "connected"
        network.uncut(1, "clients")
        assert reach(network, 1, network.bridge_ip, clients_port) == "connected"
    finally:
        zk.close()
        clients.close()


def test_kv_members_get_namespaces_after_the_bookies() -> None:
    """The kv workload's members, in namespaces of their own for the leader's partitions:
    member 0 of a network of one bookie is host 1, reaches ZooKeeper's address until cut."""
    net = Network(1, tag=str(70_000 + os.getpid() % 9_000), members=1)
    net.setup()
    zk = listener(net.zookeeper_ip)
    try:
        host = net.member_host(0)
        assert (host, net.host_ip(host)) == (1, f"10.231.{net.subnet}.11")
        port = zk.getsockname()[1]
        assert reach(net, host, net.zookeeper_ip, port) == "connected"
        net.cut(host, "zookeeper")
        assert reach(net, host, net.zookeeper_ip, port) != "connected"
        assert reach(net, 0, net.zookeeper_ip, port) == "connected"
        with pytest.raises(ConfigError, match=r"no kv member 1 in the network \(1 members\)"):
            net.member_host(1)
    finally:
        zk.close()
        net.teardown()


def test_an_unknown_peer_is_named(network: Network) -> None:
    with pytest.raises(
        ConfigError, match=r"no peer 'bookie-7' \(zookeeper, clients, bookie-0..1\)"
    ):
        network.cut(0, "bookie-7")


def test_two_networks_that_would_share_a_subnet_take_two() -> None:
    """Two verify processes whose ids pointed at one subnet made two bridges with the same
    addresses, and neither run reached its ZooKeeper (seen in a campaign of two processes):
    a network takes a subnet no interface uses and no other network holds."""
    base = 90_000 + os.getpid() % 9_000
    first, second = Network(1, tag=str(base)), Network(1, tag=str(base + 240))
    assert first.subnet == second.subnet  # as their tags have it
    first.setup()
    try:
        second.setup()
        try:
            assert first.subnet != second.subnet
            assert first.zookeeper_ip != second.zookeeper_ip
        finally:
            second.teardown()
    finally:
        first.teardown()


def _leftovers(tag: str) -> list[str]:
    namespaces = subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True, check=True
    ).stdout
    links = subprocess.run(
        ["ip", "-o", "link", "show"], capture_output=True, text=True, check=True
    ).stdout
    return [line for line in (namespaces + links).splitlines() if f"bkv{tag}" in line]


@pytest.mark.parametrize("stop_after", [1, 5, 6, 7, 12, 13, 14])
def test_a_setup_stopped_in_the_middle_leaves_nothing(
    stop_after: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A campaign stopped (SIGTERM, Ctrl-C) while its network is made removes what was made
    so far, even a namespace or link made just before the stop landed (step 5: the first
    namespace, 6: its veth pair, 12 and 13: the second's; CI saw the namespaces of stopped
    runs left behind)."""
    from bkeeper.verify import netns

    real, calls = netns._ip, [0]

    def ip(*args: str) -> None:
        real(*args)
        calls[0] += 1
        if calls[0] == stop_after:
            raise KeyboardInterrupt("signal 15")

    monkeypatch.setattr(netns, "_ip", ip)
    tag = str(80_000 + os.getpid() % 9_000)
    with pytest.raises(KeyboardInterrupt):
        Network(2, tag=tag).setup()
    assert _leftovers(tag) == []
