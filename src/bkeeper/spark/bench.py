"""``bkeeper bench spark``: rows/s of a batch read of a named log through the data source.

Fills the log ``log_name`` up to ``records`` records of ``record_bytes`` bytes (kept, so a
second run against the same cluster skips the fill), then reads the whole log in a local
Spark session into the ``noop`` sink ``runs`` times; the first read also warms the Python
workers and their clients, as a long-running job's would be.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from bkeeper.client import BookKeeper
from bkeeper.namedlog import LogConfig, NamedLogs, Position
from bkeeper.spark.plan import LogView

__all__ = ["SparkReadRun", "bench_spark_read", "fill_log"]

#: Appends in flight while filling the log.
FILL_IN_FLIGHT_MAX = 2_000


@dataclass(frozen=True)
class SparkReadRun:
    rows: int
    bytes: int
    seconds: float
    partitions: int


async def fill_log(uri: str, name: str, records: int, record_bytes: int) -> tuple[int, float]:
    """Append records until the log holds ``records``; (records appended, seconds)."""
    async with BookKeeper(uri) as bk:
        logs = NamedLogs(bk, LogConfig())
        if name not in await logs.names():
            await logs.create(name)
        named = logs.log(name)
        view = LogView(logs)
        spans, _ = await view.spans(name, await view.earliest(name))
        have = sum(span.count for span in spans)
        missing = max(0, records - have)
        started = time.perf_counter()
        if missing:
            writer = await named.open_writer()
            payload = bytes(range(256)) * (record_bytes // 256 + 2)
            pending: list[asyncio.Future[Position]] = []
            for i in range(missing):
                pending.append(await writer.append_async(payload[i % 256 : i % 256 + record_bytes]))
                if len(pending) >= FILL_IN_FLIGHT_MAX:
                    await asyncio.gather(*pending)
                    pending.clear()
            await asyncio.gather(*pending)
            await writer.close()
        return missing, time.perf_counter() - started


def bench_spark_read(
    uri: str, name: str, *, runs: int, master: str, max_entries_per_split: int
) -> list[SparkReadRun]:
    """Read the whole log ``runs`` times into the noop sink."""
    from bkeeper.spark.session import local_session

    spark = local_session(master, "bkeeper-bench")
    try:
        results = []
        for _ in range(runs):
            df = (
                spark.read.format("bkeeper")
                .option("metadata", uri)
                .option("log", name)
                .option("maxEntriesPerSplit", max_entries_per_split)
                .load()
            )
            partitions = df.rdd.getNumPartitions()
            started = time.perf_counter()
            totals = df.selectExpr("count(*) AS n", "sum(length(payload)) AS b").first()
            seconds = time.perf_counter() - started
            results.append(SparkReadRun(int(totals.n), int(totals.b or 0), seconds, partitions))
        return results
    finally:
        spark.stop()
