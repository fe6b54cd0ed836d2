"""``bkeeper bench ...``: benchmarks, printed as tables (record them in docs/benchmarks.md)."""

from __future__ import annotations

import click
from rich.console import Console
from rich.table import Table

from bkeeper.testing.benchmarks import (
    BenchResult,
    bench_bookie_adds,
    bench_codec,
    local_bookie,
)
from bkeeper.wire.codes import Protocol
from bkeeper.wire.digest import DigestType

__all__ = ["bench"]


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
        host, _, port = address.rpartition(":")
        run_event_loop(run(host, int(port)))
    else:
        with local_bookie(data_dir) as (host, port):
            run_event_loop(run(host, port))
