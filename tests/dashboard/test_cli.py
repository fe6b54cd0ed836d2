"""``bkeeper dashboard`` as a user runs it: ready line, clean stop, one error line."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bkeeper.common.auth import make_token
from bkeeper.common.errors import ConfigError
from bkeeper.meta.cluster import ClusterMetadata
from bkeeper.testing.benchmarks import free_port
from bkeeper.testing.sandbox import SandboxConfig
from bkeeper.testing.zookeeper import ZooKeeperServer

#: Its tests start processes (tests/tiers.py).
pytestmark = pytest.mark.usefixtures("subprocesses")

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


def test_with_the_groups_token_file_it_asks_for_that_token(
    cluster_uri: str, tmp_path: Path
) -> None:
    token = make_token(b"t" * 48, "dashboard", 3600)
    token_file = tmp_path / "dashboard.token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    proc = subprocess.Popen(
        [sys.executable, "-m", "bkeeper", "--auth-token-file", str(token_file), "dashboard",
         "--metadata", cluster_uri, "--port", "0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    try:
        line = proc.stderr.readline()
        assert line.startswith(READY), line + proc.stderr.read()
        url = line.removeprefix(READY).strip()
        with urllib.request.urlopen(url, timeout=10) as page:
            assert b'<form id="login-form" method="post" action="/login">' in page.read()
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url + "api/overview", timeout=10)
        assert refused.value.code == 401
        request = urllib.request.Request(
            url + "api/overview", headers={"Authorization": f"Bearer {token}"}
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert json.load(answer)["cluster"]["metadata_uri"] == cluster_uri
        assert proc.stderr.readline() == "dashboard: log in with the token of --auth-token-file\n"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    assert token not in proc.stderr.read()


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


def test_the_sandbox_without_its_dashboard(tmp_path: Path, taken_port: int) -> None:
    """--no-dashboard: no dashboard started, and its port (taken here) is not asked for."""
    err_path = tmp_path / "sandbox.err"
    with err_path.open("w") as err:
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "bkeeper", "sandbox", "--bookies", "1",
                "--data-dir", str(tmp_path / "sb"), "--zookeeper-port", str(free_port()),
                "--bookie-port", str(free_port()), "--http-port", str(free_port()),
                "--no-dashboard", "--dashboard-port", str(taken_port),
            ],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("metadata URI: "), err_path.read_text()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    printed = err_path.read_text()
    assert "sandbox ready" in printed
    assert "dashboard" not in printed
    assert not (tmp_path / "sb" / "dashboard.log").exists()


def test_the_sandbox_dashboard_port_may_not_overlap_the_others(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^the sandbox's ports overlap: .*dashboard 8081$"):
        SandboxConfig(tmp_path, bookies=3, http_port_base=8080, dashboard_port=8081)
