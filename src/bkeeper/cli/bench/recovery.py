"""``bkeeper bench recovery``: kill -9 a bookie of a sandbox running auto-recovery and time
how long its replicas take to be rebuilt, with appends going on (docs/benchmarks.md)."""

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
from bkeeper.common.errors import ConfigError
from bkeeper.testing.benchmarks import free_port, free_port_range
from bkeeper.testing.benchmarks.recovery import (
    RecoveryBenchOutcome,
    RecoveryBenchPlan,
    RecoveryCluster,
    bench_recovery,
)
from bkeeper.testing.sandbox import Sandbox, SandboxConfig

__all__ = ["recovery_bench"]

#: The targets of a repair (5 bookies, 1,000 ledgers of 1 MiB, E3/Qw3/Qa2, 5,000 appends/s).
REPAIR_S_TARGET = 60.0
LEDGERS_PER_MIN_TARGET = 1000.0
MB_PER_S_TARGET = 50.0
P99_MS_TARGET = 50.0
#: Mismatches named in the error when the read-back finds some.
MISMATCHES_SHOWN = 10


@click.command("recovery")
@click.option("--ledgers", default=1000, show_default=True, type=click.IntRange(1))
@click.option("--ledger-size", default="1M", show_default=True, help="Bytes per ledger.")
@click.option("--entry-size", default="64K", show_default=True, help="Bytes per entry.")
@click.option("--bookies", default=5, show_default=True, type=click.IntRange(4, 16))
@click.option(
    "--delay",
    default=0,
    show_default=True,
    type=click.IntRange(0),
    help="Lost bookie recovery delay (s) set in the cluster before the kill.",
)
@click.option(
    "--write-rate",
    default=5000.0,
    show_default=True,
    type=click.FloatRange(0),
    help="Open-loop 1 KiB appends per second before the kill and during the repair (0: none).",
)
@click.option("--baseline-seconds", default=5.0, show_default=True, type=click.FloatRange(0))
@click.option("--kill-auditor", is_flag=True, help="Kill the auditor's bookie (default: another).")
@click.option(
    "--second-kill",
    is_flag=True,
    help="Then kill another bookie and read every entry back, compared byte for byte.",
)
@click.option(
    "--timeout", default=600.0, show_default=True, type=click.FloatRange(1), help="Seconds."
)
@click.option("--data-dir", default=None, help="Where the sandbox keeps its data (a temp dir).")
@click.option(
    "--autorecovery-nice",
    default=None,
    type=click.IntRange(0, 19),
    help="Run auto-recovery in a process of its own beside each bookie, at this nice value "
    "(default: inside the bookies). Killing a bookie kills its auto-recovery too.",
)
@bookie_options(
    "A bookie option (storage or auto-recovery; repeatable), as for `bkeeper bookie -o`."
)
def recovery_bench(
    ledgers: int,
    ledger_size: str,
    entry_size: str,
    bookies: int,
    delay: int,
    write_rate: float,
    baseline_seconds: float,
    kill_auditor: bool,
    second_kill: bool,
    timeout: float,
    data_dir: str | None,
    autorecovery_nice: int | None,
    options: tuple[str, ...],
) -> None:
    """Fill a sandbox, kill -9 a bookie, time auto-recovery rebuilding its replicas."""
    from bkeeper.common.loop import run_event_loop

    try:
        plan = RecoveryBenchPlan(
            ledgers=ledgers,
            ledger_bytes=parse_size(ledger_size),
            entry_bytes=parse_size(entry_size),
            delay_s=delay,
            write_rate=write_rate,
            baseline_s=baseline_seconds,
            kill_auditor=kill_auditor,
            second_kill=second_kill,
            timeout_s=timeout,
        )
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    with tempfile.TemporaryDirectory(prefix="bkeeper-bench-recovery-") as tmp:
        root = Path(data_dir) if data_dir else Path(tmp)
        config = SandboxConfig(
            data_dir=root,
            bookies=bookies,
            zookeeper_port=free_port(),
            bookie_port_base=free_port_range(bookies),
            bookie_args=tuple(arg for option in options for arg in ("-o", option)),
            autorecovery_nice=autorecovery_nice,
        )
        with Sandbox(config) as box, progress() as bar:
            on_progress = phase_bars(bar)
            ids = tuple(":".join(map(str, box.bookie_address(i))) for i in range(bookies))
            cluster = RecoveryCluster(box.metadata_uri, ids, box.kill_bookie)
            outcome = run_event_loop(bench_recovery(cluster, plan, on_progress))
    _print(outcome, plan)
    if outcome.repair_s is None:
        raise click.ClickException(
            f"not repaired within {timeout:.0f} s: {outcome.left_unrepaired} ledgers still "
            f"name {outcome.victim}, {outcome.left_queued} still queued"
        )
    if outcome.mismatches:
        shown = "; ".join(outcome.mismatches[:MISMATCHES_SHOWN])
        raise click.ClickException(
            f"{len(outcome.mismatches)} problems reading back after the second kill: {shown}"
        )


def _print(outcome: RecoveryBenchOutcome, plan: RecoveryBenchPlan) -> None:
    table = Table(title="bkeeper bench recovery")
    for column in ("measure", "value", "target"):
        table.add_column(column, justify="left" if column == "measure" else "right")
    auditor = outcome.auditor or "none elected"
    table.add_row("killed (kill -9)", f"{outcome.victim} (auditor: {auditor})", "")
    table.add_row(
        "ledgers on it",
        f"{outcome.affected_ledgers:,} ({outcome.affected_bytes / MIB:,.0f} MiB to copy)",
        "",
    )
    table.add_row("gone from the registry after", f"{outcome.gone_after_s:.1f} s", "")
    table.add_row("lost bookie recovery delay", f"{plan.delay_s} s", "")
    repair = outcome.repair_s
    table.add_row(
        "fully replicated, after the delay",
        "not in time" if repair is None else f"{repair:.1f} s",
        _target(repair is not None and repair <= REPAIR_S_TARGET, f"<= {REPAIR_S_TARGET:.0f} s"),
    )
    table.add_row(
        "ledgers re-replicated per minute",
        f"{outcome.ledgers_per_min:,.0f}",
        _target(outcome.ledgers_per_min >= LEDGERS_PER_MIN_TARGET, ">= 1,000"),
    )
    table.add_row(
        "MB/s re-replicated",
        f"{outcome.mb_per_s:,.1f}",
        _target(outcome.mb_per_s >= MB_PER_S_TARGET, f">= {MB_PER_S_TARGET:.0f}"),
    )
    if outcome.during is not None:
        p99 = outcome.during.latency_ms().get("p99")
        table.add_row(
            f"append p99 during the repair ({plan.write_rate:,.0f}/s)",
            "-" if p99 is None else f"{p99:.1f} ms",
            _target(p99 is not None and p99 < P99_MS_TARGET, f"< {P99_MS_TARGET:.0f} ms"),
        )
    if outcome.second_victim is not None:
        table.add_row("then killed", outcome.second_victim, "")
        table.add_row(
            "entries read back identical",
            f"{outcome.identical_entries:,} of {plan.ledgers * plan.entries_per_ledger:,}",
            _target(not outcome.mismatches, "all"),
        )
    console().print(table)
    results = [
        r for r in (outcome.fill, outcome.baseline, outcome.during, outcome.verify) if r is not None
    ]
    print_results(results, "ops")


def _target(met: bool, text: str) -> str:
    return f"{text}: {'met' if met else 'MISSED'}"
