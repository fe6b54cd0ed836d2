"""``bkeeper bench spark --cold-start``: the first queries of new JVMs beside Spark's floor for
a Python source (:mod:`bkeeper.spark.floor`). Each run is ``python -m bkeeper.spark.bench_cold
'<json>'``, a new process and so a new JVM; it prints its phases (wall and CPU seconds of its
process tree) as one JSON line.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from bkeeper.common.clock import SystemClock
from bkeeper.spark.bench import create_logs, produce

__all__ = ["COLD_KINDS", "ColdPhase", "ColdStartRun", "bench_spark_cold_start"]

_CLOCK = SystemClock()

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
        asyncio.run(create_logs(uri, [src, dst]))
        checkpoint, floor_checkpoint = f"{scratch}/cold-{suffix}", f"{scratch}/floor-{suffix}"
        for kind in kinds:
            if kind in ("stream", "restart"):
                asyncio.run(produce(uri, src, COLD_STREAM_RECORDS * 10, 0.1))
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

    started = _CLOCK.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "bkeeper.spark.bench_cold", json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=COLD_CHILD_TIMEOUT_S,
        check=False,
    )
    process_s = _CLOCK.monotonic() - started
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
        self._wall, self._cpu = _CLOCK.monotonic(), _tree_cpu_s()

    def end(self, name: str) -> None:
        wall, cpu = _CLOCK.monotonic(), _tree_cpu_s()
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
    deadline = _CLOCK.monotonic() + 300
    while _CLOCK.monotonic() < deadline:
        if query.exception() is not None:
            raise query.exception()
        for progress in query.recentProgress:
            if progress["numInputRows"]:
                return progress
        time.sleep(0.01)
    raise TimeoutError("the streaming query made no progress in 300 s")


def main(argv: list[str] | None = None) -> None:
    """``python -m bkeeper.spark.bench_cold '<json>'``: one cold-start run (``--cold-start`` starts
    these); prints its phases as one JSON line."""
    import json
    import sys

    args = json.loads((argv if argv is not None else sys.argv[1:])[0])
    print(json.dumps(_cold_child(args)), flush=True)


if __name__ == "__main__":
    main()
