"""`bkeeper bookie` as a real process: kill -9 mid-stream loses no acknowledged entry."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bkeeper.client.bookie_client import BookieClient
from bkeeper.common.errors import BookieUnavailableError
from bkeeper.testing.bookie_process import wait_ready
from bkeeper.wire.codes import Protocol, StatusCode
from bkeeper.wire.digest import DigestManager, DigestType, master_key
from bkeeper.wire.messages import AddRequest, ReadRequest

#: Its tests start processes (tests/tiers.py).
pytestmark = pytest.mark.usefixtures("subprocesses")

KEY = master_key(b"kill")
MANAGER = DigestManager(21, DigestType.CRC32, b"kill")


def spawn(data_dir: Path, port: int = 0) -> tuple[subprocess.Popen[bytes], int]:
    """A bookie (on a port of its own choosing unless restarted on its ``port``): the
    process and the port."""
    log_path = data_dir / "bookie.log"
    offset = log_path.stat().st_size if log_path.exists() else 0
    command = [sys.executable, "-m", "bkeeper", "bookie", "--data-dir", str(data_dir / "data")]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [*command, "--port", str(port)], stdout=log, stderr=subprocess.STDOUT
        )
    return proc, wait_ready(proc, log_path, offset)


def payload(entry: int) -> bytes:
    return (b"%08d" % entry) * 128  # 1 KiB


async def test_kill_9_mid_stream_keeps_every_acknowledged_entry(tmp_path: Path) -> None:
    proc, port = spawn(tmp_path)
    acknowledged: set[int] = set()
    try:
        client = await BookieClient.connect("127.0.0.1", port, Protocol.V2)
        in_flight: set[asyncio.Future] = set()
        killed = False
        for entry in range(10_000):
            body = MANAGER.encode_entry(entry, entry - 1, 0, payload(entry))
            try:
                fut = client.send(AddRequest(21, entry, KEY, body))
            except BookieUnavailableError:
                break
            fut.add_done_callback(
                lambda f, e=entry: (
                    acknowledged.add(e)
                    if not f.exception() and f.result().status is StatusCode.EOK
                    else None
                )
            )
            in_flight.add(fut)
            if len(in_flight) >= 500:
                _, in_flight = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
            if not killed and len(acknowledged) >= 4000:
                os.kill(proc.pid, signal.SIGKILL)
                killed = True
        await asyncio.gather(*in_flight, return_exceptions=True)
        await client.aclose()
        assert killed, "the bookie was never killed"
    finally:
        proc.kill()
        proc.wait()
    assert 4000 <= len(acknowledged) < 10_000
    proc, _ = spawn(tmp_path, port)  # the same bookie id: the same port
    try:
        client = await BookieClient.connect("127.0.0.1", port, Protocol.V3)
        responses = await asyncio.gather(
            *(client.send(ReadRequest(21, e)) for e in sorted(acknowledged))
        )
        for entry, response in zip(sorted(acknowledged), responses, strict=True):
            assert response.status is StatusCode.EOK, (entry, response.status)
            assert MANAGER.verify_entry(bytes(response.body), entry).payload == payload(entry)
        await client.aclose()
    finally:
        proc.terminate()
        assert proc.wait(30) == 0


def test_sigterm_exits_zero(tmp_path: Path) -> None:
    proc, _ = spawn(tmp_path)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
