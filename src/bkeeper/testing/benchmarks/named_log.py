"""``bkeeper bench log``: named-log appends while another client tails the log; then the log
read back by a reader and by a subscription that acknowledges every record."""

from __future__ import annotations

import asyncio
import functools
import os
import time
from array import array
from typing import TYPE_CHECKING

from bkeeper.common.errors import BKeeperError
from bkeeper.testing.benchmarks.results import PACING_SLEEP_S, BenchResult

if TYPE_CHECKING:
    from bkeeper.namedlog import NamedLog

__all__ = ["bench_log"]


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
                # Checked again at least every 0.2 s, not only when a record arrives: the
                # last record may reach the reader before the writer's last ack is seen here.
                seen = 0
                while not (all_sent.is_set() and seen >= expected[0]):
                    if await reader.next(timeout_s=0.2) is None:
                        continue
                    tail_latency.append(perf() - sent_at[seen])
                    seen += 1

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
            replay = await _read_back(reader_logs.log(name), len(sent_at), entry_bytes)
        finally:
            await writer_logs.delete(name)
    label = f"log appends, {entry_bytes} B" + (f", open loop {rate:.0f}/s" if rate else "")
    count = len(sent_at)
    return [
        BenchResult(label, count, elapsed, count * entry_bytes, append_latency),
        BenchResult("  append -> tailing reader", len(tail_latency), elapsed, 0, tail_latency),
        *replay,
    ]


async def _read_back(named: NamedLog, count: int, entry_bytes: int) -> list[BenchResult]:
    """The whole log read again, by a plain reader and then by a subscription's consumer
    acknowledging every record (the cost of acks is the difference; they are written in
    batches, one compare-and-set per flush interval, and flushed at the end)."""
    from bkeeper.namedlog import EARLIEST

    perf = time.perf_counter
    reader = await named.open_reader(EARLIEST)
    start = perf()
    for _ in range(count):
        if await reader.next(timeout_s=30) is None:
            raise BKeeperError(f"read back: a record of {count} did not come within 30 s")
    read_s = perf() - start
    await reader.close()
    consumer = await named.subscribe("bench", EARLIEST)
    start = perf()
    for _ in range(count):
        record = await consumer.receive(timeout_s=30)
        if record is None:
            raise BKeeperError(f"consume: a record of {count} did not come within 30 s")
        consumer.ack(record.position)
    await consumer.flush()
    consume_s = perf() - start
    await consumer.close()
    empty: array[float] = array("d")
    return [
        BenchResult("read back by a reader", count, read_s, count * entry_bytes, empty),
        BenchResult(
            "  by a subscription, acking each", count, consume_s, count * entry_bytes, empty
        ),
    ]
