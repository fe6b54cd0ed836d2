"""Stream a bkeeper log into Parquet files and into another bkeeper log.

Both queries read the source log from its first record and keep tailing it; each has its
own checkpoint, so a restart resumes where it stopped. The copy into the other log is
exactly once (a replayed micro-batch is recognised and not appended twice); Parquet's file
sink is exactly once too. ``--available-now`` copies what is there and stops.

    python examples/stream_copy.py --metadata zk://127.0.0.1:2181/ledgers \\
        --source dice --target dice-copy --parquet /tmp/dice-parquet --checkpoints /tmp/ck
"""

from __future__ import annotations

import argparse
import signal
import threading
import time
from pathlib import Path
from typing import Any


def start_copies(
    spark: Any,
    metadata: str,
    source: str,
    target: str,
    parquet: str,
    checkpoints: str,
    *,
    available_now: bool = False,
    max_entries_per_trigger: int = 100_000,
) -> list[Any]:
    """Start the two streaming queries; returns them (running)."""
    records = (
        spark.readStream.format("bkeeper")
        .option("metadata", metadata)
        .option("log", source)
        .option("startingPosition", "earliest")
        .option("maxEntriesPerTrigger", max_entries_per_trigger)
        .load()
    )

    def trigger(writer: Any) -> Any:
        if available_now:
            return writer.trigger(availableNow=True)
        return writer.trigger(processingTime="1 second")

    to_parquet = trigger(
        records.writeStream.queryName(f"{source} to parquet")
        .format("parquet")
        .option("path", parquet)
        .option("checkpointLocation", str(Path(checkpoints) / "parquet"))
    ).start()
    to_log = trigger(
        records.select("payload", "key")
        .writeStream.queryName(f"{source} to {target}")
        .format("bkeeper")
        .option("metadata", metadata)
        .option("log", target)
        .option("checkpointLocation", str(Path(checkpoints) / "log"))
    ).start()
    return [to_parquet, to_log]


def follow(
    queries: list[Any], stop: threading.Event, *, every_s: float = 5.0, out: Any = print
) -> None:
    """Print each query's progress (a line per new micro-batch, at most every ``every_s``)
    until ``stop`` is set or every query has ended; then stop the queries. A query that
    failed raises its error here."""
    shown: dict[int, int] = {}
    while not stop.wait(every_s):
        for index, query in enumerate(queries):
            progress = query.lastProgress
            if progress and progress["batchId"] != shown.get(index):
                shown[index] = progress["batchId"]
                rate = progress.get("processedRowsPerSecond") or 0.0
                out(
                    f"{query.name or f'query {index}'}: batch {progress['batchId']}, "
                    f"{progress['numInputRows']} rows ({rate:,.0f} rows/s)",
                    flush=True,
                )
        if not any(query.isActive for query in queries):
            break
    for query in queries:
        stop_between_batches(query)
    for query in queries:
        error = query.exception()
        if error is not None:
            # (a StreamingQueryException has no ``desc``: that raised AttributeError here)
            lines = str(error).strip().splitlines() or [type(error).__name__]
            raise RuntimeError(f"{query.name}: {lines[0]}")


def stop_between_batches(query: Any, wait_s: float = 60.0) -> None:
    """Stop ``query`` once its running micro-batch (if any) is done, within ``wait_s``:
    stopping mid-batch aborts the batch's tasks, which is safe (it is replayed on restart)
    but noisy."""
    deadline = time.monotonic() + wait_s
    while query.isActive and query.status["isTriggerActive"] and time.monotonic() < deadline:
        time.sleep(0.02)
    query.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--metadata", default="zk://127.0.0.1:2181/ledgers")
    parser.add_argument("--source", default="dice")
    parser.add_argument("--target", default="dice-copy")
    parser.add_argument("--parquet", default="./dice-parquet")
    parser.add_argument("--checkpoints", default="./dice-checkpoints")
    parser.add_argument("--available-now", action="store_true")
    parser.add_argument("--progress-every", type=float, default=5.0, help="seconds")
    args = parser.parse_args()

    from bkeeper.spark.session import local_session

    spark = local_session("local[2]", "stream-copy")
    # Ctrl-C and SIGTERM only ask the loop in follow() to stop: a KeyboardInterrupt raised
    # inside a py4j call would tear the connection to the JVM (pages of py4j tracebacks).
    # Installed after the session starts, which installs a handler of its own that raises.
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, frame: stop.set())
    try:
        queries = start_copies(
            spark, args.metadata, args.source, args.target, args.parquet, args.checkpoints,
            available_now=args.available_now,
        )  # fmt: skip
        print(f"copying {args.source} to {args.target} and {args.parquet}; Ctrl-C stops",
              flush=True)  # fmt: skip
        follow(queries, stop, every_s=args.progress_every)
        print("stopped", flush=True)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
