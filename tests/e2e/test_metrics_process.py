"""``/metrics`` of a real ``bkeeper bookie`` process: Prometheus text, exact counts after adds
and reads; ``--no-metrics`` serves no ``/metrics`` (404)."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from bkeeper.client.bookie_client import BookieClient
from bkeeper.testing.bookie_process import wait_ready
from bkeeper.wire.batch_frames import batch_bodies
from bkeeper.wire.codes import Protocol, StatusCode
from bkeeper.wire.messages import AddRequest, BatchReadRequest, ReadRequest
from tests.common.test_metrics import samples
from tests.server.test_bookie import KEY, body

#: Its tests start processes (tests/tiers.py).
pytestmark = pytest.mark.usefixtures("subprocesses")

ADMIN_URL = re.compile(r"\(admin (http://[^)\s]+)\)")


def spawn(tmp_path: Path, *args: str) -> Iterator[tuple[int, str]]:
    log_path = tmp_path / "bookie.log"
    command = [sys.executable, "-m", "bkeeper", "bookie", "--data-dir", str(tmp_path / "data")]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [*command, "--port", "0", "--http-port", "0", *args],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        port = wait_ready(proc, log_path, 0)
        found = ADMIN_URL.search(log_path.read_text())
        assert found, log_path.read_text()
        yield port, found.group(1)
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def bookie(tmp_path: Path) -> Iterator[tuple[int, str]]:
    yield from spawn(tmp_path)


@pytest.fixture
def bookie_without_metrics(tmp_path: Path) -> Iterator[tuple[int, str]]:
    yield from spawn(tmp_path, "--no-metrics")


def get(url: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.headers["Content-Type"], response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read()


def op(name: str, op_name: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return (name, (("op", op_name),))


async def test_metrics_count_adds_and_reads_exactly(bookie: tuple[int, str]) -> None:
    port, admin = bookie
    v2 = await BookieClient.connect("127.0.0.1", port, Protocol.V2)
    v3 = await BookieClient.connect("127.0.0.1", port, Protocol.V3)
    try:
        bodies = [body(1, e) for e in range(100)] + [body(2, e) for e in range(40)]
        replies = await asyncio.gather(
            *[v2.send(AddRequest(1, e, KEY, body(1, e))) for e in range(100)],
            *[v3.send(AddRequest(2, e, KEY, body(2, e))) for e in range(40)],
        )
        assert {r.status for r in replies} == {StatusCode.EOK}
        for entry in range(5):
            assert (await v3.request(ReadRequest(2, entry))).status is StatusCode.EOK
        assert (await v3.request(ReadRequest(2, 99))).status is StatusCode.ENOENTRY
        batch = await v2.request(BatchReadRequest(1, 10, 20, 1 << 20, request_id=3))
        assert len(batch_bodies(batch)) == 20
        status, content_type, text = await asyncio.to_thread(get, admin + "/metrics")
    finally:
        await v2.aclose()
        await v3.aclose()
    assert status == 200
    assert content_type == "text/plain; version=0.0.4; charset=utf-8"
    got = samples(text)  # the Prometheus text-format parser
    assert got[op("bkeeper_bookie_requests_total", "add")] == 140
    assert got[op("bkeeper_bookie_request_errors_total", "add")] == 0
    assert got[op("bkeeper_bookie_request_latency_seconds_count", "add")] == 140
    assert got[op("bkeeper_bookie_requests_total", "read")] == 6
    assert got[op("bkeeper_bookie_request_errors_total", "read")] == 1
    assert got[op("bkeeper_bookie_requests_total", "batch_read")] == 1
    read = sum(len(body(2, e)) for e in range(5)) + sum(len(body(1, e)) for e in range(10, 30))
    assert got[("bkeeper_bookie_read_bytes_total", ())] == read
    assert got[("bkeeper_bookie_added_bytes_total", ())] == sum(len(b) for b in bodies)
    assert got[("bkeeper_journal_group_commit_entries_sum", ())] == 142  # + 2 master keys
    assert got[("bkeeper_bookie_connections", ())] == 2
    assert got[("bkeeper_bookie_read_only", ())] == 0
    assert got[("bkeeper_index_ledgers", ())] == 2


def test_no_metrics_is_404(bookie_without_metrics: tuple[int, str]) -> None:
    _port, admin = bookie_without_metrics
    status, _, text = get(admin + "/metrics")
    assert status == 404, text
    assert get(admin + "/heartbeat")[0] == 200
