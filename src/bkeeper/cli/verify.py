"""``bkeeper verify``: seeded faults against a cluster of its own while a workload runs, and
the history checked (docs/verification.md). Exit status 1 when any run found a violation."""

from __future__ import annotations

import random
import shutil
import time
from pathlib import Path

import click
from rich import box
from rich.console import Console
from rich.table import Table

from bkeeper.cli import _tables as tables
from bkeeper.cli._errors import CommandError
from bkeeper.cli._progress import elapsed, status_line
from bkeeper.cli._verify_sim import SIM_SEEDS_MAX, parse_sim_faults, verify_sim
from bkeeper.common.errors import BKeeperError, ConfigError
from bkeeper.common.loop import run_event_loop
from bkeeper.meta.uri import MetadataUri
from bkeeper.verify import stop
from bkeeper.verify.client_child import run_client_process
from bkeeper.verify.netns import effective_capabilities, privileges_missing
from bkeeper.verify.run import WORKLOADS, RunResult, VerifyConfig, run_once
from bkeeper.verify.schedule import (
    KV_NEMESES,
    MEMBER_PARTITIONS,
    NEMESES,
    PARTITIONS,
    parse_nemeses,
)
from bkeeper.verify.status import RunStatus

__all__ = ["verify", "verify_client"]

#: Runs one invocation makes at most (a typo guard: a long run is hours, not years).
RUNS_MAX = 1_000_000


@click.command()
@click.option(
    "--workload",
    default="ledger",
    show_default=True,
    type=click.Choice([*WORKLOADS, "all"]),
    help="What the clients do (ledger: writers, a fencer and readers on ledgers; log: two "
    "writers fencing each other on a named log, a tailing reader, a subscription's consumer; "
    "kv: 3 'bkeeper kv serve' members and 8 clients calling get/put/delete/CAS, checked "
    "linearizable).",
)
@click.option(
    "--nemesis",
    "nemesis_text",
    default="all",
    show_default=True,
    metavar="LIST",
    help=f"Faults to inject, comma-separated, or 'all' or 'none' ({', '.join(NEMESES)}; "
    f"with --workload kv also {', '.join(KV_NEMESES)}).",
)
@click.option(
    "--duration",
    type=float,
    default=30.0,
    show_default=True,
    metavar="S",
    help="Seconds of workload and faults per run.",
)
@click.option(
    "--seed",
    type=int,
    default=None,
    metavar="N",
    help="Seed of the first run's schedule (default: random, printed).",
)
@click.option(
    "--runs",
    type=click.IntRange(1, RUNS_MAX),
    default=1,
    show_default=True,
    help="Runs, with seeds N, N+1, ...",
)
@click.option(
    "--bookies",
    type=click.IntRange(3, 16),
    default=None,
    help="Bookies of the cluster: 5 to 16, default 5 (with --sim: 3 to 16, default 4).",
)
@click.option(
    "--settle",
    type=float,
    default=120.0,
    show_default=True,
    metavar="S",
    help="Seconds auto-recovery has, after the faults, to repair what they left.",
)
@click.option(
    "--metadata",
    default=None,
    metavar="URI",
    help="Run on this cluster (zk://host:port/ledgers) instead of one of verify's own: the "
    "ledger or log workload, on ledgers or a log of the run's own (deleted at the end unless "
    "the run found a violation), with only the faults of verify's own client process "
    "(client-kill).",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path),
    default=Path("verify-out"),
    show_default=True,
    help="Where each run's history, schedule and repro go.",
)
@click.option(
    "--sim",
    is_flag=True,
    help="Run seeds of the deterministic simulator instead: the whole cluster (bookies, "
    "metadata service, network, disks, clients) in one process on virtual time; the same "
    "seed is the same run (its trace hash printed), a failing seed's faults are shrunk and "
    "its trace printed. Faults: crash, corrupt, partition, zk-cut, zk-loss, slow, and "
    "member-crash (kv). --workload all: every seed with each workload.",
)
@click.option(
    "--seeds",
    type=click.IntRange(1, SIM_SEEDS_MAX),
    default=100,
    show_default=True,
    help="With --sim: seeds to run (N, N+1, ...).",
)
@click.option(
    "--jobs",
    type=click.IntRange(1, 256),
    default=None,
    help="With --sim: worker processes (default: one per CPU).",
)
@click.option(
    "--bug",
    "bug_names",
    multiple=True,
    metavar="NAME",
    help="With --sim: put a known bug back for the runs (testing the simulator itself: it "
    "must find it; names in docs/verification.md).",
)
@click.option(
    "--shrink/--no-shrink",
    default=True,
    show_default=True,
    help="With --sim: shrink the first failing seed's faults before printing its trace.",
)
def verify(
    workload: str,
    nemesis_text: str,
    duration: float,
    seed: int | None,
    runs: int,
    bookies: int | None,
    settle: float,
    metadata: str | None,
    out_dir: Path,
    sim: bool,
    seeds: int,
    jobs: int | None,
    bug_names: tuple[str, ...],
    shrink: bool,
) -> None:
    """Run WORKLOAD against a fresh local cluster (ZooKeeper + bookies, each a process), or
    the cluster at --metadata, while faults are injected on a schedule derived from the
    seed; check the recorded history; print a summary table. The same seed gives the same
    schedule.

    Needs: Java (ZooKeeper) for a cluster of its own; and for the partition nemeses
    (partition, partition-zk, partition-clients, and kv's member partitions) root, or
    CAP_NET_ADMIN and CAP_SYS_ADMIN, with the `ip` command: each bookie runs in a network
    namespace of its own (ip netns); disk-full mounts a tmpfs per bookie (CAP_SYS_ADMIN).
    Without them verify stops at once, saying which nemeses need what: run as root, or
    leave those out with --nemesis (e.g. --nemesis kill,pause,corrupt,zk).

    Progress (phase, run k of N, seed, operations, time) is shown on stderr, redrawn on a
    terminal, a plain line every 2 s otherwise. Ctrl-C (or SIGTERM) stops within a few
    seconds: every process, namespace, mount and temporary directory of the run is
    removed, one line says what, and the exit status is 130.

    With --sim (and --seeds, --jobs), no process, port or disk is used: see --sim."""
    if sim:
        if metadata is not None:
            raise click.UsageError("--sim runs a simulated cluster: leave out --metadata")
        try:
            kinds = parse_sim_faults(nemesis_text)
        except ConfigError as exc:
            raise click.UsageError(str(exc)) from None
        first = seed if seed is not None else random.randrange(1 << 31)
        verify_sim(workload, kinds, duration, first, seeds, bookies or 4, jobs, shrink, bug_names)
        return
    if workload == "all":
        raise click.UsageError("--workload all: only with --sim (one workload per run)")
    if bug_names:
        raise click.UsageError("--bug: only with --sim")
    if bookies is None:
        bookies = 5
    elif bookies < 5:
        raise click.UsageError(
            f"Invalid value for '--bookies': {bookies} is not in the range 5<=x<=16 "
            "(a cluster of processes; --sim runs 3 or more)"
        )
    try:
        if metadata is not None and MetadataUri.parse(metadata).scheme == "memory":
            raise ConfigError(
                f"metadata: {metadata!r} lives in one process; verify's client processes "
                "need a cluster they can reach (zk://host:port/ledgers)"
            )
        external = metadata is not None
        nemeses = (
            ()
            if nemesis_text.strip() == "none"
            else parse_nemeses(nemesis_text, workload, external=external)
        )
        config = VerifyConfig(
            workload, nemeses, duration, bookies, settle, out_dir, metadata=metadata
        )
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    if not external:
        missing = privileges_missing(
            nemeses,
            PARTITIONS | MEMBER_PARTITIONS,
            effective_capabilities(),
            shutil.which("ip") is not None,
        )
        if missing is not None:
            raise CommandError(missing)
    first = seed if seed is not None else random.randrange(1 << 31)
    # SIGTERM unwinds like Ctrl-C: namespaces, tmpfs mounts and processes are cleaned up.
    stop.install()
    console = tables.console()  # the terminal's width, else $COLUMNS, else wide
    err = Console(stderr=True, soft_wrap=True)  # a message is one line, whatever its length
    where = f" on {metadata}" if metadata else ""
    err.print(
        f"verify: {runs} run(s){where} from seed {first}, nemeses {', '.join(nemeses) or 'none'}",
        markup=False,
    )
    results: list[RunResult] = []
    harness: list[tuple[int, str]] = []
    current = [(0, RunStatus())]  # the run under way (index) and its status
    started = time.monotonic()

    def describe() -> str:
        k, run = current[0]
        return (
            f"verify: run {k + 1} of {runs} (seed {first + k}): {run.describe()}; "
            f"{elapsed(time.monotonic() - started)}"
        )

    try:
        with status_line(describe, err):
            for n in range(runs):
                stop.check()
                status = RunStatus()
                current[0] = (n, status)
                try:
                    result = run_once(config, first + n, status)
                except ConfigError as exc:
                    raise CommandError(str(exc)) from exc
                except BKeeperError as exc:  # the harness could not run it (a cluster that
                    # did not start on a loaded machine): said, counted, the campaign goes on
                    harness.append((first + n, str(exc)))
                    err.print(f"seed {first + n}: the run could not be made: {exc}", markup=False)
                    continue
                results.append(result)
                if not result.verdict.ok:
                    err.print(
                        f"seed {result.seed}: {result.verdict.count} violation(s); "
                        f"repeat with: {result.repro}",
                        markup=False,
                    )
    except KeyboardInterrupt:
        k, run = current[0]
        asked = stop.requested_at()
        within_s = "" if asked is None else f" in {time.monotonic() - asked:.1f} s"
        err.print(
            f"interrupted: run {k + 1} of {runs} (seed {first + k}) stopped{within_s}; "
            f"cleaned up {run.cleanup.describe()}"
            + (f"; {len(results)} finished run(s) under {out_dir}" if results else ""),
            markup=False,
        )
        raise SystemExit(130) from None
    console.print(_table(results))
    violations = sum(r.verdict.count for r in results)
    for result in results:
        for line in result.verdict.violations:
            console.print(f"seed {result.seed}: {line}", markup=False)
        for kind, why in result.skipped.items():
            err.print(f"seed {result.seed}: nemesis {kind} skipped: {why}", markup=False)
    for seed_n, why in harness:
        err.print(f"seed {seed_n}: not run: {why}", markup=False)
    if violations:
        raise CommandError(
            f"{violations} violation(s) in {sum(not r.verdict.ok for r in results)} of "
            f"{len(results)} run(s); histories under {out_dir}"
        )
    if harness:
        raise CommandError(
            f"no violation in {len(results)} run(s), but {len(harness)} run(s) could not be "
            f"made; histories under {out_dir}"
        )
    console.print(f"no violation in {len(results)} run(s); histories under {out_dir}")


@click.command("verify-client", hidden=True)
@click.argument("uri")
@click.argument("seed", type=int)
@click.argument("name")
def verify_client(uri: str, seed: int, name: str) -> None:
    """(Internal) a client process of ``bkeeper verify``: ledger writers reporting each
    operation as a JSON line on standard output until standard input closes."""
    run_event_loop(run_client_process(uri, seed, name))


def _table(results: list[RunResult]) -> Table:
    """One row per run. Fits 80 columns: the numbers keep their width and the faults cell
    wraps (a fault kind a line, folded if still too long), never a title."""
    # no rules between the columns, no padding at the edges: room for the numbers
    table = Table(
        title="bkeeper verify",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
    )
    for column in ("seed", "faults", "ledgers", "acked", "unknown", "reads", "violations", "s"):
        if column == "faults":
            table.add_column(column, overflow="fold", min_width=8)
        else:
            table.add_column(column, justify="right", no_wrap=True)
    for r in results:
        kinds: dict[str, int] = {}
        for fault, _ in r.faults:
            kinds[fault.kind] = kinds.get(fault.kind, 0) + 1
        faults = "\n".join(f"{k} x{n}" for k, n in sorted(kinds.items())) or "none"
        table.add_row(
            str(r.seed),
            faults,
            f"{r.verdict.ledgers:,}",
            f"{r.verdict.acknowledged:,}",
            f"{r.appends_unknown:,}",
            f"{r.verdict.reads:,}",
            str(r.verdict.count),
            f"{r.seconds:.0f}",
        )
    return table
