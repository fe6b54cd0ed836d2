"""A real bookie's memory does not grow with entry ids: 30 v2 ADDs of
70-byte entries with entry id 2^20 on new ledgers used to cost 8 MiB each, and again after
every restart (the persisted index was loaded the same way)."""

from __future__ import annotations

import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bkeeper.testing.bookie_process import wait_ready
from bkeeper.wire import v2
from bkeeper.wire.codes import StatusCode
from bkeeper.wire.digest import master_key
from bkeeper.wire.messages import AddResponse, ReadRequest, ReadResponse

#: Its tests start processes (tests/tiers.py).
pytestmark = pytest.mark.usefixtures("subprocesses")

KEY = master_key(b"rss")
FRAMES = 30
HUGE_ENTRY_ID = 1 << 20
#: What 30 tiny entries may add to the resident set, whatever their ids (the bug: +248 MB).
RSS_GROWTH_MAX_BYTES = 8 * 1024 * 1024
_LENGTH = struct.Struct(">i")


def _spawn(data_dir: Path, port: int = 0) -> tuple[subprocess.Popen[bytes], int]:
    """A bookie (on a port of its own choosing unless restarted on its ``port``)."""
    command = [
        sys.executable, "-m", "bkeeper", "bookie", "--data-dir", str(data_dir),
        "--port", str(port), "--checkpoint-interval-ms", "50",
    ]  # fmt: skip
    log_path = data_dir.parent / f"{data_dir.name}.log"
    offset = log_path.stat().st_size if log_path.exists() else 0
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    return proc, wait_ready(proc, log_path, offset)


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for process {pid}")


def _body(ledger_id: int, entry_id: int) -> bytes:
    payload = b"x" * 38
    return struct.pack(">qqqq", ledger_id, entry_id, -1, len(payload)) + payload  # 70 bytes


def _exchange(port: int, frames: list[bytes]) -> list[object]:
    """Send v2 request frames on one connection; the decoded responses, in order."""
    responses: list[object] = []
    with socket.create_connection(("127.0.0.1", port), 10) as sock:
        sock.sendall(b"".join(frames))
        buffer = b""
        while len(responses) < len(frames):
            chunk = sock.recv(65536)
            assert chunk, "the bookie closed the connection"
            buffer += chunk
            while len(buffer) >= 4 and len(buffer) >= 4 + _LENGTH.unpack_from(buffer)[0]:
                size = _LENGTH.unpack_from(buffer)[0]
                responses.append(v2.decode_response(buffer[4 : 4 + size]))
                buffer = buffer[4 + size :]
    return responses


def _add(port: int, ledgers: range, entry_id: int) -> None:
    frames = [
        v2.add_request_frame(KEY, (_body(ledger, entry_id),), len(_body(ledger, entry_id)))
        for ledger in ledgers
    ]
    for response in _exchange(port, frames):
        assert isinstance(response, AddResponse) and response.status is StatusCode.EOK


def _read(port: int, ledgers: range, entry_id: int) -> None:
    frames = [v2.encode_request_frame(ReadRequest(ledger, entry_id)) for ledger in ledgers]
    for ledger, response in zip(ledgers, _exchange(port, frames), strict=True):
        assert isinstance(response, ReadResponse) and response.status is StatusCode.EOK
        assert bytes(response.body or b"") == _body(ledger, entry_id)


def _wait_checkpoints(data_dir: Path, count: int) -> None:
    """Wait until the checkpoint file was replaced ``count`` times from now: the last of
    them started after every add made so far, so its flush indexed them."""
    path = data_dir / "current" / "ledgers" / "checkpoint"
    inode = path.stat().st_ino
    deadline = time.monotonic() + 30
    while count:
        assert time.monotonic() < deadline, "the bookie stopped checkpointing"
        time.sleep(0.01)
        current = path.stat().st_ino
        if current != inode:
            inode, count = current, count - 1


def test_huge_entry_ids_do_not_grow_a_real_bookie(tmp_path: Path) -> None:
    proc, port = _spawn(tmp_path)
    try:
        _add(port, range(1000, 1001), 0)  # warm up connection, journal, flush and index paths
        _read(port, range(1000, 1001), 0)
        _wait_checkpoints(tmp_path, 2)
        baseline = _rss_bytes(proc.pid)
        _add(port, range(1, FRAMES + 1), HUGE_ENTRY_ID)
        _wait_checkpoints(tmp_path, 2)
        grown = _rss_bytes(proc.pid) - baseline
        assert grown < RSS_GROWTH_MAX_BYTES, f"RSS grew {grown} bytes"
        _read(port, range(1, FRAMES + 1), HUGE_ENTRY_ID)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    proc, _ = _spawn(tmp_path, port)  # the index is loaded from its file
    try:
        _read(port, range(1, FRAMES + 1), HUGE_ENTRY_ID)
        _read(port, range(1000, 1001), 0)
        grown = _rss_bytes(proc.pid) - baseline
        assert grown < RSS_GROWTH_MAX_BYTES, f"RSS after a restart is {grown} bytes above"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
