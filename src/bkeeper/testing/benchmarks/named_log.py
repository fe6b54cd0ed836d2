"""``bkeeper bench log``: named-log appends while another client tails the log; then the log
read back by a reader and by a subscription that acknowledges every record."""

from __future__ import annotations

import asyncio
import collections
import functools
import gc
import itertools
import os
import time
from array import array
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from bkeeper.common.errors import BKeeperError
from bkeeper.common.tasks import within
from bkeeper.testing.benchmarks.results import PACING_SLEEP_S, BenchResult

if TYPE_CHECKING:
    from bkeeper.namedlog import LogConfig, NamedLog

__all__ = ["GC_YOUNG_THRESHOLD", "bench_log"]

#: Allocations between young-generation collections with ``tune_gc`` (Spark's runtime's).
GC_YOUNG_THRESHOLD = 50_000


async def bench_log(
    metadata_uri: str,
    *,
    entry_bytes: int,
    duration_s: float,
    in_flight: int,
    rate: float | None = None,
    log_config: LogConfig | None = None,
    append_many: int = 0,
    tail: bool = True,
    read_back: bool = True,
    tune_gc: bool = False,
) -> list[BenchResult]:
    """Append to a fresh named log while another client tails it; the append results (latency
    to acknowledgement) and the tail results (latency from append to the tailing reader).
    ``log_config``: the writer's (record batching); ``append_many``: records per
    ``append_many`` call (0: ``append_async`` per record), with ``in_flight`` records in
    flight at most. ``tune_gc``: as Spark's runtime does, freeze what is loaded out of the
    collector's reach and collect the young generation every ``GC_YOUNG_THRESHOLD``
    allocations (a process appending hundreds of thousands of records a second otherwise
    spends more time in full collections than in appending). The log is deleted afterwards."""
    from bkeeper.client import BookKeeper, ClientConfig
    from bkeeper.namedlog import EARLIEST, LogConfig, NamedLogs

    name = f"bench-{os.getpid()}-{int(time.time() * 1000)}"
    perf = time.perf_counter
    sent_at: list[float] = []
    append_latency: array[float] = array("d")
    tail_latency: array[float] = array("d")
    payload = os.urandom(entry_bytes)
    config = log_config or LogConfig()
    writer_config = ClientConfig(pending_adds_max=max(in_flight, 1), explicit_lac_interval_ms=20)
    async with (
        BookKeeper(metadata_uri, writer_config) as writer_bk,
        BookKeeper(metadata_uri, ClientConfig(long_poll_timeout_ms=1_000)) as reader_bk,
    ):
        writer_logs = NamedLogs(writer_bk, replace(config, tail_poll_ms=200))
        reader_logs = NamedLogs(reader_bk, LogConfig(tail_poll_ms=200))
        await writer_logs.create(name)
        try:
            writer = await writer_logs.log(name).open_writer()
            reader = await reader_logs.log(name).open_reader(EARLIEST)
            expected: list[int] = [0]
            all_sent = asyncio.Event()

            async def tail_log() -> None:
                # Checked again at least every 0.2 s, not only when a record arrives: the
                # last record may reach the reader before the writer's last ack is seen here.
                seen = 0
                while not (all_sent.is_set() and seen >= expected[0]):
                    if await reader.next(timeout_s=0.2) is None:
                        continue
                    tail_latency.append(perf() - sent_at[seen])
                    seen += 1

            tailing = asyncio.create_task(tail_log()) if tail else None
            if tune_gc:
                gc.collect()
                gc.freeze()
                _, middle, old = gc.get_threshold()
                gc.set_threshold(max(GC_YOUNG_THRESHOLD, gc.get_threshold()[0]), middle, old)

            def acked(started: float, _: asyncio.Future[object]) -> None:
                append_latency.append(perf() - started)

            def acked_many(started: float, count: int, _: asyncio.Future[object]) -> None:
                append_latency.extend(itertools.repeat(perf() - started, count))

            cpu_start = time.process_time()
            start = perf()
            deadline = start + duration_s
            last: asyncio.Future[Any] | None = None
            calls: collections.deque[asyncio.Future[Any]] = collections.deque()
            calls_max = max(1, in_flight // max(append_many, 1))
            while perf() < deadline:
                due = append_many or 1
                if rate is not None:
                    due = min(due, int((perf() - start) * rate) - len(sent_at))
                    if due <= 0:
                        await asyncio.sleep(PACING_SLEEP_S)
                        continue
                now = perf()
                if not append_many:
                    sent_at.append(now)
                    last = await writer.append_async(payload)
                    last.add_done_callback(functools.partial(acked, now))
                    continue
                sent_at.extend(itertools.repeat(now, due))
                call = asyncio.ensure_future(writer.append_many([payload] * due))
                call.add_done_callback(functools.partial(acked_many, now, due))
                calls.append(call)
                last = call
                while len(calls) >= calls_max or (calls and calls[0].done()):
                    await calls.popleft()
            if last is not None:
                await last
            for pending in calls:
                await pending
            elapsed = perf() - start
            cpu_s = time.process_time() - cpu_start
            expected[0] = len(sent_at)
            all_sent.set()
            await writer.close()
            if tailing is not None:
                await within(tailing, 60)
            await reader.close()
            replay = (
                await _read_back(reader_logs.log(name), len(sent_at), entry_bytes)
                if read_back
                else []
            )
        finally:
            await writer_logs.delete(name)
    how = "batched" if config.batching else "one entry each"
    if config.batching:
        how += (
            f" (max {config.batch_max_records} records/{config.batch_max_bytes} B, "
            f"linger {config.linger_ms} ms, {config.compression})"
        )
    if append_many:
        how += f", append_many x{append_many}"
    label = f"log appends, {entry_bytes} B, {how}" + (f", open loop {rate:.0f}/s" if rate else "")
    count = len(sent_at)
    cpu = {"client CPU µs/record": f"{cpu_s / count * 1e6:.2f}" if count else "-"}
    if tune_gc:
        label += ", GC tuned"
    return [
        BenchResult(label, count, elapsed, count * entry_bytes, append_latency, cpu),
        *(
            [BenchResult("  append -> tailing reader", len(tail_latency), elapsed, 0, tail_latency)]
            if tail
            else []
        ),
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
