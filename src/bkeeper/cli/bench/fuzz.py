"""``bkeeper bench fuzz``: a bookie under random and hostile frames (the fuzzer is
``bkeeper.testing.fuzz``)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import click
from rich.table import Table

from bkeeper.cli.bench._common import MIB, console, parse_address, shows_elapsed
from bkeeper.testing.benchmarks import local_bookie_process
from bkeeper.testing.fuzz import FuzzConfig, FuzzReport, run_fuzz

__all__ = ["fuzz_bench"]


@click.command("fuzz")
@click.option(
    "--duration",
    default=30.0,
    show_default=True,
    type=click.FloatRange(0.5),
    help="Seconds of fuzzing (the checks after it take a few more).",
)
@click.option("--seed", default=0, show_default=True, type=int)
@click.option(
    "--bookie", "address", default="", help="host:port of a running bookie (default: start one)."
)
@click.option(
    "--pid",
    type=click.IntRange(1),
    default=None,
    help="Pid of the --bookie process, to sample its RSS.",
)
@click.option("--streams", default=FuzzConfig.streams, show_default=True, type=click.IntRange(0))
@click.option("--closers", default=FuzzConfig.closers, show_default=True, type=click.IntRange(0))
@click.option(
    "--partial-connections",
    default=FuzzConfig.partial_connections,
    show_default=True,
    type=click.IntRange(0),
)
@click.option(
    "--idle-connections",
    default=FuzzConfig.idle_connections,
    show_default=True,
    type=click.IntRange(0),
)
@click.option(
    "--rss-growth-mib-max",
    default=FuzzConfig.rss_growth_bytes_max // MIB,
    show_default=True,
    type=click.IntRange(1),
)
@shows_elapsed("fuzz")
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
    from bkeeper.common.loop import run_event_loop

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
        host, port = parse_address(address, "--bookie")
        report = run_event_loop(run_fuzz(config(host, port, pid)))
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
    out = console()
    out.print(table)

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
        out.print(line, highlight=False)
