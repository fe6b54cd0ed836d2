"""The ZooKeeper launcher waits until the server serves requests, not only until it says
``imok``: ZooKeeper answers ``ruok`` some 50 ms before its server runs, and a client that
connects in between is dropped (ZooKeeper 3.9 may fail the connection with a
NullPointerException); a CI run's test then had no session within 10 s."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from bkeeper.testing.zookeeper import ZooKeeperConfig, ZooKeeperServer

NOT_SERVING = b"This ZooKeeper instance is not currently serving requests\n"
SERVING = b"Zookeeper version: 3.9.5\nLatency min/avg/max: 0/0.0/0\nMode: standalone\n"


@pytest.fixture
def fake_server() -> Iterator[tuple[int, dict[bytes, bytes]]]:
    """A listener answering four-letter words from a table (changed by the test)."""
    answers: dict[bytes, bytes] = {}
    listener = socket.create_server(("127.0.0.1", 0))
    stopping = threading.Event()

    def serve() -> None:
        while not stopping.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                word = conn.recv(4)
                conn.sendall(answers.get(word, b""))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], answers
    finally:
        stopping.set()
        # close() does not wake a thread blocked in accept(): a connection does (it used to
        # wait out the join's 5 s bound on every run)
        socket.create_connection(listener.getsockname()).close()
        thread.join(5)
        listener.close()
        assert not thread.is_alive(), "the fake server's thread did not end"


def test_imok_is_not_ready_until_the_server_serves(fake_server, tmp_path: Path) -> None:
    port, answers = fake_server
    server = ZooKeeperServer(ZooKeeperConfig(data_dir=tmp_path, port=port))
    answers.update({b"ruok": b"imok", b"srvr": NOT_SERVING})
    assert not server.is_ready()
    answers[b"srvr"] = SERVING
    assert server.is_ready()


def test_nothing_listening_is_not_ready(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: connections are refused
        assert not ZooKeeperServer(ZooKeeperConfig(data_dir=tmp_path, port=port)).is_ready()
