"""``bkeeper bench spark``: rows/s of a batch read of a named log through the data source,
(``--latency``) append-to-visible latency of a stream copying one log into another, and
(``--cold-start``) the first queries of new JVMs beside Spark's floor for a Python source:
each run is ``python -m bkeeper.spark.bench '<json>'``, a new process and so a new JVM.

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
from bkeeper.spark.plan import LogView

__all__ = [
    "COLD_KINDS",
    "ColdPhase",
    "ColdStartRun",
    "SparkLatencyRun",
    "SparkReadRun",
    "bench_spark_cold_start",
    "bench_spark_latency",
    "bench_spark_read",
    "fill_log",
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
                    run = SparkReadRun(run.rows, run.bytes, run.seconds, run.partitions,
                                       _count(parquet))  # fmt: skip
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
PHASES = ("latestOffset", "walCommit", "queryPlanning", "getBatch", "addBatch", "commitOffsets",
          "triggerExecution")  # fmt: skip
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
    asyncio.run(_create_logs(uri, [src, dst]))
    spark = local_session(master, "bkeeper-bench-latency")
    checkpoint = f"{scratch}/latency-{suffix}"
    try:
        query = _copy(spark, uri, src, dst, checkpoint, trigger_ms)
        _wait_for_progress(query, 1)
        seen: list[float] = []
        stop = threading.Event()
        watcher = threading.Thread(target=_watch, args=(uri, dst, seen, stop), daemon=True)
        watcher.start()
        appended = asyncio.run(_produce(uri, src, rate, seconds))
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
    asyncio.run(_produce(uri, src, rate, 0.2))
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


async def _create_logs(uri: str, names: list[str]) -> None:
    async with BookKeeper(uri) as bk:
        logs = NamedLogs(bk, LogConfig())
        for name in names:
            await logs.create(name)


async def _produce(uri: str, name: str, rate: int, seconds: float) -> int:
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


# --- Cold start (issue 38): each run in a new Python process, so in a new JVM ---------------

#: What ``--cold-start`` runs, each in a new process (a new JVM): a batch read of a log cold
#: then warm, a stream's first batch after start and after a restart from its checkpoint, and
#: the same on Spark's own floor for a Python source (:mod:`bkeeper.spark.floor`).
COLD_KINDS = ("batch", "stream", "restart", "floor-batch", "floor-stream", "floor-restart")
#: Records appended to a stream's source log before its start and before its restart.
COLD_STREAM_RECORDS = 1_000
#: How long a cold-start child may take before it is ended.
COLD_CHILD_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class ColdPhase:
    """One step of a cold-start run: wall seconds, and CPU seconds of the child's process
    tree (the driver, its JVM, the Python workers Spark started; bookies and ZooKeeper are
    not in it)."""

    name: str
    seconds: float
    cpu_s: float


@dataclass(frozen=True)
class ColdStartRun:
    kind: str
    phases: tuple[ColdPhase, ...]
    #: Spark's ``durationMs`` of a stream's first batch with rows (empty for batch reads).
    first_batch_ms: dict[str, int]
    #: The child process from start to exit, as its parent saw it.
    process_s: float


def bench_spark_cold_start(
    uri: str,
    log_name: str,
    *,
    master: str,
    scratch: str,
    rounds: int = 1,
    warm_runs: int = 2,
    kinds: tuple[str, ...] = COLD_KINDS,
    floor_rows: int | None = None,
    progress: Any = None,
) -> list[ColdStartRun]:
    """Run each of ``kinds`` (:data:`COLD_KINDS`) ``rounds`` times, side by side (one kind
    after the other in each round), each in a new Python process and so a new JVM (a
    ``restart`` after its ``stream``). ``log_name`` is the (filled) log the batch reads read;
    the streams copy logs of their own. ``floor_rows``: rows the floor's batch read yields
    (as many as the log holds; default a handful). ``progress`` is called with each run
    done."""
    import uuid

    runs = []
    for round_index in range(rounds):
        suffix = f"{uuid.uuid4().hex[:8]}-{round_index}"
        src, dst = f"cold-src-{suffix}", f"cold-dst-{suffix}"
        asyncio.run(_create_logs(uri, [src, dst]))
        checkpoint, floor_checkpoint = f"{scratch}/cold-{suffix}", f"{scratch}/floor-{suffix}"
        for kind in kinds:
            if kind in ("stream", "restart"):
                asyncio.run(_produce(uri, src, COLD_STREAM_RECORDS * 10, 0.1))
            args = {
                "kind": kind,
                "uri": uri,
                "log": log_name,
                "master": master,
                "warm_runs": warm_runs,
                "floor_rows": floor_rows,
                "src": src,
                "dst": dst,
                "checkpoint": floor_checkpoint if kind.startswith("floor") else checkpoint,
                "scratch": f"{scratch}/jvm-{suffix}-{kind}",
            }
            runs.append(_run_cold_child(args))
            if progress is not None:
                progress(runs[-1])
    return runs


def _run_cold_child(args: dict[str, Any]) -> ColdStartRun:
    import json
    import subprocess
    import sys

    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "bkeeper.spark.bench", json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=COLD_CHILD_TIMEOUT_S,
        check=False,
    )
    process_s = time.perf_counter() - started
    last = done.stdout.strip().rpartition("\n")[2]
    if done.returncode != 0 or not last.startswith("{"):
        tail = (done.stderr.strip() or done.stdout.strip()).splitlines()[-5:]
        raise RuntimeError(f"cold-start run {args['kind']} failed: " + " / ".join(tail))
    found = json.loads(last)
    phases = tuple(ColdPhase(p["name"], p["seconds"], p["cpu_s"]) for p in found["phases"])
    return ColdStartRun(args["kind"], phases, found["first_batch_ms"], process_s)


def _tree_cpu_s() -> float:
    """CPU seconds used so far by this process and every descendant, counting children that
    ended and were waited for (Linux ``/proc``; 0 elsewhere)."""
    import os

    if not os.path.isdir("/proc"):
        return 0.0
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as stat_file:
                fields = stat_file.read().rpartition(")")[2].split()
        except OSError:  # ended while we looked
            continue
        parents[int(name)] = int(fields[1])
        ticks[int(name)] = sum(int(field) for field in fields[11:15])
    mine = {os.getpid()}
    grew = True
    while grew:
        more = {pid for pid, parent in parents.items() if parent in mine} - mine
        grew = bool(more)
        mine |= more
    return sum(ticks[pid] for pid in mine if pid in ticks) / os.sysconf("SC_CLK_TCK")


class _Phases:
    """Wall and CPU time of consecutive steps, from the creation of this object."""

    def __init__(self) -> None:
        self.done: list[dict[str, Any]] = []
        self._wall, self._cpu = time.perf_counter(), _tree_cpu_s()

    def end(self, name: str) -> None:
        wall, cpu = time.perf_counter(), _tree_cpu_s()
        self.done.append({"name": name, "seconds": wall - self._wall, "cpu_s": cpu - self._cpu})
        self._wall, self._cpu = wall, cpu


def _cold_child(args: dict[str, Any]) -> dict[str, Any]:
    """One cold-start run in this (new) process: what :func:`_run_cold_child` reads back."""
    phases = _Phases()
    from bkeeper.spark.floor import FloorSource
    from bkeeper.spark.session import local_session

    phases.end("import pyspark")
    kind: str = args["kind"]
    floor = kind.startswith("floor")
    spark = local_session(args["master"], f"bkeeper-cold-{kind}", scratch_dir=args["scratch"])
    spark.dataSource.register(FloorSource)
    phases.end("JVM + session")
    first_batch: dict[str, int] = {}
    try:
        if kind.endswith("batch"):
            reader = spark.read.format(FLOOR if floor else "bkeeper")
            if floor and args.get("floor_rows"):
                reader = reader.option("rows", args["floor_rows"])
            if not floor:
                reader = reader.option("metadata", args["uri"]).option("log", args["log"])
            frame = reader.load()
            phases.end("load()")
            query = frame.selectExpr("count(*) AS n", "sum(length(payload)) AS b")
            query.first()  # (not _count: its partition count would plan the read once more)
            phases.end("first query")
            for run in range(args["warm_runs"]):
                query.first()
                phases.end(f"warm query {run + 1}")
        else:
            query = _cold_stream(spark, args, floor)
            phases.end("start()")
            progress = _first_progress_with_rows(query)
            phases.end("first batch")
            first_batch = {k: int(v) for k, v in progress["durationMs"].items()}
            query.stop()
    finally:
        spark.stop()
    return {"phases": phases.done, "first_batch_ms": first_batch}


#: The floor source's short name (as :data:`bkeeper.spark.floor.FLOOR_NAME`; not imported at
#: the top, so this module does not import pyspark).
FLOOR = "bkeeper-floor"


def _cold_stream(spark: Any, args: dict[str, Any], floor: bool) -> Any:
    if floor:
        frame = spark.readStream.format(FLOOR).load().select("payload")
        writer = frame.writeStream.format(FLOOR)
    else:
        frame = (
            spark.readStream.format("bkeeper")
            .option("metadata", args["uri"])
            .option("log", args["src"])
            .option("startingPosition", "earliest")
            .load()
            .select("payload")
        )
        writer = (
            frame.writeStream.format("bkeeper")
            .option("metadata", args["uri"])
            .option("log", args["dst"])
        )
    return (
        writer.option("checkpointLocation", args["checkpoint"])
        .trigger(processingTime="0 milliseconds")
        .start()
    )


def _first_progress_with_rows(query: Any) -> Any:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if query.exception() is not None:
            raise query.exception()
        for progress in query.recentProgress:
            if progress["numInputRows"]:
                return progress
        time.sleep(0.01)
    raise TimeoutError("the streaming query made no progress in 300 s")


def main(argv: list[str] | None = None) -> None:
    """``python -m bkeeper.spark.bench '<json>'``: one cold-start run (``--cold-start`` starts
    these); prints its phases as one JSON line."""
    import json
    import sys

    args = json.loads((argv if argv is not None else sys.argv[1:])[0])
    print(json.dumps(_cold_child(args)), flush=True)


if __name__ == "__main__":
    main()
