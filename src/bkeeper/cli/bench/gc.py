"""``bkeeper bench gc``: disk space given back after ledgers are deleted (and, with
``--write-rate``, add latency while compaction runs)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import click
from rich.table import Table

from bkeeper.cli.bench._common import (
    MIB,
    bookie_options,
    console,
    parse_size,
    phase_bars,
    print_results,
    progress,
)
from bkeeper.testing.benchmarks import free_port, free_port_range
from bkeeper.testing.benchmarks.gc import GcBenchPlan, bench_gc
from bkeeper.testing.sandbox import Sandbox, SandboxConfig

__all__ = ["gc_bench"]


@click.command("gc")
@click.option("--bytes", "total", default="2G", show_default=True, help="Data to write.")
@click.option("--ledgers", default=1000, show_default=True, type=click.IntRange(1))
@click.option("--entry-size", default=4096, show_default=True, type=click.IntRange(64))
@click.option("--delete-fraction", default=0.9, show_default=True, type=click.FloatRange(0.0, 1.0))
@click.option(
    "--target-fraction",
    default=0.2,
    show_default=True,
    type=click.FloatRange(0.0, 1.0, min_open=True),
    help="Done when disk usage is below this fraction of the peak.",
)
@click.option("--gc-wait-ms", default=10_000, show_default=True, type=click.IntRange(100))
@click.option(
    "--compaction",
    type=click.Choice(["minor", "major"]),
    default="minor",
    show_default=True,
    help="The kind that runs at every GC pass (the other is off).",
)
@click.option(
    "--compaction-rate",
    default="64M",
    show_default=True,
    help="compaction_rate_bytes_per_s of the bookies (0: flat out).",
)
@click.option("--periods", default=4.0, show_default=True, type=click.FloatRange(1.0))
@click.option("--bookies", default=3, show_default=True, type=click.IntRange(1, 16))
@click.option(
    "--write-rate",
    default=None,
    type=click.FloatRange(1),
    help="Also write 1 KiB entries at this rate before and while space is collected.",
)
@click.option("--data-dir", default=None, help="Where the sandbox keeps its data (a temp dir).")
@bookie_options("Any other storage option of the bookies (repeatable), as for `bkeeper bookie -o`.")
def gc_bench(
    total: str,
    ledgers: int,
    entry_size: int,
    delete_fraction: float,
    target_fraction: float,
    gc_wait_ms: int,
    compaction: str,
    compaction_rate: str,
    periods: float,
    bookies: int,
    write_rate: float | None,
    data_dir: str | None,
    options: tuple[str, ...],
) -> None:
    """Write, delete most ledgers, and time the bookies' disk usage going back down."""
    from bkeeper.common.loop import run_event_loop

    rate = 0 if compaction_rate.strip() == "0" else parse_size(compaction_rate)
    # Every pass compacts: passes come every gc_wait_ms +-25%, so an interval of a whole
    # gc_wait_ms would leave out the passes that come early.
    every_pass = gc_wait_ms // 2
    bookie_args = (
        "-o",
        f"gc_wait_ms={gc_wait_ms}",
        "-o",
        f"minor_compaction_interval_ms={every_pass if compaction == 'minor' else 0}",
        "-o",
        f"major_compaction_interval_ms={every_pass if compaction == 'major' else 0}",
        "-o",
        f"compaction_rate_bytes_per_s={rate}",
        *(arg for option in options for arg in ("-o", option)),
    )
    plan = GcBenchPlan(
        total_bytes=parse_size(total),
        ledgers=ledgers,
        entry_bytes=entry_size,
        delete_fraction=delete_fraction,
        target_fraction=target_fraction,
        gc_wait_s=gc_wait_ms / 1000.0,
        periods_max=periods,
        ensemble=min(3, bookies),
        write_quorum=min(3, bookies),
        ack_quorum=min(2, bookies),
        write_rate=write_rate,
    )
    with tempfile.TemporaryDirectory(prefix="bkeeper-bench-gc-") as tmp:
        root = Path(data_dir) if data_dir else Path(tmp)
        config = SandboxConfig(
            data_dir=root,
            bookies=bookies,
            zookeeper_port=free_port(),
            bookie_port_base=free_port_range(bookies),
            bookie_args=bookie_args,
        )
        dirs = [root / f"bookie-{i}" for i in range(bookies)]
        with Sandbox(config) as box, progress() as bar:
            on_progress = phase_bars(bar)
            outcome = run_event_loop(bench_gc(box.metadata_uri, dirs, plan, on_progress))
    table = Table(title="bkeeper bench gc")
    for column in ("measure", "value"):
        table.add_column(column, justify="left" if column == "measure" else "right")
    table.add_row(
        "written", f"{outcome.written_bytes / MIB:,.0f} MiB in {outcome.write_seconds:.1f} s"
    )
    table.add_row("peak disk usage (all bookies)", f"{outcome.peak_bytes / MIB:,.0f} MiB")
    table.add_row("ledgers deleted", f"{outcome.deleted_ledgers} of {ledgers}")
    reclaimed = outcome.reclaimed_seconds
    table.add_row(
        f"under {target_fraction:.0%} of the peak after",
        ("not within the run" + (" (the writer kept adding data)" if write_rate else ""))
        if reclaimed is None
        else f"{reclaimed:.1f} s = {reclaimed / plan.gc_wait_s:.2f} GC periods",
    )
    share = outcome.final_bytes / max(outcome.peak_bytes, 1)
    table.add_row(
        "disk usage at the end", f"{outcome.final_bytes / MIB:,.0f} MiB ({share:.1%} of peak)"
    )
    console().print(table)
    results = [r for r in (outcome.baseline, outcome.during_gc) if r is not None]
    if results:
        if outcome.baseline is not None:
            outcome.baseline.name = "writes before the deletions (no GC)"
        if outcome.during_gc is not None:
            outcome.during_gc.name = f"writes while space is collected ({compaction})"
        print_results(results, "entries")
    if reclaimed is None and write_rate is None:
        raise click.ClickException(
            f"disk usage did not drop under {target_fraction:.0%} of the peak within "
            f"{periods} GC periods"
        )
