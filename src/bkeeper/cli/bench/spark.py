"""``bkeeper bench spark | cpu-split``: a Spark batch read of a named log, its rows/s and
which processes its CPU time goes to. Spark is imported only when a command runs."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from bkeeper.cli.bench._common import METADATA, cluster, console, print_results, progress
from bkeeper.testing.benchmarks import BenchResult
from bkeeper.testing.benchmarks.cpu_split import CpuSplit, measure_cpu_split

__all__ = ["cpu_split_bench", "spark_bench"]

_RECORDS = click.option(
    "--records",
    default=1_000_000,
    show_default=True,
    type=click.IntRange(1),
    help="Fill the log first up to this many records (none are added if it has them).",
)


_BATCH_RECORDS = click.option(
    "--batch-records",
    default=1_000,
    show_default=True,
    type=click.IntRange(1),
    help="Records per entry (record batches) when filling the log; 1: one record per entry. "
    "The log is named after it (LOG-bN), so each size keeps its own.",
)


@click.command("spark")
@METADATA
@click.option("--log", "log_name", default="bench-spark", show_default=True)
@_RECORDS
@click.option("--record-size", default=100, show_default=True, type=click.IntRange(0))
@_BATCH_RECORDS
@click.option("--runs", default=3, show_default=True, type=click.IntRange(1))
@click.option("--master", default="local[2]", show_default=True)
@click.option("--max-entries-per-split", default=100_000, show_default=True, type=click.IntRange(1))
@click.option(
    "--vs-parquet",
    is_flag=True,
    help="Also read the same payloads from Parquet, side by side in each run.",
)
@click.option(
    "--payload-only",
    is_flag=True,
    help="Read the log with the schema 'payload binary': the source returns that column "
    "alone (Spark's Python data sources prune no columns themselves).",
)
@click.option(
    "--latency",
    is_flag=True,
    help="Instead: append-to-visible latency of a stream copying a log to another.",
)
@click.option(
    "--cold-start",
    is_flag=True,
    help="Instead: each query in a new JVM (a new process): a batch read of the log cold, "
    "then warm; a stream's first batch after start and after a restart from its "
    "checkpoint; the same on a Python source that does nothing (Spark's floor; its batch "
    "read yields --records ready rows). --runs rounds, side by side.",
)
@click.option(
    "--rate",
    default=2_000,
    show_default=True,
    type=click.IntRange(1),
    help="--latency: records appended per second.",
)
@click.option(
    "--seconds",
    default=10.0,
    show_default=True,
    type=click.FloatRange(0.5),
    help="--latency: how long to append.",
)
@click.option(
    "--trigger-ms",
    default=0,
    show_default=True,
    type=click.IntRange(0),
    help="--latency: the stream's processing-time trigger (0: back to back).",
)
def spark_bench(
    metadata_uri: str,
    log_name: str,
    records: int,
    record_size: int,
    batch_records: int,
    runs: int,
    master: str,
    max_entries_per_split: int,
    vs_parquet: bool,
    payload_only: bool,
    latency: bool,
    cold_start: bool,
    rate: int,
    seconds: float,
    trigger_ms: int,
) -> None:
    """Rows/s of a Spark batch read of a named log (filled first to --records records), or
    with --latency the latency of a stream from one log to another, or with --cold-start
    the first queries of new JVMs."""
    from bkeeper.common.loop import run_event_loop
    from bkeeper.spark.bench import bench_spark_read, fill_log

    if latency:
        _latency(metadata_uri, master, rate, seconds, trigger_ms)
        return
    if batch_records > 1:
        log_name = f"{log_name}-b{batch_records}"
    with cluster(metadata_uri, 3) as uri:
        filling = fill_log(uri, log_name, records, record_size, batch_records)
        appended, seconds = run_event_loop(filling)
        results = []
        if appended:
            results.append(
                BenchResult("fill log (append)", appended, seconds, appended * record_size)
            )
        if cold_start:
            if results:
                print_results(results, "rows")
            _cold_start(uri, log_name, master, runs, records)
            return
        runs_done = bench_spark_read(
            uri,
            log_name,
            runs=runs,
            master=master,
            max_entries_per_split=max_entries_per_split,
            vs_parquet=vs_parquet,
            payload_only=payload_only,
        )
        for index, run in enumerate(runs_done):
            read = "spark read, payload only" if payload_only else "spark read"
            name = f"{read} {master}, {run.partitions} partitions, run {index + 1}"
            results.append(BenchResult(name, run.rows, run.seconds, run.bytes))
            if run.parquet is not None:
                other = run.parquet
                name = f"parquet read {master}, {other.partitions} partitions, run {index + 1}"
                results.append(BenchResult(name, other.rows, other.seconds, other.bytes))
        print_results(results, "rows")


def _cold_start(uri: str, log_name: str, master: str, rounds: int, records: int) -> None:
    import tempfile

    from bkeeper.spark.bench_cold import COLD_KINDS, ColdStartRun, bench_spark_cold_start

    with tempfile.TemporaryDirectory(prefix="bkeeper-cold-") as scratch, progress() as bar:
        task = bar.add_task(
            f"cold starts ({len(COLD_KINDS)} new JVMs a round)", total=rounds * len(COLD_KINDS)
        )

        def done(run: ColdStartRun) -> None:
            bar.update(task, advance=1, refresh=True)

        runs = bench_spark_cold_start(
            uri,
            log_name,
            master=master,
            scratch=scratch,
            rounds=rounds,
            floor_rows=records,
            progress=done,
        )
    print_cold_start(runs, f"cold start, {master}, log {log_name}")


def print_cold_start(runs: list[Any], title: str) -> None:
    """One row per run: each phase's wall seconds (CPU seconds of the driver's process tree in
    brackets), then Spark's ``durationMs`` of a stream's first batch."""
    table = Table(title=title + " (wall s, [CPU s of the driver, its JVM and Python workers])")
    for column in (
        "run",
        "process s",
        "import pyspark",
        "JVM + session",
        "load() / start()",
        "first query / batch",
        "warm queries",
        "warm / first",
    ):
        table.add_column(column, justify="right")
    for run in runs:
        phases = {phase.name: phase for phase in run.phases}

        def cell(*names: str, phases: dict[str, Any] = phases) -> str:
            found = [phases[n] for n in names if n in phases]
            return f"{found[0].seconds:.2f} [{found[0].cpu_s:.1f}]" if found else ""

        warm = [p for p in run.phases if p.name.startswith("warm query")]
        first = phases.get("first query")
        ratio = f"{first.seconds / min(p.seconds for p in warm):.1f}x" if first and warm else ""
        table.add_row(
            run.kind,
            f"{run.process_s:.1f}",
            cell("import pyspark"),
            cell("JVM + session"),
            cell("load()", "start()"),
            cell("first query", "first batch"),
            " ".join(f"{p.seconds:.2f} [{p.cpu_s:.1f}]" for p in warm),
            ratio,
        )
    console().print(table)
    streams = [run for run in runs if run.first_batch_ms]
    if streams:
        keys = sorted({key for run in streams for key in run.first_batch_ms})
        phases_table = Table(title="a stream's first batch: Spark's durationMs")
        phases_table.add_column("run", justify="right")
        for key in keys:
            phases_table.add_column(key, justify="right")
        for run in streams:
            phases_table.add_row(run.kind, *(str(run.first_batch_ms.get(k, "")) for k in keys))
        console().print(phases_table)


def _latency(metadata_uri: str, master: str, rate: int, seconds: float, trigger_ms: int) -> None:
    import statistics
    import tempfile

    from bkeeper.spark.bench import PHASES, bench_spark_latency

    with cluster(metadata_uri, 3) as uri, tempfile.TemporaryDirectory() as scratch:
        run = bench_spark_latency(
            uri, rate=rate, seconds=seconds, master=master, trigger_ms=trigger_ms, scratch=scratch
        )
    seen = sorted(run.latencies_ms)
    if not seen:
        raise click.ClickException("no record reached the copy")

    def at(q: float) -> float:
        return seen[min(len(seen) - 1, int(q * len(seen)))]

    table = Table(title=f"stream {master}, trigger {trigger_ms} ms, {rate} records/s")
    for column in (
        "records",
        "seen",
        "batches",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "max ms",
        "restart s",
        "cold restart s",
    ):
        table.add_column(column, justify="right")
    table.add_row(
        str(run.appended),
        str(len(seen)),
        str(run.batches),
        f"{at(0.5):.0f}",
        f"{at(0.9):.0f}",
        f"{at(0.99):.0f}",
        f"{seen[-1]:.0f}",
        f"{run.restart_first_batch_s:.2f}",
        f"{run.cold_restart_first_batch_s:.2f}",
    )
    console().print(table)
    phases = Table(title="median ms per micro-batch (Spark's durationMs)")
    for phase in PHASES:
        phases.add_column(phase, justify="right")
    phases.add_row(*(f"{run.phases_ms[p]:.0f}" for p in PHASES))
    console().print(phases)
    click.echo(
        f"mean latency {statistics.fmean(seen):.0f} ms; restart: from start() of the "
        "query restarted from its checkpoint to its first batch, in the same session "
        "and in a new JVM (cold Python workers)"
    )


@click.command("cpu-split")
@METADATA
@click.option("--log", "log_name", default="bench-spark", show_default=True)
@_RECORDS
@click.option(
    "--record-size",
    default=100,
    show_default=True,
    type=click.IntRange(0),
    help="Size of the records added by the fill.",
)
@_BATCH_RECORDS
@click.option("--runs", default=3, show_default=True, type=click.IntRange(1))
@click.option("--master", default="local[2]", show_default=True)
def cpu_split_bench(
    metadata_uri: str,
    log_name: str,
    records: int,
    record_size: int,
    batch_records: int,
    runs: int,
    master: str,
) -> None:
    """CPU seconds per process on this machine while Spark reads a named log --runs times
    (after one read to warm up): the Python workers, the JVM, the bookies. Linux only."""
    from bkeeper.common.loop import run_event_loop
    from bkeeper.spark.bench import fill_log
    from bkeeper.spark.session import local_session

    results = []
    if batch_records > 1:
        log_name = f"{log_name}-b{batch_records}"
    with cluster(metadata_uri, 3) as uri:
        filling = fill_log(uri, log_name, records, record_size, batch_records)
        appended, seconds = run_event_loop(filling)
        if appended:
            results.append(
                BenchResult("fill log (append)", appended, seconds, appended * record_size)
            )
        spark = local_session(master, "bkeeper-cpu-split")
        try:

            def read() -> int:
                return _count_rows(spark, uri, log_name)

            with progress() as bar:
                task = bar.add_task(f"reading {log_name} (warm-up, then {runs})", total=runs + 1)
                read()
                bar.update(task, completed=1, refresh=True)
                split = measure_cpu_split(
                    read, runs, lambda done: bar.update(task, completed=done + 1, refresh=True)
                )
        finally:
            spark.stop()
    label = f"spark read {master}, {runs} run{'s' if runs > 1 else ''}"
    results.append(BenchResult(label, split.rows, split.seconds))
    print_results(results, "rows")
    _print_cpu_split(split)


def _count_rows(spark: Any, uri: str, log_name: str) -> int:
    """Read the whole log, every payload crossing into the JVM; the row count."""
    df = spark.read.format("bkeeper").option("metadata", uri).option("log", log_name).load()
    row = df.selectExpr("count(*) AS n", "sum(length(payload)) AS b").first()
    return int(row.n)


def _print_cpu_split(split: CpuSplit) -> None:
    table = Table(title=f"CPU seconds by process during {split.seconds:.2f} s of reads")
    table.add_column("pid", justify="right")
    table.add_column("CPU s", justify="right")
    table.add_column("CPU share", justify="right")
    table.add_column("command", no_wrap=True, overflow="ellipsis")
    total = sum(p.cpu_s for p in split.processes)
    for process in split.processes:
        share = process.cpu_s / total if total > 0 else 0.0
        table.add_row(str(process.pid), f"{process.cpu_s:.2f}", f"{share:.0%}", process.command)
    console().print(table)
