"""``bkeeper bench gc``: how fast bookies give disk space back after ledgers are deleted.

Writes ``total_bytes`` over ``ledgers`` ledgers (entries round-robin across them, so every
entry log holds every ledger), deletes a fraction of the ledgers through the client, then
watches the bookies' data directories until their disk usage is back under a target fraction
of the peak, and reports how long that took in GC periods. Optionally an open-loop writer runs
while the space is collected, to show what compaction does to add latency.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bkeeper.testing.benchmarks.client import bench_client_writes
from bkeeper.testing.benchmarks.results import BenchResult

__all__ = ["GcBenchOutcome", "GcBenchPlan", "bench_gc", "disk_usage_bytes"]


def disk_usage_bytes(dirs: list[Path]) -> int:
    """Bytes the files under ``dirs`` take on disk (allocated blocks)."""
    total = 0
    for top in dirs:
        for root, _, files in os.walk(top):
            for name in files:
                try:
                    total += os.stat(os.path.join(root, name)).st_blocks * 512
                except FileNotFoundError:  # removed while walking (a journal, a compacted log)
                    continue
    return total


@dataclass(frozen=True)
class GcBenchPlan:
    total_bytes: int
    ledgers: int
    entry_bytes: int
    delete_fraction: float
    target_fraction: float
    gc_wait_s: float
    periods_max: float
    in_flight: int = 2000
    ensemble: int = 3
    write_quorum: int = 3
    ack_quorum: int = 2
    write_rate: float | None = None


@dataclass
class GcBenchOutcome:
    written_bytes: int = 0
    write_seconds: float = 0.0
    peak_bytes: int = 0
    deleted_ledgers: int = 0
    reclaimed_seconds: float | None = None
    final_bytes: int = 0
    samples: list[tuple[float, int]] = field(default_factory=list)
    baseline: BenchResult | None = None
    during_gc: BenchResult | None = None


async def bench_gc(
    metadata_uri: str,
    dirs: list[Path],
    plan: GcBenchPlan,
    on_progress: Callable[[str, int, int], None] | None = None,
) -> GcBenchOutcome:
    """Run the benchmark against the cluster at ``metadata_uri`` whose bookies keep their
    data in ``dirs``; ``on_progress(phase, done, total)`` reports as it goes."""
    from bkeeper.client import BookKeeper, ClientConfig

    outcome = GcBenchOutcome()
    report = on_progress or (lambda phase, done, total: None)
    payload = os.urandom(plan.entry_bytes)
    per_ledger = max(1, plan.total_bytes // plan.entry_bytes // plan.ledgers)
    total_entries = per_ledger * plan.ledgers
    config = ClientConfig(pending_adds_max=max(plan.in_flight, 1))
    async with BookKeeper(metadata_uri, config) as bk:
        handles = []
        for i in range(plan.ledgers):
            handles.append(
                await bk.create_ledger(
                    plan.ensemble, plan.write_quorum, plan.ack_quorum, password=b"bench"
                )
            )
            report("create ledgers", i + 1, plan.ledgers)
        slots = asyncio.Semaphore(plan.in_flight)
        failures: list[BaseException] = []

        def done(future: asyncio.Future[int]) -> None:
            slots.release()
            if not future.cancelled() and future.exception() is not None:
                failures.append(future.exception())  # type: ignore[arg-type]

        started = time.perf_counter()
        written = 0
        for _ in range(per_ledger):
            for handle in handles:
                await slots.acquire()
                future = await handle.append_async(payload)
                future.add_done_callback(done)
                written += 1
            if failures:
                raise failures[0]
            report("write", written, total_entries)
            outcome.peak_bytes = max(outcome.peak_bytes, disk_usage_bytes(dirs))
        for _ in range(plan.in_flight):
            await slots.acquire()
        if failures:
            raise failures[0]
        for handle in handles:
            await handle.close()
        outcome.write_seconds = time.perf_counter() - started
        outcome.written_bytes = written * plan.entry_bytes
        outcome.peak_bytes = max(outcome.peak_bytes, disk_usage_bytes(dirs))
        if plan.write_rate is not None:
            outcome.baseline = await _rate_writer(metadata_uri, plan, 10.0)
        doomed = handles[: round(plan.ledgers * plan.delete_fraction)]
        for i, handle in enumerate(doomed):
            await bk.delete_ledger(handle.ledger_id)
            report("delete ledgers", i + 1, len(doomed))
        outcome.deleted_ledgers = len(doomed)
    deleted_at = time.perf_counter()
    writer = (
        asyncio.create_task(_rate_writer(metadata_uri, plan, plan.gc_wait_s * plan.periods_max))
        if plan.write_rate is not None
        else None
    )
    target = plan.target_fraction * outcome.peak_bytes
    deadline = deleted_at + plan.gc_wait_s * plan.periods_max
    while True:
        now = time.perf_counter()
        usage = disk_usage_bytes(dirs)
        outcome.samples.append((now - deleted_at, usage))
        report("collect", min(outcome.peak_bytes, outcome.peak_bytes - usage), outcome.peak_bytes)
        if usage < target and outcome.reclaimed_seconds is None:
            outcome.reclaimed_seconds = now - deleted_at
            if writer is None:
                break
        if now >= deadline:
            break
        await asyncio.sleep(0.25)
    if writer is not None:
        outcome.during_gc = await writer
    outcome.final_bytes = disk_usage_bytes(dirs)
    return outcome


async def _rate_writer(metadata_uri: str, plan: GcBenchPlan, seconds: float) -> BenchResult:
    assert plan.write_rate is not None
    result, _ = await bench_client_writes(
        metadata_uri,
        ensemble=plan.ensemble,
        write_quorum=plan.write_quorum,
        ack_quorum=plan.ack_quorum,
        entry_bytes=1024,
        duration_s=seconds,
        in_flight=plan.in_flight,
        rate=plan.write_rate,
    )
    return result
