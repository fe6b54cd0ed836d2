"""``bkeeper bench storage | connection | index``: one component of the bookie alone (the
storage engine, a connection's frame handling, candidate location indexes), no network."""

from __future__ import annotations

import asyncio
import tempfile

import click
from rich.table import Table

from bkeeper.cli.bench._common import console, print_results, progress
from bkeeper.testing.benchmarks.connection_chunks import (
    SHAPES,
    ChunkShape,
    ConnectionResult,
    bench_connection_chunks,
)
from bkeeper.testing.benchmarks.index_engines import (
    CANDIDATES,
    ID_PATTERNS,
    IndexEngineResult,
    bench_index_engines,
    index_keys,
)
from bkeeper.testing.benchmarks.storage_adds import bench_storage_adds

__all__ = ["connection_bench", "index_bench", "storage_bench"]


@click.command("storage")
@click.option("--count", default=200_000, show_default=True, type=click.IntRange(1))
@click.option(
    "--entry-size",
    default=1024,
    show_default=True,
    type=click.IntRange(0),
    help="Bytes per entry body (at least its 32-byte header).",
)
@click.option(
    "--burst",
    default=64,
    show_default=True,
    type=click.IntRange(1),
    help="Adds made in a row before the other threads get the interpreter.",
)
@click.option(
    "--dir",
    "directory",
    default=tempfile.gettempdir,
    show_default="the temporary directory",
    type=click.Path(exists=True, file_okay=False, writable=True),
    help="Where the fresh data directory goes (removed afterwards).",
)
def storage_bench(count: int, entry_size: int, burst: int, directory: str) -> None:
    """Acknowledged (fsynced) adds/s and journal fsyncs/s of the storage engine alone, one
    ledger, on the real filesystem."""
    with progress() as bar:
        task = bar.add_task("adding", total=count)
        result = bench_storage_adds(
            directory,
            count,
            entry_size,
            burst,
            progress=lambda made: bar.update(task, completed=made, refresh=True),
        )
    print_results([result], "adds")


@click.command("connection")
@click.option(
    "--frames",
    default=20_000,
    show_default=True,
    type=click.IntRange(1),
    help="Frames per round and shape.",
)
@click.option(
    "--rounds",
    default=7,
    show_default=True,
    type=click.IntRange(1),
    help="Rounds per shape; the best counts.",
)
def connection_bench(frames: int, rounds: int) -> None:
    """Nanoseconds per 1 KiB v2 ADD frame through a bookie connection's frame handling
    (no storage, no socket), for frames arriving whole, split and 64 to a chunk."""
    with progress() as bar:
        task = bar.add_task("chunk shapes", total=len(SHAPES))

        def shape_done(_: ChunkShape) -> None:
            bar.advance(task)
            bar.refresh()

        # asyncio's own loop, not uvloop: as the figures in docs/benchmarks.md were taken.
        results = asyncio.run(bench_connection_chunks(frames, rounds, shape_done))
    _print_connection(results)


def _print_connection(results: list[ConnectionResult]) -> None:
    table = Table(title="bkeeper bench connection: 1 KiB v2 ADD frames, best round")
    for column in ("shape", "frames", "rounds", "ns/frame", "frames/s"):
        table.add_column(column, justify="left" if column == "shape" else "right")
    for r in results:
        table.add_row(
            r.shape.label,
            f"{r.frames:,}",
            str(r.rounds),
            f"{r.best_ns_per_frame:,.0f}",
            f"{r.frames_per_s:,.0f}",
        )
    console().print(table)


@click.command("index")
@click.option(
    "--count",
    default=1_000_000,
    show_default=True,
    type=click.IntRange(1),
    help="Locations stored (at least --ledgers).",
)
@click.option("--ledgers", default=100, show_default=True, type=click.IntRange(1))
@click.option(
    "--ids",
    type=click.Choice(sorted(ID_PATTERNS)),
    default="dense",
    show_default=True,
    help="Entry ids of each ledger: dense from 0, every 3rd, random 63-bit, dense from 2^20.",
)
def index_bench(count: int, ledgers: int, ids: str) -> None:
    """Puts/s, gets/s, bytes on disk and memory of candidate location-index engines
    (lmdb and rocksdict are skipped when not installed)."""
    if count < ledgers:
        raise click.BadParameter(
            f"{count} is fewer than --ledgers {ledgers}", param_hint="'--count'"
        )
    keys, lookups = index_keys(count, ledgers, ids)
    with progress() as bar:
        task = bar.add_task("engines", total=len(CANDIDATES))

        def started(name: str) -> None:
            bar.update(task, description=name, completed=list(CANDIDATES).index(name), refresh=True)

        results = bench_index_engines(keys, lookups, started)
    _print_index(results, f"{len(keys):,} locations in {ledgers} ledgers, {ids} entry ids")


def _print_index(results: list[IndexEngineResult], title: str) -> None:
    table = Table(title=f"bkeeper bench index: {title}")
    for column in ("engine", "puts/s", "gets/s", "disk MB", "memory MB", "note"):
        table.add_column(column, justify="left" if column in ("engine", "note") else "right")
    for r in results:
        if r.skipped:
            table.add_row(r.name, "-", "-", "-", "-", f"skipped: {r.skipped}")
            continue
        table.add_row(
            r.name,
            f"{r.puts_per_s:,.0f}",
            f"{r.gets_per_s:,.0f}",
            f"{r.disk_bytes / 1e6:.1f}",
            f"{r.memory_bytes / 1e6:.1f}",
            "",
        )
    console().print(table)
