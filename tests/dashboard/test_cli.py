"""``bkeeper dashboard`` as a user runs it: ready line, clean stop, one error line."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator

import pytest

from bkeeper.meta.cluster import ClusterMetadata
from bkeeper.testing.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.integration

READY = "dashboard ready on "


def dashboard(uri: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "bkeeper", "dashboard", "--metadata", uri, *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture
def cluster_uri(zookeeper: ZooKeeperServer) -> str:
    uri = zookeeper.uri(f"/{uuid.uuid4().hex[:12]}/ledgers")

    async def make() -> None:
        async with await ClusterMetadata.open(uri) as cluster:
            await cluster.format()

    asyncio.run(make())
    return uri


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_it_says_where_it_serves_and_stops_cleanly_on_sigterm(cluster_uri: str) -> None:
    proc = dashboard(cluster_uri, "--port", "0")
    assert proc.stderr is not None
    line = proc.stderr.readline()
    try:
        assert line.startswith(READY), line + proc.stderr.read()
        url = line.removeprefix(READY).strip()
        with urllib.request.urlopen(url, timeout=10) as page:
            assert b"<title>bkeeper dashboard</title>" in page.read()
        with urllib.request.urlopen(url + "static/plotly.min.js", timeout=10) as script:
            assert script.headers["Content-Type"] == "application/javascript"
            assert script.read(64).startswith(b"/**")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    assert proc.stderr.read() == ""


def test_a_uri_without_a_cluster_is_one_error_line(zookeeper: ZooKeeperServer) -> None:
    proc = dashboard(zookeeper.uri("/nothing-here/ledgers"), "--port", "0")
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: no cluster at "), err


def test_a_taken_port_is_one_error_line_naming_it(cluster_uri: str, taken_port: int) -> None:
    proc = dashboard(cluster_uri, "--port", str(taken_port))
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(
        f"error: dashboard: cannot listen on 127.0.0.1:{taken_port} (--port): "
    ), err
