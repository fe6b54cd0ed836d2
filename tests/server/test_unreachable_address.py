"""A bookie that registers an address clients on other machines cannot use (loopback, or a
wildcard) says so once at start, when ZooKeeper is reached at an address other machines can
use; with ZooKeeper on loopback (a sandbox, these tests) it says nothing."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from bkeeper.meta.cluster import ClusterMetadata
from bkeeper.server.registration import unreachable_address_warning
from bkeeper.testing.zookeeper import ZooKeeperConfig, ZooKeeperServer

REMOTE_ZK = "zk://10.1.2.3:2181,10.1.2.4:2181/ledgers"


@pytest.mark.parametrize(
    ("host", "shown"),
    [
        ("127.0.0.1", "127.0.0.1:3181"),
        ("127.1.2.3", "127.1.2.3:3181"),
        ("localhost", "localhost:3181"),
        ("::1", "[::1]:3181"),
        ("0.0.0.0", "0.0.0.0:3181"),
        ("::", "[::]:3181"),
    ],
)
def test_a_loopback_or_wildcard_address_is_named_with_the_option_to_set(host, shown):
    warning = unreachable_address_warning(host, 3181, REMOTE_ZK)
    assert warning is not None
    assert warning.startswith(f"this bookie registers {shown}, an address clients on other ")
    assert "ZooKeeper (10.1.2.3:2181,10.1.2.4:2181)" in warning
    assert "--host" in warning and "\n" not in warning


@pytest.mark.parametrize(
    ("host", "uri"),
    [
        ("10.0.0.7", REMOTE_ZK),  # a routable address
        ("bookie-1.example", REMOTE_ZK),  # a name: not looked up
        ("127.0.0.1", "zk://127.0.0.1:2181/ledgers"),  # a one-machine cluster (a sandbox)
        ("127.0.0.1", "zk://localhost:2181,[::1]:2182/ledgers"),
        ("127.0.0.1", "memory://tests"),  # in-process
        ("127.0.0.1", ""),  # no metadata service: nothing registered
    ],
)
def test_nothing_is_said_when_clients_can_reach_it_or_must_be_here(host, uri):
    assert unreachable_address_warning(host, 3181, uri) is None


def _routable_address() -> str:
    """An address of this machine other than loopback: the source address of its default
    route (a UDP socket's connect sends nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(("192.0.2.1", 9))  # TEST-NET-1: only the route is looked up
        except OSError as exc:
            pytest.skip(f"this machine has no route off loopback: {exc}")
        address: str = sock.getsockname()[0]
    if address.startswith("127.") or address == "0.0.0.0":
        pytest.skip("this machine has no address off loopback")
    return address


@pytest.fixture
def routable_zookeeper(tmp_path: Path, zookeeper_home: Path | None) -> Iterator[ZooKeeperServer]:
    """A ZooKeeper listening on this machine's routable address, its cluster formatted."""
    config = ZooKeeperConfig(
        data_dir=tmp_path / "zk",
        port=0,
        host=_routable_address(),
        tick_time_ms=500,
        zookeeper_home=zookeeper_home,
    )
    with ZooKeeperServer(config) as server:
        yield server


async def _format(uri: str) -> None:
    async with await ClusterMetadata.open(uri) as cluster:
        await cluster.format()


async def test_a_loopback_bookie_says_it_once_at_start(
    routable_zookeeper, zookeeper, start_bookie, tmp_path, caplog
):
    caplog.set_level(logging.WARNING, logger="bkeeper.server")
    shared = routable_zookeeper.uri("/shared/ledgers")
    await _format(shared)
    bookie = await start_bookie(tmp_path / "b1", host="127.0.0.1", metadata_uri=shared)
    await asyncio.sleep(0.2)  # registered meanwhile: still one line
    lines = [r.getMessage() for r in caplog.records if "clients on other machines" in r.message]
    assert lines == [
        f"this bookie registers 127.0.0.1:{bookie.port}, an address clients on other machines "
        f"cannot connect to, while ZooKeeper ({routable_zookeeper.connect_string}) is reached "
        "from elsewhere: Spark executors and other clients there will fail to reach it; start "
        "it with --host set to an address they can reach (docs/spark.md, Running on a cluster)"
    ]
    assert [r.levelname for r in caplog.records if r.getMessage() == lines[0]] == ["WARNING"]
    # The same bookie set-up with ZooKeeper on loopback: one machine, nothing to say.
    caplog.clear()
    local = zookeeper.uri("/one-machine/ledgers")
    await _format(local)
    await start_bookie(tmp_path / "b2", host="127.0.0.1", metadata_uri=local)
    assert not [r for r in caplog.records if "clients on other machines" in r.getMessage()]
