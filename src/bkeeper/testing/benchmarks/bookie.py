"""``bkeeper bench bookie``: acknowledged (fsynced) adds against one bookie, closed or open
loop, straight through a :class:`BookieClient` (no ledger client)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from array import array
from collections.abc import AsyncIterator, Callable

from bkeeper.client.bookie_client import BookieClient
from bkeeper.client.handshake import ClientSecurity
from bkeeper.common.errors import BKeeperError
from bkeeper.testing.benchmarks.bookie_v2 import bench_bookie_adds_v2
from bkeeper.testing.benchmarks.results import PACING_SLEEP_S, BenchResult
from bkeeper.wire.codes import Protocol, StatusCode
from bkeeper.wire.digest import DigestManager, DigestType, master_key
from bkeeper.wire.messages import AddRequest, AddResponse

__all__ = ["bench_bookie_adds"]


@contextlib.asynccontextmanager
async def _connection(
    host: str, port: int, protocol: Protocol, security: ClientSecurity | None
) -> AsyncIterator[BookieClient]:
    client = await BookieClient.connect(host, port, protocol, security=security)
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
    security: ClientSecurity | None = None,
    generic: bool = False,
) -> BenchResult:
    """Add entries to one bookie for ``duration_s``: closed loop with ``in_flight``
    outstanding adds, or open loop at ``rate`` adds/s (still capped by ``in_flight``);
    ``security``: connect with START_TLS / AUTH first. Plain v2 (no ``security``, no
    ``progress``) uses the raw load generator of
    :mod:`bkeeper.testing.benchmarks.bookie_v2`; ``generic`` forces this client instead."""
    if protocol is Protocol.V2 and security is None and progress is None and not generic:
        return await bench_bookie_adds_v2(
            host,
            port,
            entry_bytes=entry_bytes,
            duration_s=duration_s,
            in_flight=in_flight,
            rate=rate,
            ledger_id=ledger_id,
        )
    ledger_id = ledger_id if ledger_id is not None else int(time.time() * 1000) % (1 << 40)
    manager = DigestManager(ledger_id, DigestType.CRC32C, b"bench")
    key = master_key(b"bench")
    payload = os.urandom(entry_bytes)
    latencies: array[float] = array("d")
    async with _connection(host, port, protocol, security) as client:
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
    if failures:
        raise BKeeperError(f"{len(failures)} adds failed, first: {failures[0]}")
    label = f"bookie adds {protocol.name}, {entry_bytes} B, in-flight {in_flight}"
    if rate is not None:
        label += f", open loop {rate:.0f}/s"
    return BenchResult(label, len(latencies), elapsed, len(latencies) * entry_bytes, latencies)
