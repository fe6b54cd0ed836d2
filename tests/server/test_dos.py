"""Cheap denial of service against a real bookie process: idle connections, absent or slow
first frames, partial frames, garbage floods and unknown v3 enum values."""

from __future__ import annotations

import asyncio
import contextlib
import re
import resource
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bkeeper.client.bookie_client import BookieClient
from bkeeper.testing.bookie_process import wait_ready
from bkeeper.testing.fuzz import process_rss_bytes, round_trip, unread_bytes
from bkeeper.testing.fuzz_frames import pb_bytes, pb_varint
from bkeeper.wire import v3
from bkeeper.wire.codes import Protocol, StatusCode
from bkeeper.wire.digest import DigestManager, DigestType, master_key
from bkeeper.wire.framing import FrameDecoder
from bkeeper.wire.messages import AddRequest, ErrorResponse, ReadRequest

#: Its tests start processes (tests/tiers.py).
pytestmark = pytest.mark.usefixtures("subprocesses")

MIB = 1024 * 1024
MAX_FRAME = 5 * MIB
#: Bound for conditions awaited below; reached only when the behaviour under test is absent.
WAIT_S = 30.0


@dataclass
class BookieProcess:
    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def rss(self) -> int:
        return process_rss_bytes(self.proc.pid)

    def connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port))


StartBookie = Callable[..., BookieProcess]


@pytest.fixture
def bookie_process(tmp_path: Path) -> Iterator[StartBookie]:
    """``bkeeper bookie`` processes with their output in a log file; stopped at the end."""
    started: list[BookieProcess] = []

    def start(*args: str) -> BookieProcess:
        index = len(started)
        log_path = tmp_path / f"bookie-{index}.log"
        cmd = [sys.executable, "-m", "bkeeper", "bookie", "--data-dir", str(tmp_path / str(index))]
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [*cmd, "--port", "0", *args], stdout=log, stderr=subprocess.STDOUT
            )
        bookie = BookieProcess(proc, 0, log_path)
        started.append(bookie)
        bookie.port = wait_ready(proc, log_path, 0)
        return bookie

    yield start
    for bookie in started:
        bookie.proc.terminate()
        try:
            bookie.proc.wait(30)
        except subprocess.TimeoutExpired:
            bookie.proc.kill()
            bookie.proc.wait()


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def closed_by_peer(sock: socket.socket, timeout_s: float = WAIT_S) -> bool:
    """Whether the peer closes ``sock`` (end of stream or reset) within ``timeout_s``."""
    sock.settimeout(timeout_s)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True
    return True


def still_open(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1) != b""
    except BlockingIOError:
        return True
    except ConnectionResetError:
        return False
    finally:
        sock.setblocking(True)


# -- connection limit -----------------------------------------------------------------------
async def test_1001_idle_connections_do_not_lock_a_client_out(bookie_process) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2048:
        if hard != resource.RLIM_INFINITY and hard < 2048:
            pytest.skip(f"needs 2048 file descriptors, the hard limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (2048, hard))
    bookie = bookie_process()  # the default limit, derived from the descriptor limit
    idle = [bookie.connect() for _ in range(1001)]
    try:
        await round_trip("127.0.0.1", bookie.port, Protocol.V2, ledger_id=7)
        await round_trip("127.0.0.1", bookie.port, Protocol.V3, ledger_id=8)
    finally:
        for sock in idle:
            sock.close()
    assert "refusing connection" not in bookie.log()


async def test_at_the_limit_the_longest_idle_connections_make_room(bookie_process) -> None:
    bookie = bookie_process("--connections-max", "50")
    idle = [bookie.connect() for _ in range(60)]
    try:
        # The round trip's connection comes 61st: the 11 connections idle longest go.
        await round_trip("127.0.0.1", bookie.port, Protocol.V2, ledger_id=9)
        assert [closed_by_peer(sock) for sock in idle[:11]] == [True] * 11
        assert [still_open(sock) for sock in idle[11:]] == [True] * 49
    finally:
        for sock in idle:
            sock.close()
    assert len(re.findall("connection limit 50 reached", bookie.log())) == 11


async def test_at_the_limit_busy_connections_stay_and_a_new_one_is_refused(
    bookie_process,
) -> None:
    bookie = bookie_process("--connections-max", "2")
    clients = [await BookieClient.connect("127.0.0.1", bookie.port) for _ in range(2)]
    try:
        body = DigestManager(11, DigestType.CRC32C, b"pw").encode_entry(0, -1, 0, b"")
        add = AddRequest(11, 0, master_key(b"pw"), body)
        assert (await clients[0].send(add)).status is StatusCode.EOK  # ledger 11, LAC -1
        polls = []
        for client in clients:
            polls.append(client.send(ReadRequest(11, 1, previous_lac=0, timeout_ms=60_000)))
            # Answered after the long poll was read: that poll is in flight from here on.
            assert (await client.send(ReadRequest(11, 0))).status is StatusCode.EOK
        extra = bookie.connect()
        assert closed_by_peer(extra)
        extra.close()
        assert [client.connected for client in clients] == [True, True]
        assert not any(poll.done() for poll in polls)
    finally:
        for client in clients:
            await client.aclose()
    assert "refusing connection from 127.0.0.1" in bookie.log()


# -- timeouts -------------------------------------------------------------------------------
def test_no_valid_first_frame_within_the_handshake_timeout_closes(bookie_process) -> None:
    bookie = bookie_process("--connection-handshake-timeout-ms", "300")
    silent = bookie.connect()
    trickling = bookie.connect()
    trickling.sendall(struct.pack(">i", 1000) + b"\x0a")  # a first frame that never completes
    deadline = time.monotonic() + WAIT_S
    while still_open(trickling) and time.monotonic() < deadline:
        trickling.sendall(b"\x00")  # bytes keep coming, the frame never ends
        time.sleep(0.05)
    assert closed_by_peer(trickling, 0.1)
    assert closed_by_peer(silent)
    wait_for(lambda: bookie.log().count("no valid first frame within 300 ms") == 2, "2 lines")


async def add_entry(port: int, ledger_id: int, entry_id: int, lac: int) -> None:
    """Add an entry of the round-trip ledgers (same password) with ``lac`` piggybacked."""
    manager = DigestManager(ledger_id, DigestType.CRC32C, b"round-trip")
    body = manager.encode_entry(entry_id, lac, 0, b"")
    client = await BookieClient.connect("127.0.0.1", port)
    try:
        request = AddRequest(ledger_id, entry_id, master_key(b"round-trip"), body)
        assert (await client.send(request)).status is StatusCode.EOK
    finally:
        await client.aclose()


async def test_idle_connection_closes_after_the_idle_timeout_but_not_a_long_poll(
    bookie_process,
) -> None:
    bookie = bookie_process("--connection-idle-timeout-ms", "300")
    await round_trip("127.0.0.1", bookie.port, Protocol.V3, ledger_id=12)  # LAC -1
    polling = await BookieClient.connect("127.0.0.1", bookie.port)
    idle = await BookieClient.connect("127.0.0.1", bookie.port)
    try:
        poll = polling.send(ReadRequest(12, 1, previous_lac=-1, timeout_ms=60_000))
        await polling.send(ReadRequest(12, 0))  # the long poll is in flight from here on
        await idle.send(ReadRequest(12, 0))
        deadline = time.monotonic() + WAIT_S
        while idle.connected and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert not idle.connected, "an idle connection is closed"
        assert polling.connected and not poll.done(), "a long poll keeps its connection"
        await add_entry(bookie.port, 12, 1, lac=0)  # LAC 0: the long poll returns
        response = await asyncio.wait_for(poll, WAIT_S)
        assert (response.status, response.max_lac) == (StatusCode.EOK, 0)
    finally:
        await polling.aclose()
        await idle.aclose()


# -- memory ---------------------------------------------------------------------------------
def test_partial_frames_stay_within_the_bookie_wide_budget(bookie_process) -> None:
    bookie = bookie_process()  # the default budget: 128 MiB
    baseline = bookie.rss()
    socks = [bookie.connect() for _ in range(100)]
    frame_but_its_last_byte = struct.pack(">i", MAX_FRAME) + b"\x0a" + bytes(MAX_FRAME - 2)
    for sock in socks:  # 100 frames of 5 MiB, each but its last byte sent
        # Closed by the bookie while sending: what the budget is for.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(frame_but_its_last_byte)
    try:
        wait_for(lambda: unread_bytes(bookie.port) == 0, "the bookie to read every byte")
        growth = bookie.rss() - baseline
        assert growth < 128 * MIB + 64 * MIB, f"RSS grew by {growth / MIB:.0f} MiB"
        closed = sum(not still_open(sock) for sock in socks)
        assert closed >= 100 - 128 // 5, "what does not fit the budget is closed"
        asyncio.run(round_trip("127.0.0.1", bookie.port, Protocol.V2, ledger_id=13))
    finally:
        for sock in socks:
            sock.close()
    assert "over the budget of 134217728 bytes" in bookie.log()


# -- logging --------------------------------------------------------------------------------
def lines_and_suppressed(log: str, pattern: str) -> tuple[int, int]:
    """Lines of ``log`` matching ``pattern``, and the count of lines reported suppressed."""
    lines = len(re.findall(pattern, log))
    riding = re.findall(r"\((\d+) more lines about connections suppressed\)", log)
    alone = re.findall(r"(\d+) lines about connections suppressed$", log, re.MULTILINE)
    return lines, sum(int(n) for n in riding + alone)


def test_garbage_first_frames_log_few_lines_and_no_traceback(bookie_process) -> None:
    bookie = bookie_process()
    started = time.monotonic()
    for _ in range(1000):
        with bookie.connect() as sock:
            sock.sendall(struct.pack(">i", 5) + b"\x55junk")  # neither v2 nor v3
            assert closed_by_peer(sock)
    elapsed = time.monotonic() - started
    pattern = r"closing connection from 127\.0\.0\.1:\d+: bad frame: first frame starts with"

    def accounted() -> int:
        return sum(lines_and_suppressed(bookie.log(), pattern))

    wait_for(lambda: accounted() == 1000, "every bad connection to be a line or counted")
    log = bookie.log()
    lines, _ = lines_and_suppressed(log, pattern)
    assert lines <= 20 + 10 * (elapsed + 1), "a burst of 20, then 10 lines a second"
    assert "Traceback" not in log
    asyncio.run(round_trip("127.0.0.1", bookie.port, Protocol.V3, ledger_id=14))


# -- v3 enum values ---------------------------------------------------------------------------
def test_v3_unknown_enum_values_get_ebadreq_and_keep_the_connection(bookie_process) -> None:
    bookie = bookie_process()
    read = pb_bytes(100, pb_varint(1, 15) + pb_varint(2, 0))
    add = pb_bytes(
        101,
        pb_varint(1, 15)
        + pb_varint(2, 0)
        + pb_bytes(3, bytes(20))
        + pb_bytes(4, bytes(32))
        + pb_varint(100, 9),
    )
    requests = {  # txn id -> (header without txn id, body)
        1: (pb_varint(1, 3) + pb_varint(2, 99), b""),  # unknown operation
        2: (pb_varint(1, 99) + pb_varint(2, 1), read),  # unknown protocol version
        3: (pb_varint(2, 1), read),  # no protocol version
        4: (pb_varint(1, 3) + pb_varint(2, 2), add),  # AddRequest flag 9
        5: (
            pb_varint(1, 3) + pb_varint(2, 1),
            pb_bytes(100, pb_varint(1, 15) + pb_varint(2, 0) + pb_varint(100, 5)),
        ),  # read flag
        6: (pb_varint(1, 3) + pb_varint(2, -7), b""),  # negative operation
    }
    with bookie.connect() as sock:
        for txn, (header, body) in requests.items():
            payload = pb_bytes(1, header + pb_varint(3, txn)) + body
            sock.sendall(struct.pack(">i", len(payload)) + payload)
        decoder = FrameDecoder()
        responses: list[object] = []
        sock.settimeout(WAIT_S)
        while len(responses) < len(requests):
            decoder.receive_data(sock.recv(65536))
            responses.extend(v3.decode_response(frame) for frame in decoder.frames())
        assert sorted((r.txn_id, r.status) for r in responses) == [  # type: ignore[attr-defined]
            (txn, StatusCode.EBADREQ) for txn in requests
        ]
        operations = {r.txn_id: r.operation for r in responses if isinstance(r, ErrorResponse)}
        assert operations[1] == 99 and operations[6] == -7
        assert still_open(sock)
    asyncio.run(round_trip("127.0.0.1", bookie.port, Protocol.V3, ledger_id=15))
    assert "Traceback" not in bookie.log()


async def test_options_by_name_reach_the_bookie(bookie_process, tmp_path: Path) -> None:
    """``--conf`` then ``-o`` (which wins) set any option by its name in a real bookie."""
    conf = tmp_path / "bookie.conf"
    conf.write_text("# a long idle timeout, overridden below\nconnection_idle_timeout_ms=600000\n")
    bookie = bookie_process("--conf", str(conf), "-o", "connection_idle_timeout_ms=300")
    idle = await BookieClient.connect("127.0.0.1", bookie.port)
    try:
        await idle.send(ReadRequest(12, 0))
        deadline = time.monotonic() + WAIT_S
        while idle.connected and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert not idle.connected, "the -o idle timeout (300 ms) closed the idle connection"
    finally:
        await idle.aclose()
