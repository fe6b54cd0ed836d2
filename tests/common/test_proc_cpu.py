"""CPU time of local server processes from /proc (``bkeeper bench write``'s server columns)."""

from __future__ import annotations

import os
import socket
import time

from bkeeper.testing.benchmarks.client import SERVER_CPU_COLUMN, add_server_cpu
from bkeeper.testing.benchmarks.proc_cpu import (
    ServerCpu,
    cpu_seconds,
    find_listeners,
    is_local_host,
    split_host_port,
)
from bkeeper.testing.benchmarks.results import BenchResult


def test_the_process_listening_on_a_port_is_found_and_its_cpu_read() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        assert find_listeners([port]) == {port: os.getpid()}
        meter = ServerCpu({"me": [port], "nobody": []})
        meter.start()
        end = time.process_time() + 0.05
        while time.process_time() < end:
            pass
        meter.stop()
    assert meter.pids == {"me": [os.getpid()], "nobody": []}
    assert meter.spent["me"] > 0.0
    assert meter.per_op_us("me", 1000) == meter.spent["me"] / 1000 * 1e6
    assert meter.per_op_us("nobody", 1000) is None
    assert cpu_seconds(os.getpid()) is not None


def test_a_port_nobody_listens_on_is_left_out_and_said_so() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        free = socket.socket()
        free.bind(("127.0.0.1", 0))
        free_port = free.getsockname()[1]
        free.close()
        meter = ServerCpu({"bookies": [port, free_port]})
        meter.start()
        meter.stop()
    assert meter.coverage["bookies"] == (1, 2)


def test_the_server_column_names_zookeepers_share_and_bookies_not_measured() -> None:
    meter = ServerCpu({"bookies": [1, 2], "ZooKeeper": [3]})
    meter.spent = {"bookies": 0.02, "ZooKeeper": 0.001}
    meter.coverage = {"bookies": (1, 2), "ZooKeeper": (1, 1)}
    result = BenchResult("writes", 1000, 1.0)
    add_server_cpu(result, meter)
    assert result.extra[SERVER_CPU_COLUMN] == "21.0 (ZK 1.0, 1/2 bookies)"
    alone = ServerCpu({"bookies": [1], "ZooKeeper": []})
    alone.spent, alone.coverage = {"bookies": 0.005}, {"bookies": (1, 1), "ZooKeeper": (0, 0)}
    add_server_cpu(result, alone)
    assert result.extra[SERVER_CPU_COLUMN] == "5.0 (bookies only)"
    add_server_cpu(result, ServerCpu({"bookies": [], "ZooKeeper": []}))
    assert result.extra[SERVER_CPU_COLUMN] == "-"


def test_addresses_are_split_and_local_hosts_told_apart() -> None:
    assert split_host_port("127.0.0.1:3181") == ("127.0.0.1", 3181)
    assert split_host_port("[::1]:2181") == ("::1", 2181)
    assert split_host_port("bookie-1") is None
    assert is_local_host("localhost") and is_local_host("127.0.0.2")
    assert not is_local_host("192.0.2.1")  # TEST-NET-1: no DNS asked
