"""``bkeeper bench tail``: how soon a tailing reader of a ledger sees an append."""

from __future__ import annotations

import click

from bkeeper.cli.bench._common import METADATA, cluster, print_results, shows_elapsed
from bkeeper.testing.benchmarks.client import bench_ledger_tail

__all__ = ["tail_bench"]


@click.command("tail")
@METADATA
@click.option("--rate", default=1000.0, show_default=True, type=click.FloatRange(1))
@click.option("--duration", default=5.0, show_default=True, type=click.FloatRange(0.1))
@click.option("--entry-size", default=100, show_default=True, type=click.IntRange(0))
@click.option(
    "--explicit-lac-ms",
    default=0,
    show_default=True,
    type=click.IntRange(0),
    help="The writer's explicit_lac_interval_ms (0: the LAC reaches bookies piggybacked on "
    "the next entry only).",
)
@shows_elapsed("tail")
def tail_bench(
    metadata_uri: str, rate: float, duration: float, entry_size: int, explicit_lac_ms: int
) -> None:
    """A writer appending --rate entries/s, a reader of another client tailing the ledger
    (long poll, then read): latency from each append to the reader having the entry."""
    from bkeeper.common.loop import run_event_loop

    with cluster(metadata_uri, 3) as uri:
        results = run_event_loop(
            bench_ledger_tail(
                uri,
                rate=rate,
                duration_s=duration,
                entry_bytes=entry_size,
                explicit_lac_interval_ms=explicit_lac_ms,
            )
        )
        print_results(results, "entries")
