"""A bookie process started with slowable fsyncs (``bkeeper verify``'s ``slow-disk``): an add
is answered only after the delayed fsync, and a bookie without the switch ignores the
control file."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bkeeper.client.bookie_client import BookieClient
from bkeeper.storage.slow_sync import ENV_VAR, set_sync_delay
from bkeeper.testing.bookie_process import wait_ready
from bkeeper.wire.codes import Protocol, StatusCode
from bkeeper.wire.digest import DigestManager, DigestType, master_key
from bkeeper.wire.messages import AddRequest

#: Its tests start processes (tests/tiers.py).
pytestmark = pytest.mark.usefixtures("subprocesses")

KEY = master_key(b"slow")
MANAGER = DigestManager(5, DigestType.CRC32, b"slow")
DELAY_MS = 400


def spawn(tmp_path: Path, slowable: bool) -> tuple[subprocess.Popen[bytes], int]:
    log_path = tmp_path / "bookie.log"
    env = {k: v for k, v in os.environ.items() if k != ENV_VAR}
    if slowable:
        env[ENV_VAR] = "1"
    command = [sys.executable, "-m", "bkeeper", "bookie", "--data-dir", str(tmp_path / "data"),
               "--port", "0"]  # fmt: skip
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    return proc, wait_ready(proc, log_path, 0)


async def timed_add(port: int, entry: int) -> float:
    client = await BookieClient.connect("127.0.0.1", port, Protocol.V2)
    try:
        body = MANAGER.encode_entry(entry, entry - 1, 0, b"x" * 100)
        started = time.monotonic()
        response = await client.send(AddRequest(5, entry, KEY, body))
        took = time.monotonic() - started
        assert response.status is StatusCode.EOK
        return took
    finally:
        await client.aclose()


@pytest.mark.parametrize("slowable", [True, False])
async def test_an_add_waits_for_the_delayed_fsync_only_when_switched_on(
    tmp_path: Path, slowable: bool
) -> None:
    proc, port = spawn(tmp_path, slowable)
    try:
        await timed_add(port, 0)  # connections and files warm
        set_sync_delay(tmp_path / "data", DELAY_MS)
        took = await timed_add(port, 1)
        if slowable:
            assert took >= DELAY_MS / 1000
            assert b"each fsync delayed by 400 ms" in (tmp_path / "bookie.log").read_bytes()
        else:
            assert b"fault injection" not in (tmp_path / "bookie.log").read_bytes()
        set_sync_delay(tmp_path / "data", None)
        await timed_add(port, 2)
    finally:
        proc.terminate()
        assert proc.wait(30) == 0
