"""``bkeeper bench spark``: rows/s of a batch read of a named log through the data source,
(``--latency``) append-to-visible latency of a stream copying one log into another, and
(``--cold-start``) the first queries of new JVMs beside Spark's floor for a Python source
(:mod:`bkeeper.spark.bench_cold`).

Fills the log ``log_name`` up to ``records`` records of ``record_bytes`` bytes (kept, so a
second run against the same cluster skips the fill), then reads the whole log in a local
Spark session into the ``noop`` sink ``runs`` times; the first read also warms the Python
workers and their clients, as a long-running job's would be.
"""

from __future__ import annotations

import asyncio
import statistics
import struct
import time
from dataclasses import dataclass
from typing import Any

from bkeeper.client import BookKeeper
from bkeeper.namedlog import LogConfig, NamedLogs, Position, create_ledger, encode_record
from bkeeper.namedlog.core import decode_entry, encode_batch
from bkeeper.spark.log_view import LogView

__all__ = [
    "SparkLatencyRun",
    "SparkReadRun",
    "bench_spark_latency",
    "bench_spark_read",
    "create_logs",
    "fill_log",
    "produce",
]

#: Appends in flight while filling the log...
FILL_IN_FLIGHT_MAX = 2_000
#: ...and record batches in flight.
FILL_BATCHES_IN_FLIGHT_MAX = 64


@dataclass(frozen=True)
class SparkReadRun:
    rows: int
    bytes: int
    seconds: float
    partitions: int
    #: The same query over the same payloads in Parquet, run right after (``vs_parquet``).
    parquet: SparkReadRun | None = None


async def fill_log(
    uri: str, name: str, records: int, record_bytes: int, batch_records: int = 1
) -> tuple[int, float]:
    """Append records until the log holds ``records`` (counting ``batch_records`` per
    entry); (records appended, seconds). With ``batch_records`` above 1 the records go in
    record batches of that many, in ledgers appended to the log as the Spark sink does."""
    async with BookKeeper(uri) as bk:
        logs = NamedLogs(bk, LogConfig())
        if name not in await logs.names():
            await logs.create(name)
        named = logs.log(name)
        view = LogView(logs)
        spans, _ = await view.spans(name, await view.earliest(name))
        have = sum(span.count for span in spans) * batch_records
        missing = max(0, records - have)
        started = time.perf_counter()
        payload = bytes(range(256)) * (record_bytes // 256 + 2)
        if missing and batch_records > 1:
            await _fill_batches(bk, named, missing, payload, record_bytes, batch_records)
        elif missing:
            writer = await named.open_writer()
            pending: list[asyncio.Future[Position]] = []
            for i in range(missing):
                pending.append(await writer.append_async(payload[i % 256 : i % 256 + record_bytes]))
                if len(pending) >= FILL_IN_FLIGHT_MAX:
                    await asyncio.gather(*pending)
                    pending.clear()
            await asyncio.gather(*pending)
            await writer.close()
        return missing, time.perf_counter() - started


async def _fill_batches(
    bk: BookKeeper, named: Any, missing: int, payload: bytes, record_bytes: int, size: int
) -> None:
    """Record batches of ``size`` records in one new ledger, appended to the log."""
    handle = await create_ledger(bk, LogConfig())
    now = int(time.time() * 1000)
    pending: list[asyncio.Future[int]] = []
    for first in range(0, missing, size):
        count = min(size, missing - first)
        envelopes = [
            encode_record(payload[i % 256 : i % 256 + record_bytes], now)
            for i in range(first, first + count)
        ]
        pending.append(await handle.append_async(encode_batch(envelopes)))
        if len(pending) >= FILL_BATCHES_IN_FLIGHT_MAX:
            await asyncio.gather(*pending)
            pending.clear()
    await asyncio.gather(*pending)
    await handle.close()
    await named.append_ledgers([handle.ledger_id])


def bench_spark_read(
    uri: str,
    name: str,
    *,
    runs: int,
    master: str,
    max_entries_per_split: int,
    vs_parquet: bool = False,
    payload_only: bool = False,
) -> list[SparkReadRun]:
    """Read the whole log ``runs`` times into the noop sink; with ``vs_parquet``, the same
    payloads are first written to Parquet (in Spark's scratch dir) and each run reads them
    too, right after the log, with the same query. With ``payload_only`` the log is read
    with the schema ``payload binary`` (the source returns that column alone)."""
    import tempfile

    from bkeeper.spark.session import local_session

    spark = local_session(master, "bkeeper-bench")
    try:
        with tempfile.TemporaryDirectory(prefix="bkeeper-bench-parquet-") as scratch:
            reader = (
                spark.read.format("bkeeper")
                .option("metadata", uri)
                .option("log", name)
                .option("maxEntriesPerSplit", max_entries_per_split)
            )
            frame = (reader.schema("payload binary") if payload_only else reader).load()
            parquet = None
            if vs_parquet:
                path = f"{scratch}/payloads.parquet"
                frame.select("payload").write.parquet(path)
                parquet = spark.read.parquet(path)
            results = []
            for _ in range(runs):
                run = _count(frame)
                if parquet is not None:
                    run = SparkReadRun(
                        run.rows, run.bytes, run.seconds, run.partitions, _count(parquet)
                    )
                results.append(run)
            return results
    finally:
        spark.stop()


def _count(frame: Any) -> SparkReadRun:
    partitions = frame.rdd.getNumPartitions()
    started = time.perf_counter()
    totals = frame.selectExpr("count(*) AS n", "sum(length(payload)) AS b").first()
    seconds = time.perf_counter() - started
    return SparkReadRun(int(totals.n), int(totals.b or 0), seconds, partitions)


#: Progress phases (``durationMs``) the latency bench reports, in the order Spark runs them.
PHASES = (
    "latestOffset",
    "walCommit",
    "queryPlanning",
    "getBatch",
    "addBatch",
    "commitOffsets",
    "triggerExecution",
)
#: How often the measuring reader re-reads the sink log's ledger list when it is past its
#: last ledger (the sink adds one sealed ledger per batch): small, so the reader adds little.
VISIBLE_POLL_MS = 5


@dataclass(frozen=True)
class SparkLatencyRun:
    """Append-to-visible latencies of a stream copying one log into another."""

    latencies_ms: list[float]
    appended: int
    batches: int
    #: Median ``durationMs`` of each phase over the batches that read records.
    phases_ms: dict[str, float]
    #: From ``start()`` of the restarted query to its first batch's end, in the same
    #: session (warm Python workers and clients)...
    restart_first_batch_s: float
    #: ...and in a new JVM (cold Python workers: a driver restarted after a crash; the JVM's
    #: own start is not counted).
    cold_restart_first_batch_s: float


def bench_spark_latency(
    uri: str, *, rate: int, seconds: float, master: str, trigger_ms: int, scratch: str
) -> SparkLatencyRun:
    """Copy a log to another with a stream (``trigger_ms`` apart; 0: back to back) while
    appending ``rate`` records/s for ``seconds``; each record carries its send time and a
    tailing reader of the copy takes the difference when it sees it. Then stop the query,
    append, start it again from its checkpoint and time its first batch."""
    import threading
    import uuid

    from bkeeper.spark.session import local_session, stop_jvm

    suffix = uuid.uuid4().hex[:8]
    src, dst = f"latency-src-{suffix}", f"latency-dst-{suffix}"
    asyncio.run(create_logs(uri, [src, dst]))
    spark = local_session(master, "bkeeper-bench-latency")
    checkpoint = f"{scratch}/latency-{suffix}"
    try:
        query = _copy(spark, uri, src, dst, checkpoint, trigger_ms)
        _wait_for_progress(query, 1)
        seen: list[float] = []
        stop = threading.Event()
        watcher = threading.Thread(target=_watch, args=(uri, dst, seen, stop), daemon=True)
        watcher.start()
        appended = asyncio.run(produce(uri, src, rate, seconds))
        deadline = time.monotonic() + 60
        while len(seen) < appended and time.monotonic() < deadline:
            time.sleep(0.05)
        stop.set()
        watcher.join(30)
        progress = [p for p in query.recentProgress if p["numInputRows"]]
        query.stop()
        phases = {
            phase: statistics.median(p["durationMs"].get(phase, 0) for p in progress)
            for phase in PHASES
        }
        restart_s = _restart(spark, uri, src, dst, checkpoint, trigger_ms, rate)
        stop_jvm()
        spark = local_session(master, "bkeeper-bench-latency")
        cold_s = _restart(spark, uri, src, dst, checkpoint, trigger_ms, rate)
        return SparkLatencyRun(seen, appended, len(progress), phases, restart_s, cold_s)
    finally:
        spark.stop()


def _restart(
    spark: Any, uri: str, src: str, dst: str, checkpoint: str, trigger_ms: int, rate: int
) -> float:
    """Append a little, restart the copy from its checkpoint: seconds to its first batch."""
    asyncio.run(produce(uri, src, rate, 0.2))
    started = time.monotonic()
    query = _copy(spark, uri, src, dst, checkpoint, trigger_ms)
    _wait_for_progress(query, 1, with_rows=True)
    seconds = time.monotonic() - started
    query.stop()
    return seconds


def _copy(spark: Any, uri: str, src: str, dst: str, checkpoint: str, trigger_ms: int) -> Any:
    return (
        spark.readStream.format("bkeeper")
        .option("metadata", uri)
        .option("log", src)
        .option("startingPosition", "latest")
        .load()
        .select("payload")
        .writeStream.format("bkeeper")
        .option("metadata", uri)
        .option("log", dst)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime=f"{trigger_ms} milliseconds")
        .start()
    )


def _wait_for_progress(query: Any, count: int, *, with_rows: bool = False) -> None:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if query.exception() is not None:
            raise query.exception()
        done = [p for p in query.recentProgress if p["numInputRows"] or not with_rows]
        if len(done) >= count:
            return
        time.sleep(0.01)
    raise TimeoutError("the streaming query made no progress in 300 s")


async def create_logs(uri: str, names: list[str]) -> None:
    async with BookKeeper(uri) as bk:
        logs = NamedLogs(bk, LogConfig())
        for name in names:
            await logs.create(name)


async def produce(uri: str, name: str, rate: int, seconds: float) -> int:
    """Append ``rate`` records/s (in 10 ms steps) for ``seconds``; each holds its send time."""
    async with BookKeeper(uri) as bk:
        writer = await NamedLogs(bk, LogConfig()).log(name).open_writer()
        pending: list[asyncio.Future[Position]] = []
        started = time.monotonic()
        sent = 0
        while (elapsed := time.monotonic() - started) < seconds:
            due = int(elapsed * rate) + 1
            while sent < due:
                stamp = struct.pack(">d", time.monotonic())
                pending.append(await writer.append_async(stamp))
                sent += 1
            await asyncio.sleep(0.01)
        await asyncio.gather(*pending)
        await writer.close()
        return sent


def _watch(uri: str, name: str, seen: list[float], stop: Any) -> None:
    """Tail the copy: re-read its ledger list every ``VISIBLE_POLL_MS`` and take each new
    record's latency (entries of one record or record batches, as the sink writes them)."""

    async def run() -> None:
        async with BookKeeper(uri) as bk:
            view = LogView(NamedLogs(bk, LogConfig()))
            position = await view.earliest(name)
            while not stop.is_set():
                spans, after = await view.spans(name, position)
                for span in spans:
                    handle = await bk.open_ledger(span.ledger_id, b"", recovery=False)
                    async for entry in handle.read(span.first, span.last):
                        now = time.monotonic()
                        for record in decode_entry(entry.payload, span.ledger_id, entry.entry_id):
                            sent = struct.unpack(">d", bytes(record.payload[:8]))[0]
                            seen.append((now - sent) * 1000.0)
                    await handle.close()
                position = after
                if not spans:
                    await asyncio.sleep(VISIBLE_POLL_MS / 1000)

    asyncio.run(run())
