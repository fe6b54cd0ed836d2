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


@click.command("spark")
@METADATA
@click.option("--log", "log_name", default="bench-spark", show_default=True)
@_RECORDS
@click.option("--record-size", default=100, show_default=True, type=click.IntRange(0))
@click.option("--runs", default=3, show_default=True, type=click.IntRange(1))
@click.option("--master", default="local[2]", show_default=True)
@click.option("--max-entries-per-split", default=100_000, show_default=True,
              type=click.IntRange(1))  # fmt: skip
def spark_bench(
    metadata_uri: str,
    log_name: str,
    records: int,
    record_size: int,
    runs: int,
    master: str,
    max_entries_per_split: int,
) -> None:
    """Rows/s of a Spark batch read of a named log (filled first to --records records)."""
    from bkeeper.cli.bookie import run_event_loop
    from bkeeper.spark.bench import bench_spark_read, fill_log

    with cluster(metadata_uri, 3) as uri:
        appended, seconds = run_event_loop(fill_log(uri, log_name, records, record_size))
        results = []
        if appended:
            results.append(BenchResult("fill log (append)", appended, seconds,
                                       appended * record_size))  # fmt: skip
        runs_done = bench_spark_read(
            uri, log_name, runs=runs, master=master, max_entries_per_split=max_entries_per_split
        )
        for index, run in enumerate(runs_done):
            name = f"spark read {master}, {run.partitions} partitions, run {index + 1}"
            results.append(BenchResult(name, run.rows, run.seconds, run.bytes))
        print_results(results, "rows")


@click.command("cpu-split")
@METADATA
@click.option("--log", "log_name", default="bench-spark", show_default=True)
@_RECORDS
@click.option("--record-size", default=100, show_default=True, type=click.IntRange(0),
              help="Size of the records added by the fill.")  # fmt: skip
@click.option("--runs", default=3, show_default=True, type=click.IntRange(1))
@click.option("--master", default="local[2]", show_default=True)
def cpu_split_bench(
    metadata_uri: str, log_name: str, records: int, record_size: int, runs: int, master: str
) -> None:
    """CPU seconds per process on this machine while Spark reads a named log --runs times
    (after one read to warm up): the Python workers, the JVM, the bookies. Linux only."""
    from bkeeper.cli.bookie import run_event_loop
    from bkeeper.spark.bench import fill_log
    from bkeeper.spark.session import local_session

    results = []
    with cluster(metadata_uri, 3) as uri:
        appended, seconds = run_event_loop(fill_log(uri, log_name, records, record_size))
        if appended:
            results.append(BenchResult("fill log (append)", appended, seconds,
                                       appended * record_size))  # fmt: skip
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
