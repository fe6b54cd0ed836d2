"""``bkeeper verify --sim``: seeds of the deterministic simulator (:mod:`bkeeper.sim`), a
progress line while they run, a summary table, and for a failing seed its shrunk trace and
the command that replays it."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rich.console import Console

from bkeeper.cli import _tables as tables
from bkeeper.cli._errors import CommandError
from bkeeper.cli._progress import elapsed, status_line
from bkeeper.common.errors import ConfigError

if TYPE_CHECKING:  # the simulator is imported when used: `bkeeper --help` stays quick
    from rich.table import Table

    from bkeeper.sim.run import SimResult

__all__ = ["SIM_SEEDS_MAX", "parse_sim_faults", "verify_sim"]

#: Seeds one invocation runs at most.
SIM_SEEDS_MAX = 100_000_000
#: Trace lines printed for a failing seed (its newest: the violation is at the end).
TRACE_LINES_SHOWN = 60


def parse_sim_faults(text: str) -> tuple[str, ...]:
    """``all``, ``none`` or a comma-separated list of the simulator's fault kinds."""
    from bkeeper.sim.faults import FAULT_KINDS

    text = text.strip()
    if text == "all":
        return FAULT_KINDS
    if text == "none":
        return ()
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = [k for k in kinds if k not in FAULT_KINDS]
    if unknown:
        raise ConfigError(
            f"--nemesis with --sim: unknown fault {', '.join(unknown)} "
            f"(the simulator's: {', '.join(FAULT_KINDS)}, or all, none)"
        )
    return kinds


@dataclass
class _Tally:
    total: int
    done: int = 0
    failed: list[SimResult] = field(default_factory=list)
    faults: int = 0
    acknowledged: int = 0
    ledgers: int = 0
    sim_s: float = 0.0
    cpu_s: float = 0.0
    started: float = field(default_factory=time.monotonic)

    def add(self, result: SimResult) -> None:
        self.done += 1
        self.faults += result.faults
        self.acknowledged += result.acknowledged
        self.ledgers += result.ledgers
        self.sim_s += result.sim_s
        self.cpu_s += result.cpu_s
        if not result.ok:
            self.failed.append(result)

    def rate(self) -> float:
        took = time.monotonic() - self.started
        return self.done / took * 60 if took > 0 else 0.0

    def describe(self) -> str:
        rate = self.rate()
        left = (self.total - self.done) / rate * 60 if rate else 0.0
        return (
            f"verify --sim: {self.done} of {self.total} seeds, {len(self.failed)} failed, "
            f"{rate:.0f} seeds/min, {elapsed(time.monotonic() - self.started)}"
            + (f", ~{elapsed(left)} left" if self.done else "")
        )


def verify_sim(
    workload: str,
    kinds: tuple[str, ...],
    duration_s: float,
    first: int,
    seeds: int,
    bookies: int,
    jobs: int | None,
    shrink: bool,
    bug_names: tuple[str, ...] = (),
) -> None:
    from bkeeper.common.bugs import BUGS
    from bkeeper.sim.campaign import run_campaign, shrink_in_worker
    from bkeeper.sim.run import WORKLOADS, SimRunConfig

    workloads = WORKLOADS if workload == "all" else (workload,)
    if "kv" not in workloads and "member-crash" in kinds and len(kinds) == 1:
        raise CommandError("--nemesis member-crash: only with --workload kv (or all)")
    if duration_s <= 0:
        raise CommandError(f"--duration: must be above 0, got {duration_s}")
    unknown = [b for b in bug_names if b not in BUGS]
    if unknown:
        raise CommandError(f"--bug: unknown {', '.join(unknown)} (known: {', '.join(BUGS)})")
    jobs = jobs or os.cpu_count() or 1
    console = tables.console()
    err = Console(stderr=True, soft_wrap=True)
    err.print(
        f"verify --sim: {seeds} seed(s) from {first}, workload {', '.join(workloads)}, "
        f"faults {', '.join(kinds) or 'none'}, {duration_s:g} simulated s each, {jobs} job(s)"
        + (f", bugs put back: {', '.join(bug_names)}" if bug_names else ""),
        markup=False,
    )
    tally = _Tally(total=seeds * len(workloads))
    hashes: list[SimResult] = []

    def on_result(result: SimResult) -> None:
        tally.add(result)
        if seeds == 1:
            hashes.append(result)
        if not result.ok:
            err.print(
                f"seed {result.seed} ({result.workload}): {len(result.violations)} violation(s): "
                f"{result.violations[0]}",
                markup=False,
            )

    with status_line(tally.describe, err):
        for name in workloads:
            base = SimRunConfig(
                seed=first,
                workload=name,
                duration_s=duration_s,
                bookies=bookies,
                fault_kinds=kinds,
                bugs=bug_names,
            )
            run_campaign(base, range(first, first + seeds), jobs, on_result)
    console.print(_summary(tally, kinds))
    for result in hashes:
        console.print(
            f"seed {result.seed} ({result.workload}): trace hash {result.trace_hash}", markup=False
        )
    if not tally.failed:
        console.print(f"no violation in {tally.done} seed(s)", markup=False)
        return
    tally.failed.sort(key=lambda r: r.seed)
    first_failed = tally.failed[0]
    shown = first_failed
    if shrink and first_failed.plan:
        err.print(
            f"seed {first_failed.seed}: shrinking its {len(first_failed.plan)} faults", markup=False
        )
        base = SimRunConfig(
            seed=first_failed.seed,
            workload=first_failed.workload,
            duration_s=duration_s,
            bookies=bookies,
            fault_kinds=kinds,
            bugs=bug_names,
        )
        shown = shrink_in_worker(base, first_failed)
    lines = _trace_shown(shown.trace)
    console.print(
        f"seed {shown.seed}: {len(shown.plan)} fault(s) lead to the violation; the end of "
        f"its trace ({len(lines)} of {len(shown.trace)} lines), then the history of the "
        "ledgers it broke:",
        markup=False,
    )
    for fault in shown.plan:
        console.print(f"  fault at {fault.at_s:8.3f}s: {fault.describe()}", markup=False)
    for line in lines:
        console.print(f"  {line}", markup=False)
    for result in tally.failed:
        console.print(
            f"seed {result.seed}: replay with: bkeeper verify --sim --seed {result.seed} "
            f"--seeds 1 --workload {result.workload} --duration {duration_s:g}"
            + "".join(f" --bug {b}" for b in bug_names),
            markup=False,
            soft_wrap=True,  # one line, to copy whole
        )
    raise CommandError(f"{len(tally.failed)} of {tally.done} seed(s) found a violation")


def _trace_shown(trace: tuple[str, ...]) -> tuple[str, ...]:
    """The last :data:`TRACE_LINES_SHOWN` events before the checker's verdict, and the
    verdict with the history of the ledgers it names (whole: the run bounds it)."""
    marks = ("the history of ledger(s)", "VIOLATION")
    story = next((i for i, line in enumerate(trace) if any(m in line for m in marks)), len(trace))
    return trace[max(0, story - TRACE_LINES_SHOWN) :]


def _summary(tally: _Tally, kinds: tuple[str, ...]) -> Table:
    table = tables.titled_table("bkeeper verify --sim", "", "value")
    done = max(tally.done, 1)
    rows = [
        ("seeds", f"{tally.done}"),
        ("failed", f"{len(tally.failed)}"),
        ("faults injected", f"{tally.faults} ({', '.join(kinds) or 'none'})"),
        ("acknowledged (entries, records, kv calls)", f"{tally.acknowledged}"),
        ("ledgers checked", f"{tally.ledgers}"),
        ("simulated time", elapsed(tally.sim_s)),
        ("CPU per seed", f"{tally.cpu_s / done * 1000:.0f} ms"),
        ("seeds per minute", f"{tally.rate():.0f}"),
    ]
    for name, value in rows:
        table.add_row(name, value)
    return table
