"""The multi-host harness itself: bookies register the addresses of their own namespaces
(10.232.x.y, never loopback) with their racks, a client in this process's namespace writes and
reads a ledger through every one of them, and a rack cut off is unreachable until healed."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import pytest

from bkeeper.client import BookKeeper
from bkeeper.common.errors import ConfigError
from bkeeper.meta.cluster import ClusterMetadata
from bkeeper.testing.multihost import MultiHostCluster, MultiHostConfig
from bkeeper.testing.netns import namespaces_unavailable
from tests.multihost.conftest import not_whole

PASSWORD = b"harness"
#: How long a connection attempt to a bookie may take before it counts as unreachable.
CONNECT_S = 0.5
#: How long a bookie of a healed rack may take to accept connections again.
HEAL_S = 10.0


def _connects(address: tuple[str, int], timeout_s: float = CONNECT_S) -> bool:
    try:
        with socket.create_connection(address, timeout=timeout_s):
            return True
    except OSError:  # refused, unreachable, or timed out (a link down drops the SYN)
        return False


def _wait_connects(address: tuple[str, int], within_s: float) -> None:
    deadline = time.monotonic() + within_s
    while not _connects(address):
        assert time.monotonic() < deadline, f"{address} unreachable {within_s:g} s after heal"


async def test_bookies_register_their_namespace_addresses_and_serve_a_host_client(
    multihost_cluster: MultiHostCluster,
) -> None:
    cluster = multihost_cluster
    subnet = f"10.232.{cluster.network.subnet}."
    assert cluster.metadata_uri.startswith(f"zk://{subnet}")
    assert len(cluster.zookeeper.servers) == 3
    assert len(set(cluster.racks.values())) == 3
    async with await ClusterMetadata.open(cluster.metadata_uri) as metadata:
        registered = await metadata.registry.bookies()
        assert registered.writable == frozenset(cluster.bookie_ids)
        for index, bookie_id in enumerate(cluster.bookie_ids):
            info = await metadata.registry.service_info(bookie_id)
            rpc = next(e for e in info.endpoints if e.protocol == "bookie-rpc")
            assert (rpc.host, rpc.port) == cluster.bookie_address(index)
            assert rpc.host.startswith(subnet) and not rpc.host.startswith("127.")
        locations = await metadata.racks.locations()
    assert locations == cluster.racks

    async with BookKeeper(cluster.metadata_uri) as client:
        every = len(cluster.bookie_ids)
        writer = await client.create_ledger(
            ensemble_size=every, write_quorum=2, ack_quorum=2, password=PASSWORD
        )
        assert sorted(writer.ensemble) == sorted(cluster.bookie_ids)
        ids = await writer.append_many([b"entry %d" % i for i in range(2 * every)])
        await writer.close()
        reader = await client.open_ledger(writer.ledger_id, password=PASSWORD)
        read = [entry.data async for entry in reader.read(0)]
    assert read == [b"entry %d" % i for i in ids]


async def test_a_rack_cut_off_is_unreachable_until_healed(
    multihost_cluster: MultiHostCluster,
) -> None:
    cluster = multihost_cluster
    rack = cluster.config.location(0)
    inside = cluster.rack_bookies(rack)
    outside = [i for i in range(cluster.config.bookies) if i not in inside]
    assert inside == [0, 3] and outside == [1, 2, 4, 5]
    cluster.cut_rack(rack)
    try:
        down = [line for line in not_whole(cluster) if line.endswith(" is down")]
        assert down == [f"link {cluster.network.host_link(cluster.bookie_host(i))} is down"
                        for i in inside]  # fmt: skip
        for index in inside:
            assert not _connects(cluster.bookie_address(index)), f"bookie {index} reachable"
        for index in outside:
            assert _connects(cluster.bookie_address(index)), f"bookie {index} unreachable"
    finally:
        cluster.heal_rack(rack)
    for index in inside:
        _wait_connects(cluster.bookie_address(index), HEAL_S)
    # Back for clients: a ledger on exactly that rack's bookies takes and returns entries.
    async with BookKeeper(cluster.metadata_uri) as client:
        bookies = [cluster.bookie_id(i) for i in inside]
        writer = await client.create_ledger(
            ensemble_size=2, write_quorum=2, ack_quorum=2, password=PASSWORD, bookies=bookies
        )
        await writer.append_many([b"after the heal"] * 10)
        await writer.close()
        reader = await client.open_ledger(writer.ledger_id, password=PASSWORD)
        assert [entry.data async for entry in reader.read(0)] == [b"after the heal"] * 10


def test_an_unknown_rack_is_named_with_the_racks_there_are(
    multihost_cluster: MultiHostCluster,
) -> None:
    with pytest.raises(
        ConfigError, match=r"no bookie in rack '/rack-9' \(racks: /rack-0, /rack-1, /rack-2\)"
    ):
        multihost_cluster.cut_rack("/rack-9")


def test_a_failed_start_leaves_no_namespace_or_process_behind(
    tmp_path: Path, subprocesses: None
) -> None:
    """A start that fails after the network was made (here: no ZooKeeper jars where they
    are said to be) removes every namespace and link it made, and says why it failed."""
    why = namespaces_unavailable()
    if why is not None:
        pytest.skip(f"a multi-host cluster cannot run here: {why}")
    config = MultiHostConfig(tmp_path / "cluster", bookies=2, racks=2, zookeeper_home=tmp_path)
    cluster = MultiHostCluster(config)
    with pytest.raises(ConfigError, match=r"ZooKeeper home .* has no lib/zookeeper-\*\.jar"):
        cluster.start()
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True)
    prefix = f"bkm{cluster.network.tag}"
    assert [line for line in (listed.stdout + links.stdout).splitlines() if prefix in line] == []
    assert cluster.zookeeper.running() == []
