"""``bkeeper bench ...``: benchmarks, printed as tables (record them in docs/benchmarks.md)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from bkeeper.testing.benchmarks import (
    BenchResult,
    bench_bookie_adds,
    bench_client_reads,
    bench_client_writes,
    bench_codec,
    bench_log,
    delete_ledger,
    free_port,
    free_port_range,
    local_bookie,
    local_bookie_process,
)
from bkeeper.testing.fuzz import FuzzConfig, FuzzReport, run_fuzz
from bkeeper.testing.sandbox import Sandbox, SandboxConfig
from bkeeper.wire.codes import Protocol
from bkeeper.wire.digest import DigestType

__all__ = ["bench"]

MIB = 1024 * 1024


def _print(results: list[BenchResult], unit: str) -> None:
    table = Table(title="bkeeper bench")
    for column in (
        "workload",
        "ops",
        "seconds",
        f"{unit}/s",
        "MB/s",
        "p50 ms",
        "p99 ms",
        "p99.9 ms",
    ):
        table.add_column(column, justify="right" if column != "workload" else "left")
    for r in results:
        lat = r.latency_ms()
        table.add_row(
            r.name,
            f"{r.operations:,}",
            f"{r.seconds:.2f}",
            f"{r.rate:,.0f}",
            f"{r.mb_per_s:.1f}" if r.bytes else "-",
            f"{lat['p50']:.3f}" if lat else "-",
            f"{lat['p99']:.3f}" if lat else "-",
            f"{lat['p99.9']:.3f}" if lat else "-",
        )
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)
    console.print(table)


_BENCH_METADATA = click.option(
    "--metadata",
    "metadata_uri",
    default=lambda: os.environ.get("BKEEPER_METADATA", ""),
    show_default="$BKEEPER_METADATA, else a sandbox of its own",
    help="Cluster URI.",
)
_KEEP = click.option(
    "--keep", is_flag=True, help="Keep what the benchmark wrote (default: delete it after)."
)


@click.group()
def bench() -> None:
    """Benchmarks."""


@bench.command()
@click.option("--count", default=200_000, show_default=True, type=click.IntRange(1))
@click.option("--entry-size", default=1024, show_default=True, type=click.IntRange(0))
@click.option(
    "--digest",
    default="crc32c",
    show_default=True,
    type=click.Choice(["crc32", "crc32c", "hmac", "dummy"]),
)
def codec(count: int, entry_size: int, digest: str) -> None:
    """Encode+decode rate of ADD_ENTRY requests (with digest) and responses, v2 and v3."""
    digest_type = DigestType.parse(digest)
    results: list[BenchResult] = []
    for protocol in (Protocol.V2, Protocol.V3):
        results.extend(bench_codec(protocol, count, entry_size, digest_type))
    _print(results, "msg")


@bench.command("bookie")
@click.option("--address", default="", help="host:port of a running bookie (default: start one).")
@click.option("--data-dir", default=None, help="Data directory of the bookie started here.")
@click.option("--protocol", type=click.Choice(["v2", "v3"]), default="v2", show_default=True)
@click.option("--entry-size", default=1024, show_default=True, type=click.IntRange(0))
@click.option("--duration", default=10.0, show_default=True, type=click.FloatRange(0.1))
@click.option("--in-flight", default=2000, show_default=True, type=click.IntRange(1))
@click.option("--rate", default=None, type=click.FloatRange(1), help="Open-loop adds/s.")
def bookie_bench(
    address: str,
    data_dir: str | None,
    protocol: str,
    entry_size: int,
    duration: float,
    in_flight: int,
    rate: float | None,
) -> None:
    """Acknowledged (fsynced) adds/s, MB/s and latency against one bookie."""
    from bkeeper.cli.bookie import run_event_loop

    proto = Protocol.V2 if protocol == "v2" else Protocol.V3

    async def run(host: str, port: int) -> None:
        result = await bench_bookie_adds(
            host,
            port,
            protocol=proto,
            entry_bytes=entry_size,
            duration_s=duration,
            in_flight=in_flight,
            rate=rate,
        )
        _print([result], "adds")

    if address:
        host, _, port_text = address.rpartition(":")
        if not host or not port_text.isdigit():
            raise click.BadParameter(f"{address!r} is not host:port", param_hint="--address")
        run_event_loop(run(host, int(port_text)))
    else:
        with local_bookie(data_dir) as (host, port):
            run_event_loop(run(host, port))


@contextlib.contextmanager
def _cluster(metadata_uri: str, bookies: int) -> Iterator[str]:
    """The given cluster, or a sandbox of ``bookies`` bookies in a temporary directory."""
    if metadata_uri:
        yield metadata_uri
        return
    with tempfile.TemporaryDirectory(prefix="bkeeper-bench-") as tmp:
        config = SandboxConfig(
            data_dir=Path(tmp),
            bookies=bookies,
            zookeeper_port=free_port(),
            bookie_port_base=free_port_range(bookies),
        )
        with Sandbox(config) as box:
            yield box.metadata_uri


@bench.command("write")
@_BENCH_METADATA
@click.option("--ensemble", default=3, show_default=True, type=click.IntRange(1))
@click.option("--write-quorum", default=3, show_default=True, type=click.IntRange(1))
@click.option("--ack-quorum", default=2, show_default=True, type=click.IntRange(1))
@click.option("--entry-size", default=1024, show_default=True, type=click.IntRange(0))
@click.option("--duration", default=10.0, show_default=True, type=click.FloatRange(0.1))
@click.option("--in-flight", default=1000, show_default=True, type=click.IntRange(1))
@click.option("--rate", default=None, type=click.FloatRange(1), help="Open-loop entries/s.")
@click.option("--protocol", type=click.Choice(["v2", "v3"]), default="v2", show_default=True)
@click.option("--read", "also_read", is_flag=True, help="Read the ledger back afterwards.")
@_KEEP
def write_bench(
    metadata_uri: str,
    ensemble: int,
    write_quorum: int,
    ack_quorum: int,
    entry_size: int,
    duration: float,
    in_flight: int,
    rate: float | None,
    protocol: str,
    also_read: bool,
    keep: bool,
) -> None:
    """Acknowledged entries/s, MB/s and latency of one client writing one ledger."""
    from bkeeper.cli.bookie import run_event_loop

    proto = Protocol.V2 if protocol == "v2" else Protocol.V3

    async def run(uri: str) -> list[BenchResult]:
        result, ledger_id = await bench_client_writes(
            uri,
            ensemble=ensemble,
            write_quorum=write_quorum,
            ack_quorum=ack_quorum,
            entry_bytes=entry_size,
            duration_s=duration,
            in_flight=in_flight,
            rate=rate,
            protocol=proto,
        )
        results = [result]
        try:
            if also_read:
                results.append(await bench_client_reads(uri, ledger_id))
        finally:
            if not keep:
                await delete_ledger(uri, ledger_id)
        return results

    with _cluster(metadata_uri, ensemble) as uri:
        _print(run_event_loop(run(uri)), "entries")


@bench.command("read")
@_BENCH_METADATA
@click.option("--ledger", "ledger_id", type=click.IntRange(0), help="Ledger to read (default: "
              "write one of --entries entries first).")  # fmt: skip
@click.option("--password", default="bench", show_default=True, help="Password of --ledger.")
@click.option("--entries", default=100_000, show_default=True, type=click.IntRange(1))
@click.option("--entry-size", default=1024, show_default=True, type=click.IntRange(0))
@_KEEP
def read_bench(
    metadata_uri: str,
    ledger_id: int | None,
    password: str,
    entries: int,
    entry_size: int,
    keep: bool,
) -> None:
    """Entries/s and MB/s of one client reading a whole ledger (opened with recovery)."""
    from bkeeper.cli.bookie import run_event_loop

    async def run(uri: str) -> list[BenchResult]:
        target = ledger_id
        results = []
        if target is None:
            written, target = await bench_client_writes(
                uri,
                ensemble=3,
                write_quorum=3,
                ack_quorum=2,
                entry_bytes=entry_size,
                duration_s=3600.0,
                in_flight=1000,
                count=entries,
            )
            results.append(written)
        try:
            results.append(await bench_client_reads(uri, target, password.encode()))
        finally:
            if ledger_id is None and not keep:  # only the ledger written here
                await delete_ledger(uri, target)
        return results

    with _cluster(metadata_uri, 3) as uri:
        _print(run_event_loop(run(uri)), "entries")


@bench.command("log")
@_BENCH_METADATA
@click.option("--entry-size", default=100, show_default=True, type=click.IntRange(0))
@click.option("--duration", default=10.0, show_default=True, type=click.FloatRange(0.1))
@click.option("--in-flight", default=1000, show_default=True, type=click.IntRange(1))
@click.option(
    "--rate",
    default=1000.0,
    show_default=True,
    type=click.FloatRange(1),
    help="Open-loop appends/s (a large rate measures the maximum).",
)
def log_bench(
    metadata_uri: str, entry_size: int, duration: float, in_flight: int, rate: float
) -> None:
    """Named-log append rate and tail latency (append to visible at a tailing reader)."""
    from bkeeper.cli.bookie import run_event_loop

    with _cluster(metadata_uri, 3) as uri:
        results = run_event_loop(
            bench_log(
                uri, entry_bytes=entry_size, duration_s=duration, in_flight=in_flight, rate=rate
            )
        )
        _print(results, "records")


@bench.command("spark")
@_BENCH_METADATA
@click.option("--log", "log_name", default="bench-spark", show_default=True)
@click.option("--records", default=1_000_000, show_default=True, type=click.IntRange(1))
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

    with _cluster(metadata_uri, 3) as uri:
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
        _print(results, "rows")


@bench.command("fuzz")
@click.option("--duration", default=30.0, show_default=True, type=click.FloatRange(0.5),
              help="Seconds of fuzzing (the checks after it take a few more).")  # fmt: skip
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--bookie", "address", default="", help="host:port of a running bookie "
              "(default: start one).")  # fmt: skip
@click.option("--pid", type=click.IntRange(1), default=None,
              help="Pid of the --bookie process, to sample its RSS.")  # fmt: skip
@click.option("--streams", default=FuzzConfig.streams, show_default=True, type=click.IntRange(0))
@click.option("--closers", default=FuzzConfig.closers, show_default=True, type=click.IntRange(0))
@click.option("--partial-connections", default=FuzzConfig.partial_connections,
              show_default=True, type=click.IntRange(0))  # fmt: skip
@click.option("--idle-connections", default=FuzzConfig.idle_connections, show_default=True,
              type=click.IntRange(0))  # fmt: skip
@click.option("--rss-growth-mib-max", default=FuzzConfig.rss_growth_bytes_max // MIB,
              show_default=True, type=click.IntRange(1))  # fmt: skip
def fuzz_bench(
    duration: float,
    seed: int,
    address: str,
    pid: int | None,
    streams: int,
    closers: int,
    partial_connections: int,
    idle_connections: int,
    rss_growth_mib_max: int,
) -> None:
    """Random, truncated, oversized and garbage frames of every opcode at a bookie, which
    must keep serving with flat memory; exits 1 if it did not."""
    from bkeeper.cli.bookie import run_event_loop

    def config(host: str, port: int, bookie_pid: int | None) -> FuzzConfig:
        return FuzzConfig(
            host=host,
            port=port,
            duration_s=duration,
            seed=seed,
            pid=bookie_pid,
            streams=streams,
            closers=closers,
            partial_connections=partial_connections,
            idle_connections=idle_connections,
            rss_growth_bytes_max=rss_growth_mib_max * MIB,
        )

    if address:
        host, _, port_text = address.rpartition(":")
        if not host or not port_text.isdigit():
            raise click.BadParameter(f"{address!r} is not host:port", param_hint="--bookie")
        report = run_event_loop(run_fuzz(config(host, int(port_text), pid)))
        log_text = None
    else:
        with tempfile.TemporaryDirectory(prefix="bkeeper-fuzz-") as tmp:
            log_path = str(Path(tmp) / "bookie.log")
            with local_bookie_process(str(Path(tmp) / "data"), log_path=log_path) as started:
                host, port, proc = started
                report = run_event_loop(run_fuzz(config(host, port, proc.pid)))
            log_text = Path(log_path).read_text(errors="replace")
    _print_fuzz(report, log_text)
    if not report.ok:
        raise SystemExit(1)


def _print_fuzz(report: FuzzReport, log_text: str | None) -> None:
    table = Table(title="bkeeper bench fuzz: frames sent")
    table.add_column("kind")
    table.add_column("frames", justify="right")
    for kind, count in sorted(report.kinds.items(), key=lambda item: -item[1]):
        table.add_row(kind, f"{count:,}")
    table.add_row("all", f"{report.frames:,}")
    console = Console() if Console().is_terminal else Console(width=160)
    console.print(table)

    def mib(value: int | None) -> str:
        return "-" if value is None else f"{value / MIB:,.0f} MiB"

    lines = [
        f"{report.frames:,} frames in {report.seconds:.1f} s ({report.rate:,.0f}/s), "
        f"{report.responses:,} responses counted, {report.connections:,} connections",
        f"connections closed by the bookie: {report.closed_after_fatal:,} after a fatal frame "
        f"or the client's end, {report.partial_closed_by_bookie:,} holding an incomplete "
        f"frame, {report.idle_closed_by_bookie:,} idle",
        f"bookie RSS: start {mib(report.rss_start)}, peak {mib(report.rss_peak)}, "
        f"end {mib(report.rss_end)}",
        f"round trip after the run: {'ok' if report.served_after else 'FAILED'}",
    ]
    if log_text is not None:
        tracebacks = log_text.count("Traceback")
        lines.append(
            f"bookie log: {len(log_text.splitlines()):,} lines, {len(log_text):,} bytes, "
            f"{tracebacks} tracebacks"
        )
        if tracebacks:
            report.failures.append(f"the bookie logged {tracebacks} tracebacks")
    for failure in report.failures:
        lines.append(f"FAILED: {failure}")
    for line in lines:
        console.print(line, highlight=False)
