"""``bkeeper bench restart``: seconds until a bookie holding a lot of data is ready again
after a SIGTERM and after a kill -9 (docs/benchmarks.md, docs/storage.md *Clean stop*)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import click
from rich.table import Table

from bkeeper.cli.bench._common import MIB, bookie_options, console, parse_size, phase_bars, progress
from bkeeper.common.errors import ConfigError
from bkeeper.testing.benchmarks import free_port
from bkeeper.testing.benchmarks.restart import RestartBenchOutcome, RestartBenchPlan, bench_restart

__all__ = ["restart_bench"]

#: The target: a bookie stopped with SIGTERM is ready again within this long.
READY_S_TARGET = 2.0


@click.command("restart")
@click.option("--data-size", default="1G", show_default=True, help="Entry-log bytes to fill.")
@click.option("--entry-size", default="1K", show_default=True, help="Bytes per entry.")
@click.option("--runs", default=3, show_default=True, type=click.IntRange(1))
@click.option(
    "--load-seconds",
    default=5.0,
    show_default=True,
    type=click.FloatRange(0),
    help="Adds before each kill -9 (what its restart replays).",
)
@click.option("--metadata", "metadata_uri", default="", help="A cluster to register in.")
@click.option("--data-dir", default=None, help="The bookie's data directory (a temp dir).")
@click.option("--port", default=0, type=click.IntRange(0, 65535), help="Bookie port (0: free).")
@bookie_options("A bookie option (repeatable), as for `bkeeper bookie -o`.")
def restart_bench(
    data_size: str,
    entry_size: str,
    runs: int,
    load_seconds: float,
    metadata_uri: str,
    data_dir: str | None,
    port: int,
    options: tuple[str, ...],
) -> None:
    """Fill a bookie, then time its restarts after SIGTERM and after kill -9."""
    from bkeeper.common.loop import run_event_loop

    try:
        plan = RestartBenchPlan(
            data_bytes=parse_size(data_size),
            entry_bytes=parse_size(entry_size),
            runs=runs,
            load_s=load_seconds,
        )
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    extra = tuple(arg for option in options for arg in ("-o", option))
    with tempfile.TemporaryDirectory(prefix="bkeeper-bench-restart-") as tmp:
        root = Path(data_dir) if data_dir else Path(tmp) / "bookie"
        with progress() as bar:
            outcome = run_event_loop(
                bench_restart(
                    root, port or free_port(), plan, metadata_uri or None, extra, phase_bars(bar)
                )
            )
    _print(outcome)
    worst = max(run.ready_s for run in outcome.runs if run.signal == "SIGTERM")
    if worst > READY_S_TARGET:
        raise click.ClickException(
            f"a restart after SIGTERM took {worst:.2f} s to be ready (target {READY_S_TARGET} s)"
        )


def _print(outcome: RestartBenchOutcome) -> None:
    table = Table(
        title=(
            f"bkeeper bench restart: {outcome.data_bytes / MIB:,.0f} MiB of entry logs, "
            f"{outcome.entries:,} entries (filled in {outcome.fill_s:.0f} s)"
        )
    )
    for column in ("signal", "stop s", "ready s (start)", "ready s (signal)", "storage open s"):
        table.add_column(column, justify="right")
    table.add_column("open did", justify="left")
    for run in outcome.runs:
        opened = "-" if run.storage_open_s is None else f"{run.storage_open_s:.2f}"
        table.add_row(
            run.signal,
            f"{run.stop_s:.2f}",
            f"{run.ready_s:.2f}",
            f"{run.total_s:.2f}",
            opened,
            run.open_said,
        )
    console().print(table)
