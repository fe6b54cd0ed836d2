"""A ZooKeeper ensemble on loopback addresses (127.0.0.1, .2, .3: no namespaces, no root):
it elects a leader, serves data written through one server from the others, elects another
leader when the leader is killed, and takes the killed server back; a configuration that
cannot make an ensemble is refused saying why."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from bkeeper.common.errors import ConfigError
from bkeeper.testing.zookeeper_ensemble import (
    EnsembleServer,
    ZooKeeperEnsemble,
    ZooKeeperEnsembleConfig,
    loopback_servers,
)

#: How long the two servers left may take to elect a new leader.
ELECTION_S = 20.0
#: How long a kazoo client may take to (re)connect.
CONNECT_S = 15.0


def _kazoo(hosts: str) -> KazooClient:
    client = KazooClient(hosts=hosts, timeout=5.0)
    client.start(timeout=CONNECT_S)
    return client


def test_a_new_leader_serves_the_data_once_the_leader_is_killed(
    tmp_path: Path, zookeeper_home: Path | None
) -> None:
    config = ZooKeeperEnsembleConfig(
        tmp_path, loopback_servers(), tick_time_ms=500, zookeeper_home=zookeeper_home
    )
    with ZooKeeperEnsemble(config) as ensemble:
        assert [s.host for s in ensemble.servers] == ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
        assert ensemble.uri("/x") == f"zk://{ensemble.connect_string}/x"
        leader = ensemble.leader()
        assert leader is not None
        modes = sorted(str(ensemble.mode(k)) for k in range(3))
        assert modes == ["follower", "follower", "leader"]
        client = _kazoo(ensemble.connect_string)
        try:
            client.create("/written", b"before the leader died")
        finally:
            client.stop()
            client.close()
        for k in range(3):
            assert (ensemble.server_dir(k) / "data" / "myid").read_text() == f"{k + 1}\n"

        ensemble.kill_server(leader)
        assert ensemble.pid(leader) is None and ensemble.mode(leader) is None
        others = [k for k in range(3) if k != leader]
        ensemble.wait_serving(others, "a new leader", timeout_s=ELECTION_S)
        assert ensemble.leader() in others
        for k in others:  # each of the two left, alone
            server = ensemble.servers[k]
            client = _kazoo(f"{server.host}:{server.client_port}")
            try:
                assert client.get("/written")[0] == b"before the leader died"
                client.create(f"/after-{k}", b"written with the leader dead")
            finally:
                client.stop()
                client.close()

        ensemble.start_server(leader)
        assert ensemble.mode(leader) == "follower"
        server = ensemble.servers[leader]
        client = _kazoo(f"{server.host}:{server.client_port}")
        try:
            client.sync("/")
            assert client.get("/written")[0] == b"before the leader died"
            for k in others:
                assert client.get(f"/after-{k}")[0] == b"written with the leader dead"
        finally:
            client.stop()
            client.close()
    assert ensemble.running() == []


def test_two_servers_on_one_port_are_refused_naming_both() -> None:
    first, second, third = loopback_servers()
    clash = EnsembleServer("127.0.0.1", first.client_port, 2888, 3888)
    with pytest.raises(
        ConfigError,
        match=rf"server 0's client port and server 1's client port are both "
        rf"127\.0\.0\.1:{first.client_port}",
    ):
        ZooKeeperEnsembleConfig(Path("/nonexistent"), (first, clash, third))
    same = EnsembleServer("127.0.0.9", 2181, 2888, 2888)
    with pytest.raises(ConfigError, match=r"server 2's quorum port and server 2's election"):
        ZooKeeperEnsembleConfig(Path("/nonexistent"), (first, second, same))


def test_an_even_or_too_small_ensemble_is_refused_saying_why() -> None:
    four = loopback_servers(4)
    with pytest.raises(
        ConfigError, match=r"of 4 servers tolerates no more failures than one of 3 \(1\)"
    ):
        ZooKeeperEnsembleConfig(Path("/nonexistent"), four)
    assert len(ZooKeeperEnsembleConfig(Path("/x"), four, allow_even_size=True).servers) == 4
    with pytest.raises(ConfigError, match=r"at least 3 servers, not 1 \(one server: "):
        ZooKeeperEnsembleConfig(Path("/nonexistent"), four[:1])


def test_a_port_in_use_is_named_and_nothing_is_left_running(
    tmp_path: Path, zookeeper_home: Path | None
) -> None:
    """The start fails naming the server and the port another process holds, and stops the
    servers it started before that one."""
    servers = loopback_servers()
    with socket.socket() as taken:
        taken.bind((servers[1].host, servers[1].election_port))
        taken.listen(1)
        config = ZooKeeperEnsembleConfig(tmp_path, servers, zookeeper_home=zookeeper_home)
        ensemble = ZooKeeperEnsemble(config)
        with pytest.raises(
            ConfigError,
            match=rf"server 1's election port 127\.0\.0\.2:{servers[1].election_port} is in use",
        ):
            ensemble.start()
        assert ensemble.running() == []


def test_a_server_that_exits_at_start_is_named_with_its_log(
    tmp_path: Path, zookeeper_home: Path | None
) -> None:
    config = ZooKeeperEnsembleConfig(
        tmp_path, loopback_servers(), zookeeper_home=zookeeper_home, java="false"
    )
    ensemble = ZooKeeperEnsemble(config)
    log = re.escape(str(tmp_path / "server-0" / "zookeeper.log"))
    with pytest.raises(
        ConfigError,
        match=rf"ZooKeeper server 0 exited while waiting for the ensemble to elect a leader; "
        rf"see {log}",
    ):
        ensemble.start()
    assert ensemble.running() == []
