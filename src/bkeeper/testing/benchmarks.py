"""Benchmark workloads behind ``bkeeper bench``: codec rates and bookie add throughput.

Each workload returns a :class:`BenchResult` (rates and latency percentiles) that the CLI
prints as a table and docs/benchmarks.md records with the command that produced it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import socket
import subprocess
import sys
import tempfile
import time
from array import array
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field

from bkeeper.client.bookie_client import BookieClient
from bkeeper.common.errors import BKeeperError
from bkeeper.wire import v2, v3
from bkeeper.wire.codes import Protocol, StatusCode
from bkeeper.wire.digest import DigestManager, DigestType, master_key
from bkeeper.wire.messages import AddRequest, AddResponse

__all__ = [
    "BenchResult",
    "bench_bookie_adds",
    "bench_client_reads",
    "bench_client_writes",
    "bench_codec",
    "bench_log",
    "delete_ledger",
    "free_port",
    "free_port_range",
    "local_bookie",
    "local_bookie_process",
    "percentiles",
]


#: How long an open-loop sender sleeps between checks for due work. uvloop's timers have
#: millisecond resolution: a shorter sleep returns at once and the sender spins a whole core,
#: which on two cores starves the bookies it measures (p99 at 20,000/s: 17-69 ms with 0.5 ms,
#: 8.6 ms with 1 ms).
PACING_SLEEP_S = 0.001


@dataclass
class BenchResult:
    name: str
    operations: int
    seconds: float
    bytes: int = 0
    latencies_s: array[float] = field(default_factory=lambda: array("d"))
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.operations / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.bytes / self.seconds / 1e6 if self.seconds > 0 else 0.0

    def latency_ms(self) -> dict[str, float]:
        return {k: v * 1000.0 for k, v in percentiles(self.latencies_s).items()}


def percentiles(samples: array[float]) -> dict[str, float]:
    if not samples:
        return {}
    ordered = sorted(samples)
    n = len(ordered)

    def at(q: float) -> float:
        return ordered[min(n - 1, int(q * n))]

    return {"p50": at(0.50), "p99": at(0.99), "p99.9": at(0.999), "max": ordered[-1]}


# -- codec ---------------------------------------------------------------------------------
def bench_codec(
    protocol: Protocol, count: int, entry_bytes: int, digest: DigestType
) -> list[BenchResult]:
    """Encode+decode ``count`` ADD requests (with digest) and ADD responses."""
    codec = v2 if protocol is Protocol.V2 else v3
    manager = DigestManager(1, digest, b"secret")
    key = master_key(b"secret")
    payload = os.urandom(entry_bytes)
    start = time.perf_counter()
    for entry_id in range(count):
        body = manager.encode_entry(entry_id, entry_id - 1, (entry_id + 1) * entry_bytes, payload)
        frame = codec.encode_request(AddRequest(1, entry_id, key, body, txn_id=entry_id))
        request = codec.decode_request(frame)
        assert isinstance(request, AddRequest)
        manager.verify_entry(request.body, entry_id)
    requests = BenchResult(
        f"{protocol.name} add request (+digest {digest.name})",
        count,
        time.perf_counter() - start,
        count * entry_bytes,
    )
    start = time.perf_counter()
    for entry_id in range(count):
        frame = codec.encode_response(AddResponse(StatusCode.EOK, 1, entry_id, entry_id))
        codec.decode_response(frame)
    responses = BenchResult(f"{protocol.name} add response", count, time.perf_counter() - start)
    return [requests, responses]


# -- bookie ----------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def free_port_range(count: int, attempts: int = 50) -> int:
    """A base port ``p`` with ``p .. p + count - 1`` all free right now."""
    for _ in range(attempts):
        base = free_port()
        if base + count >= 65536:
            continue
        sockets = []
        try:
            for port in range(base, base + count):
                sock = socket.socket()
                sockets.append(sock)
                sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
    raise BKeeperError(f"found no {count} consecutive free ports")


@contextlib.contextmanager
def local_bookie(
    data_dir: str | None = None, port: int | None = None, extra_args: tuple[str, ...] = ()
) -> Iterator[tuple[str, int]]:
    """Start ``bkeeper bookie`` as a child process; stop it with SIGTERM on exit."""
    with local_bookie_process(data_dir, port, extra_args) as (host, bound_port, _):
        yield host, bound_port


@contextlib.contextmanager
def local_bookie_process(
    data_dir: str | None = None,
    port: int | None = None,
    extra_args: tuple[str, ...] = (),
    log_path: str | None = None,
) -> Iterator[tuple[str, int, subprocess.Popen[bytes]]]:
    """:func:`local_bookie` that also yields the process; its output goes to ``log_path``
    (appended) when given."""
    with contextlib.ExitStack() as stack:
        if data_dir is None:
            data_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="bkeeper-bench-"))
        port = port or free_port()
        cmd = [sys.executable, "-m", "bkeeper", "bookie", "--data-dir", data_dir]
        log = stack.enter_context(open(log_path, "ab")) if log_path else None
        proc = subprocess.Popen(
            [*cmd, "--port", str(port), *extra_args],
            stdout=log,
            stderr=subprocess.STDOUT if log else None,
        )
        try:
            _wait_port("127.0.0.1", port, proc, 30.0)
            yield "127.0.0.1", port, proc
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _wait_port(host: str, port: int, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    """Wait until the bookie ``proc`` listens on ``host:port``. One that does not in time is
    killed and reaped before the error, so a failed start leaves no process behind."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BKeeperError(f"bookie exited with code {proc.returncode} before listening")
        with contextlib.suppress(OSError), socket.create_connection((host, port), 0.2):
            return
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    raise BKeeperError(f"bookie did not listen on {host}:{port} within {timeout_s} s (killed)")


@contextlib.asynccontextmanager
async def _connection(host: str, port: int, protocol: Protocol) -> AsyncIterator[BookieClient]:
    client = await BookieClient.connect(host, port, protocol)
    try:
        yield client
    finally:
        await client.aclose()


async def bench_bookie_adds(
    host: str,
    port: int,
    *,
    protocol: Protocol,
    entry_bytes: int,
    duration_s: float,
    in_flight: int,
    rate: float | None = None,
    ledger_id: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> BenchResult:
    """Add entries to one bookie for ``duration_s``: closed loop with ``in_flight``
    outstanding adds, or open loop at ``rate`` adds/s (still capped by ``in_flight``)."""
    ledger_id = ledger_id if ledger_id is not None else int(time.time() * 1000) % (1 << 40)
    manager = DigestManager(ledger_id, DigestType.CRC32C, b"bench")
    key = master_key(b"bench")
    payload = os.urandom(entry_bytes)
    latencies: array[float] = array("d")
    async with _connection(host, port, protocol) as client:
        loop = asyncio.get_running_loop()
        outstanding = 0
        next_entry = 0
        failures: list[str] = []
        wake = asyncio.Event()
        perf = time.perf_counter

        def done(sent_at: float, fut: asyncio.Future[AddResponse]) -> None:
            nonlocal outstanding
            outstanding -= 1
            latencies.append(perf() - sent_at)
            if fut.exception() is not None:
                failures.append(str(fut.exception()))
            elif fut.result().status is not StatusCode.EOK:
                failures.append(fut.result().status.name)
            wake.set()

        def send_one() -> None:
            nonlocal outstanding, next_entry
            entry_id = next_entry
            next_entry += 1
            body = manager.encode_entry(entry_id, entry_id - 1, 0, payload)
            txn = client.next_txn_id() if protocol is Protocol.V3 else 0
            fut = client.send(AddRequest(ledger_id, entry_id, key, body, txn_id=txn))
            outstanding += 1
            sent_at = perf()
            fut.add_done_callback(lambda f: done(sent_at, f))

        start = perf()
        deadline = start + duration_s
        while True:
            now = perf()
            if now >= deadline or failures:
                break
            allowed = in_flight - outstanding
            if rate is not None:
                allowed = min(allowed, int((now - start) * rate) - next_entry)
            for _ in range(max(0, allowed)):
                send_one()
            wake.clear()
            if rate is not None:
                await asyncio.sleep(PACING_SLEEP_S)
            else:
                await wake.wait()
            if progress is not None:
                progress(len(latencies))
        while outstanding and not failures:
            wake.clear()
            await wake.wait()
        elapsed = perf() - start
        _ = loop
    if failures:
        raise BKeeperError(f"{len(failures)} adds failed, first: {failures[0]}")
    label = f"bookie adds {protocol.name}, {entry_bytes} B, in-flight {in_flight}"
    if rate is not None:
        label += f", open loop {rate:.0f}/s"
    return BenchResult(label, len(latencies), elapsed, len(latencies) * entry_bytes, latencies)


# -- ledger client ---------------------------------------------------------------------------
async def bench_client_writes(
    metadata_uri: str,
    *,
    ensemble: int,
    write_quorum: int,
    ack_quorum: int,
    entry_bytes: int,
    duration_s: float,
    in_flight: int,
    rate: float | None = None,
    protocol: Protocol = Protocol.V2,
    count: int | None = None,
) -> tuple[BenchResult, int]:
    """Append to one ledger through the client for ``duration_s`` (or until ``count``
    entries); returns the result and the ledger id."""
    from bkeeper.client import BookKeeper, ClientConfig

    config = ClientConfig(protocol=protocol, pending_adds_max=max(in_flight, 1))
    payload = os.urandom(entry_bytes)
    latencies: array[float] = array("d")
    perf = time.perf_counter
    async with BookKeeper(metadata_uri, config) as bk:
        wh = await bk.create_ledger(ensemble, write_quorum, ack_quorum, password=b"bench")

        def done(sent_at: float, _: asyncio.Future[int]) -> None:
            latencies.append(perf() - sent_at)

        start = perf()
        deadline = start + duration_s
        sent = 0
        last: asyncio.Future[int] | None = None
        while perf() < deadline and (count is None or sent < count):
            if rate is not None:
                due = int((perf() - start) * rate) - sent
                if due <= 0:
                    await asyncio.sleep(PACING_SLEEP_S)
                    continue
            # Open loop: latency counts from when the entry was due, not when it went out.
            sent_at = perf() if rate is None else start + sent / rate
            last = await wh.append_async(payload)
            last.add_done_callback(functools.partial(done, sent_at))
            sent += 1
        if last is not None:
            await last
        elapsed = perf() - start
        await wh.close()
        ledger_id = wh.ledger_id
    label = (
        f"client writes E{ensemble}/Qw{write_quorum}/Qa{ack_quorum} {protocol.name}, "
        f"{entry_bytes} B, in-flight {in_flight}"
    )
    if rate is not None:
        label += f", open loop {rate:.0f}/s"
    return BenchResult(
        label, len(latencies), elapsed, len(latencies) * entry_bytes, latencies
    ), ledger_id


async def delete_ledger(metadata_uri: str, ledger_id: int) -> None:
    """Delete a ledger a benchmark wrote."""
    from bkeeper.client import BookKeeper

    async with BookKeeper(metadata_uri) as bk:
        await bk.delete_ledger(ledger_id)


async def bench_client_reads(
    metadata_uri: str, ledger_id: int, password: bytes = b"bench"
) -> BenchResult:
    """Read a whole (closed) ledger through the client."""
    from bkeeper.client import BookKeeper

    perf = time.perf_counter
    async with BookKeeper(metadata_uri) as bk:
        rh = await bk.open_ledger(ledger_id, password)
        start = perf()
        count = size = 0
        async for entry in rh.read():
            count += 1
            size += len(entry.payload)
        elapsed = perf() - start
    return BenchResult(f"client reads of ledger {ledger_id}", count, elapsed, size)


# -- named logs ------------------------------------------------------------------------------
async def bench_log(
    metadata_uri: str,
    *,
    entry_bytes: int,
    duration_s: float,
    in_flight: int,
    rate: float | None = None,
) -> list[BenchResult]:
    """Append to a fresh named log while another client tails it; the append results (latency
    to acknowledgement) and the tail results (latency from append to the tailing reader).
    The log is deleted afterwards."""
    from bkeeper.client import BookKeeper, ClientConfig
    from bkeeper.namedlog import EARLIEST, LogConfig, NamedLogs

    name = f"bench-{os.getpid()}-{int(time.time() * 1000)}"
    perf = time.perf_counter
    sent_at: list[float] = []
    append_latency: array[float] = array("d")
    tail_latency: array[float] = array("d")
    payload = os.urandom(entry_bytes)
    writer_config = ClientConfig(pending_adds_max=max(in_flight, 1), explicit_lac_interval_ms=20)
    async with (
        BookKeeper(metadata_uri, writer_config) as writer_bk,
        BookKeeper(metadata_uri, ClientConfig(long_poll_timeout_ms=1_000)) as reader_bk,
    ):
        writer_logs = NamedLogs(writer_bk, LogConfig(tail_poll_ms=200))
        reader_logs = NamedLogs(reader_bk, LogConfig(tail_poll_ms=200))
        await writer_logs.create(name)
        try:
            writer = await writer_logs.log(name).open_writer()
            reader = await reader_logs.log(name).open_reader(EARLIEST)
            expected: list[int] = [0]
            all_sent = asyncio.Event()

            async def tail() -> None:
                seen = 0
                async for _record in reader:
                    tail_latency.append(perf() - sent_at[seen])
                    seen += 1
                    if all_sent.is_set() and seen >= expected[0]:
                        return

            tailing = asyncio.create_task(tail())

            def acked(started: float, _: asyncio.Future[object]) -> None:
                append_latency.append(perf() - started)

            start = perf()
            deadline = start + duration_s
            last: asyncio.Future[object] | None = None
            while perf() < deadline:
                if rate is not None:
                    due = int((perf() - start) * rate) - len(sent_at)
                    if due <= 0:
                        await asyncio.sleep(PACING_SLEEP_S)
                        continue
                now = perf()
                sent_at.append(now)
                last = await writer.append_async(payload)  # type: ignore[assignment]
                assert last is not None
                last.add_done_callback(functools.partial(acked, now))
            if last is not None:
                await last
            elapsed = perf() - start
            expected[0] = len(sent_at)
            all_sent.set()
            await writer.close()
            await asyncio.wait_for(tailing, 30)
            await reader.close()
        finally:
            await writer_logs.delete(name)
    label = f"log appends, {entry_bytes} B" + (f", open loop {rate:.0f}/s" if rate else "")
    count = len(sent_at)
    return [
        BenchResult(label, count, elapsed, count * entry_bytes, append_latency),
        BenchResult("  append -> tailing reader", len(tail_latency), elapsed, 0, tail_latency),
    ]
