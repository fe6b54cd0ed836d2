"""One verification run, start to verdict, on a cluster of its own.

1. ZooKeeper and ``bookies`` bookie processes (auto-recovery in each) on free ports, each
   bookie's data on a tmpfs of its own when ``disk-full`` is asked for, each bookie in a
   network namespace of its own when a partition is (both need root: without it those
   nemeses are skipped, and the run says so), the bookies' fsyncs slowable when
   ``slow-disk`` is;
2. the workload runs for ``duration_s`` while the nemesis injects and heals the schedule's
   faults (:func:`~bkeeper.verify.schedule.make_schedule`, from the seed);
3. every fault healed, every created ledger is read whole with recovery
   (:func:`~bkeeper.verify.workload.read_final`) and the history checked
   (:func:`~bkeeper.verify.check.check_ledgers`);
4. auto-recovery's replicas check is run once (each live replica's list of entries) and the
   workers are given ``settle_s`` to repair what it marks; a ledger whose replicas still lack
   entries then is a violation (faults must not leave a ledger under-replicated for good).

The kv workload (:mod:`bkeeper.verify.kv_workload`) also starts the store's member processes
before the clock starts (each in a network namespace of its own when a partition of the
leader is asked for), adds their faults to the nemesis, and at the end checks the members
and the history's linearizability (:func:`~bkeeper.verify.check_kv.check_kv`); the log's
ledgers then go through step 4.

With ``--metadata`` (:attr:`VerifyConfig.metadata`) a run uses the cluster given instead of
starting one: the ledger or log workload, only the faults of verify's own client process,
step 4 without the auditor's pass over the cluster, and what the run wrote deleted at the
end unless it found a violation (:func:`_run_external`).

The history (JSON lines), the schedule, the log, a command that repeats the run, the verdict
(``verdict.txt``: faults as injected, counts, violations; ``result.json``: the same as one
JSON line) and, for a run with a violation, the cluster's process logs (``logs/``) are written
to ``out_dir/seed-<seed>/``; each finished run's verdict is also appended to
``out_dir/summary.jsonl``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import random
import secrets
import shlex
import signal
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bkeeper.autorecovery.auditor import Auditor
from bkeeper.autorecovery.config import AutoRecoveryConfig
from bkeeper.autorecovery.replicas import list_ledger
from bkeeper.client.bookkeeper import BookKeeper
from bkeeper.client.distribution import write_set
from bkeeper.common.errors import (
    BKeeperError,
    ConfigError,
    LedgerNotFoundError,
    LogNotFoundError,
)
from bkeeper.common.tasks import within
from bkeeper.namedlog import LogConfig, NamedLogs
from bkeeper.storage.slow_sync import ENV_VAR as SLOW_SYNC_ENV
from bkeeper.testing.entry_log_faults import FlippedEntries
from bkeeper.testing.sandbox import Sandbox, SandboxConfig
from bkeeper.testing.tmpfs import mounted_tmpfs
from bkeeper.testing.zookeeper import port_free
from bkeeper.verify import stop
from bkeeper.verify.check import Verdict, check_ledgers
from bkeeper.verify.check_kv import check_kv
from bkeeper.verify.check_log import check_log
from bkeeper.verify.history import History
from bkeeper.verify.kv_workload import MEMBERS, KvNemesis, KvWorkload
from bkeeper.verify.log_workload import LogWorkload, read_log
from bkeeper.verify.nemesis import Nemesis
from bkeeper.verify.netns import NetnsSandbox, Network
from bkeeper.verify.schedule import (
    EXTERNAL_NEMESES,
    MEMBER_PARTITIONS,
    PARTITIONS,
    Fault,
    make_schedule,
)
from bkeeper.verify.status import Cleanup, RunStatus
from bkeeper.verify.workload import LedgerWorkload, WorkloadConfig, read_final, start_client

__all__ = [
    "EXTERNAL_WORKLOADS",
    "SUMMARY_NAME",
    "WORKLOADS",
    "RunResult",
    "VerifyConfig",
    "keep_logs",
    "run_once",
]

log = logging.getLogger(__name__)

#: Ledgers the ``corrupt`` nemeses pick from (the newest that has entries where they look):
#: the journal's last group holds the newest; entry logs, those before the last checkpoint.
RECENT_LEDGERS = 256

#: The workloads, by name.
WORKLOADS = ("ledger", "log", "kv")
#: The workloads that can run on a cluster given with ``--metadata``.
EXTERNAL_WORKLOADS = ("ledger", "log")
#: The writable bookies a cluster given with ``--metadata`` needs (the ledgers are E3).
EXTERNAL_BOOKIES_MIN = 3

#: The file in the output directory that gets one JSON line per finished run.
SUMMARY_NAME = "summary.jsonl"

#: Bytes of each process's log kept from a run that found a violation (the end of it).
KEPT_LOG_BYTES_MAX = 20 * 1024 * 1024

#: Bytes of each bookie's own tmpfs (``disk-full``).
BOOKIE_DISK_BYTES = 256 * 1024 * 1024
#: Attempts at finding free ports for a run's cluster.
PORT_ATTEMPTS_MAX = 20


@dataclass(frozen=True)
class VerifyConfig:
    workload: str = "ledger"
    nemeses: tuple[str, ...] = ()
    duration_s: float = 30.0
    bookies: int = 5
    settle_s: float = 120.0
    out_dir: Path = Path("verify-out")
    workload_config: WorkloadConfig = field(default_factory=WorkloadConfig)
    #: A cluster to run on instead of one of verify's own (``--metadata``): no fault of its
    #: processes, only :data:`~bkeeper.verify.schedule.EXTERNAL_NEMESES`.
    metadata: str | None = None

    def __post_init__(self) -> None:
        if self.workload not in WORKLOADS:
            raise ConfigError(f"workload: {self.workload!r} is not one of {', '.join(WORKLOADS)}")
        if self.metadata is not None:
            if self.workload not in EXTERNAL_WORKLOADS:
                raise ConfigError(
                    f"workload: {self.workload!r} starts its store's members on a cluster of "
                    f"verify's own; with --metadata: {', '.join(EXTERNAL_WORKLOADS)}"
                )
            outside = [n for n in self.nemeses if n not in EXTERNAL_NEMESES]
            if outside:
                raise ConfigError(
                    f"nemesis: {', '.join(outside)} need a cluster of verify's own (no --metadata)"
                )
        if not 5 <= self.bookies <= 16:
            raise ConfigError(f"bookies: {self.bookies} is not between 5 and 16")
        if not 1.0 <= self.duration_s <= 86_400.0:
            raise ConfigError(f"duration: {self.duration_s} s is not between 1 and 86400")


@dataclass
class RunResult:
    seed: int
    faults: list[tuple[Fault, str]]
    skipped: dict[str, str]
    verdict: Verdict
    operations: int
    appends_ok: int
    appends_unknown: int
    history_path: Path
    repro: str
    seconds: float

    def summary(self) -> dict[str, object]:
        """The run in one JSON-able line (``summary.jsonl``)."""
        kinds: dict[str, int] = {}
        for fault, _ in self.faults:
            kinds[fault.kind] = kinds.get(fault.kind, 0) + 1
        return {
            "seed": self.seed,
            "faults": kinds,
            "skipped": self.skipped,
            "violations": self.verdict.count,
            "violations_shown": self.verdict.violations,
            "operations": self.operations,
            "appends_ok": self.appends_ok,
            "appends_unknown": self.appends_unknown,
            "ledgers": self.verdict.ledgers,
            "reads": self.verdict.reads,
            "seconds": round(self.seconds, 1),
            "repro": self.repro,
        }


def repro_command(config: VerifyConfig, seed: int) -> str:
    return shlex.join(
        [
            "bkeeper", "verify", "--workload", config.workload,
            "--nemesis", ",".join(config.nemeses) or "none",
            "--duration", f"{config.duration_s:g}", "--seed", str(seed),
            *(("--metadata", config.metadata) if config.metadata else
              ("--bookies", str(config.bookies))),
        ]
    )  # fmt: skip


def run_once(config: VerifyConfig, seed: int, status: RunStatus | None = None) -> RunResult:
    """One run (module doc); raises only for what stops the harness itself (ports, Java).
    ``status`` follows the run's phases, and after a stop (``KeyboardInterrupt``) says what
    was cleaned up."""
    status = status or RunStatus()
    if config.metadata is not None:
        return _run_external(config, config.metadata, seed, status)
    started = time.monotonic()
    out = config.out_dir / f"seed-{seed}"
    out.mkdir(parents=True, exist_ok=True)
    nemeses = list(config.nemeses)
    skipped: dict[str, str] = {}
    cleanup = status.cleanup
    with (
        _logs_to(out / "verify.log"),
        _counted_temp_dir(cleanup) as tmp,
        contextlib.ExitStack() as stack,
    ):
        data_dir = Path(tmp)
        disks: dict[int, Path] = {}
        if "disk-full" in nemeses:
            status.enter("mounting a tmpfs per bookie")
            stack.callback(_count_mounts, cleanup, disks)  # runs after they are unmounted
            try:
                for index in range(config.bookies):
                    disk = data_dir / f"bookie-{index}"
                    disks[index] = stack.enter_context(mounted_tmpfs(disk, BOOKIE_DISK_BYTES))
            except ConfigError as exc:
                skipped["disk-full"] = str(exc)
                nemeses.remove("disk-full")
                disks.clear()
        network: Network | None = None
        partitions = [name for name in nemeses if name in PARTITIONS | MEMBER_PARTITIONS]
        in_namespaces = MEMBERS if MEMBER_PARTITIONS & set(partitions) else 0
        if partitions:
            status.enter("setting up network namespaces")
            network = Network(config.bookies, members=in_namespaces)
            try:
                network.setup()
                stack.callback(_teardown_counted, network, cleanup)
            except ConfigError as exc:
                for name in partitions:
                    skipped[name] = str(exc)
                    nemeses.remove(name)
                network = None
        workload_config, schedule = _plan(config, seed, out, nemeses, skipped)
        sandbox_config = _sandbox_config(data_dir, config.bookies, seed, "slow-disk" in nemeses)
        sandbox = (
            Sandbox(sandbox_config) if network is None else NetnsSandbox(sandbox_config, network)
        )
        history = History()
        status.history = history
        workload: LedgerWorkload | LogWorkload | KvWorkload | None = None
        members: KvWorkload | None = None
        harness_failed = False
        stack.enter_context(stop.killing(lambda: _kill_processes(sandbox, workload, cleanup)))
        try:
            status.enter(f"starting ZooKeeper and {config.bookies} bookies")
            sandbox.start()
            stop.check()  # a stop asked for while it started (its first raise may be lost)
            if config.workload == "kv":
                status.enter(f"starting {MEMBERS} kv members")
                workload = members = KvWorkload(
                    sandbox.metadata_uri, history, seed, out, network if in_namespaces else None
                )
                members.start_members()
                stop.check()
            elif config.workload == "log":
                workload = LogWorkload(sandbox.metadata_uri, history, seed, workload_config)
            else:
                workload = LedgerWorkload(sandbox.metadata_uri, history, seed, workload_config)
            clients = workload if isinstance(workload, LedgerWorkload) else None
            recent = lambda: workload.created[-RECENT_LEDGERS:]  # noqa: E731
            base = Nemesis(sandbox, recent, disks, network, clients)
            nemesis = KvNemesis(base, workload) if isinstance(workload, KvWorkload) else base
            with stop.BoundedRunner() as runner:
                uri = sandbox.metadata_uri
                driven = _drive(config, uri, sandbox, schedule, workload, nemesis, history, status)
                # SIGTERM, Ctrl-C: out of the loop at once (its processes already killed:
                # the runner's clean-up waits for none of them)
                faults, verdict = runner.run(driven)
        except BKeeperError as exc:  # the harness could not finish the run: its logs are
            # kept and it is a line of the summary too, so that it can be looked into
            harness_failed = True
            # the trace to the run's log only (the console says it in one line, below)
            log.warning("the harness could not finish the run: %s", exc, exc_info=True)
            _summarize(config, {"seed": seed, "harness_error": str(exc)})
            raise
        finally:
            status.enter("stopping the cluster")
            if stop.requested() is not None:
                _kill_processes(sandbox, workload, cleanup)  # one started since the signal
            if members is not None:
                members.stop_members()
            sandbox.stop()
            if harness_failed:
                keep_logs(data_dir, out / "logs")
        if not verdict.ok:  # the processes' logs, for whoever looks into it
            keep_logs(data_dir, out / "logs")
    return _finish(config, seed, out, history, faults, verdict, skipped, started)


def _plan(
    config: VerifyConfig, seed: int, out: Path, nemeses: list[str], skipped: dict[str, str]
) -> tuple[WorkloadConfig, tuple[Fault, ...]]:
    """The workload's configuration (its client process logging to ``out``, for
    ``client-kill``; a workload without one skips that nemesis, noted in ``skipped``) and
    the run's schedule, written to ``schedule.txt``."""
    workload_config = config.workload_config
    if "client-kill" in nemeses:
        if config.workload == "ledger":
            workload_config = dataclasses.replace(
                workload_config, client_process_log=str(out / "client-process.log")
            )
        else:
            skipped["client-kill"] = f"the {config.workload} workload has no client process"
            nemeses.remove("client-kill")
    schedule = make_schedule(seed, nemeses, config.duration_s, config.bookies)
    (out / "schedule.txt").write_text("".join(f.describe() + "\n" for f in schedule))
    return workload_config, schedule


def _finish(
    config: VerifyConfig,
    seed: int,
    out: Path,
    history: History,
    faults: list[tuple[Fault, str]],
    verdict: Verdict,
    skipped: dict[str, str],
    started: float,
) -> RunResult:
    """Write the run's history, repro, verdict and summary line; its result."""
    history_path = out / "history.jsonl"
    history.write(history_path)
    repro = repro_command(config, seed)
    (out / "repro.txt").write_text(repro + "\n")
    (out / "verdict.txt").write_text(
        "".join(f"{f.describe()}: {what}\n" for f, what in faults)
        + f"acknowledged {verdict.acknowledged}, reads {verdict.reads}, "
        f"ledgers {verdict.ledgers}, violations {verdict.count}\n"
        + "".join(line + "\n" for line in verdict.violations)
    )
    result = RunResult(
        seed,
        faults,
        skipped,
        verdict,
        len(history),
        verdict.acknowledged if config.workload == "kv" else history.count("append", "ok"),
        _unknown_writes(history) if config.workload == "kv" else history.count("append", "info"),
        history_path,
        repro,
        time.monotonic() - started,
    )
    (out / "result.json").write_text(_summarize(config, result.summary()))
    return result


def _run_external(config: VerifyConfig, uri: str, seed: int, status: RunStatus) -> RunResult:
    """One run on the cluster at ``uri`` (``--metadata``): the workload, on a log or ledgers
    of the run's own, with only the faults of verify's own client process; the same checks
    (auto-recovery's only on the run's ledgers: the cluster's auditor is not verify's to
    run). What the run wrote is deleted at the end unless it found a violation (kept then,
    for whoever looks into it)."""
    started = time.monotonic()
    status.enter(f"connecting to {uri}")
    with stop.BoundedRunner() as runner:
        runner.run(_check_reachable(uri))
    out = config.out_dir / f"seed-{seed}"
    out.mkdir(parents=True, exist_ok=True)
    nemeses = list(config.nemeses)
    skipped: dict[str, str] = {}
    workload_config, schedule = _plan(config, seed, out, nemeses, skipped)
    history = History()
    status.history = history
    # A name of the run's own: the cluster may hold earlier runs' logs, or anyone's.
    name = f"verify-{seed}-{secrets.token_hex(4)}"
    workload: LedgerWorkload | LogWorkload
    if config.workload == "log":
        workload = LogWorkload(uri, history, seed, workload_config, name)
    else:
        workload = LedgerWorkload(uri, history, seed, workload_config)
    clients = workload if isinstance(workload, LedgerWorkload) else None
    nemesis = Nemesis(None, lambda: workload.created[-RECENT_LEDGERS:], clients=clients)
    with (
        _logs_to(out / "verify.log"),
        stop.killing(lambda: _kill_processes(None, workload, status.cleanup)),
        stop.BoundedRunner() as runner,
    ):
        try:
            faults, verdict = runner.run(
                _drive(config, uri, None, schedule, workload, nemesis, history, status)
            )
            if verdict.ok:
                status.enter("deleting what the run wrote")
                runner.run(_delete_written(uri, workload))
            else:
                log.warning(
                    "kept for whoever looks into it: %s%d ledger(s) %s",
                    f"log {name}, " if isinstance(workload, LogWorkload) else "",
                    len(set(workload.created)), sorted(set(workload.created)),
                )  # fmt: skip
        except BKeeperError as exc:
            log.warning("the harness could not finish the run: %s", exc, exc_info=True)
            _summarize(config, {"seed": seed, "harness_error": str(exc)})
            raise
    return _finish(config, seed, out, history, faults, verdict, skipped, started)


async def _check_reachable(uri: str) -> None:
    """``ConfigError`` (the campaign stops) unless a client starts on ``uri`` and the
    cluster has the writable bookies the workloads' ledgers need (E3)."""
    try:
        async with await BookKeeper(uri).start() as bk:
            writable = (await bk.cluster.registry.bookies()).writable
    except ConfigError:
        raise
    except BKeeperError as exc:
        raise ConfigError(f"cluster {uri}: {exc}") from exc
    if len(writable) < EXTERNAL_BOOKIES_MIN:
        raise ConfigError(
            f"cluster {uri}: {len(writable)} writable bookie(s); the workloads write "
            f"ledgers of {EXTERNAL_BOOKIES_MIN} (E3 Qw3 Qa2)"
        )


async def _delete_written(uri: str, workload: LedgerWorkload | LogWorkload) -> None:
    """Delete the log or the ledgers a run on someone's cluster wrote."""
    async with await start_client(uri) as bk:
        if isinstance(workload, LogWorkload):
            with contextlib.suppress(LogNotFoundError):
                await NamedLogs(bk, LogConfig()).delete(workload.name)
        written = workload.create_sent if isinstance(workload, LedgerWorkload) else []
        # A log's ledgers, also those it lost; every id a ledger create was sent for, also
        # one whose client process was killed before the answer.
        for ledger_id in dict.fromkeys([*workload.created, *written]):
            with contextlib.suppress(LedgerNotFoundError):
                await bk.delete_ledger(ledger_id, fence=False)


def _summarize(config: VerifyConfig, fields: dict[str, object]) -> str:
    """Append one run's line to ``summary.jsonl`` (a long campaign stopped midway keeps
    every verdict); returns the line."""
    line = json.dumps(fields, separators=(",", ":")) + "\n"
    with (config.out_dir / SUMMARY_NAME).open("a", encoding="utf-8") as summary:
        summary.write(line)
    return line


def keep_logs(data_dir: Path, into: Path, bytes_max: int = KEPT_LOG_BYTES_MAX) -> None:
    """Copy the cluster's logs (bookies, auto-recovery, ZooKeeper) out of its temporary
    directory, at most ``bytes_max`` of each (its end)."""
    into.mkdir(parents=True, exist_ok=True)
    for path in [*data_dir.glob("*.log"), *data_dir.glob("zookeeper/*.log")]:
        with path.open("rb") as f:
            f.seek(max(0, path.stat().st_size - bytes_max))
            (into / path.name).write_bytes(f.read())


@contextlib.contextmanager
def _logs_to(path: Path) -> Iterator[None]:
    """During a run, the log goes to ``path`` (faults make clients warn a lot: expected);
    what the console's handlers show is only errors."""
    root = logging.getLogger()
    quieted = [(h, h.level) for h in root.handlers]
    for handler, _level in quieted:
        handler.setLevel(max(handler.level, logging.ERROR))
    to_file = logging.FileHandler(path, encoding="utf-8")
    to_file.setLevel(logging.INFO)
    to_file.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(to_file)
    try:
        yield
    finally:
        root.removeHandler(to_file)
        to_file.close()
        for handler, level in quieted:
            handler.setLevel(level)


def _kill_processes(
    sandbox: Sandbox | None,
    workload: LedgerWorkload | LogWorkload | KvWorkload | None,
    cleanup: Cleanup,
) -> None:
    """SIGKILL every process of the run that still runs (a stop: :func:`stop.killing`; it
    only sends signals), counted in ``cleanup``: ZooKeeper, the bookies and what runs beside
    them, the kv members, the workload's client process. The unwinding then waits for none."""
    pids: list[int | None] = []
    if sandbox is not None:
        if sandbox.zookeeper.wait_nowait() is None:  # (not one the zk nemesis killed)
            pids.append(sandbox.zookeeper.pid)
        procs = [*sandbox.bookies, *sandbox.autorecoveries]
        procs += [] if sandbox.dashboard is None else [sandbox.dashboard]
        pids += [p.pid for p in procs if p.poll() is None]
    if isinstance(workload, KvWorkload):
        pids += [m.proc.pid for m in workload.members if m.proc and m.proc.poll() is None]
    if isinstance(workload, LedgerWorkload) and workload.client_process is not None:
        pids.append(workload.client_process.running_pid)
    for pid in pids:
        if pid is None or pid in cleanup.killed:
            continue
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue  # already gone (or reaped)
        cleanup.killed.add(pid)
        cleanup.processes += 1


def _teardown_counted(network: Network, cleanup: Cleanup) -> None:
    namespaces = network.bookies + network.members
    network.teardown()
    cleanup.namespaces += namespaces


def _count_mounts(cleanup: Cleanup, disks: dict[int, Path]) -> None:
    cleanup.mounts += len(disks)


@contextlib.contextmanager
def _counted_temp_dir(cleanup: Cleanup) -> Iterator[str]:
    try:
        with tempfile.TemporaryDirectory(prefix="bkeeper-verify-") as tmp:
            yield tmp
    finally:
        cleanup.temp_dirs += 1


def _sandbox_config(data_dir: Path, bookies: int, seed: int, slow_disks: bool) -> SandboxConfig:
    rng = random.Random(seed ^ 0x5EED)
    for _ in range(PORT_ATTEMPTS_MAX):
        base = rng.randrange(20_000, 30_000)
        ports = [base, *range(base + 1, base + 1 + bookies)]
        if all(port_free("127.0.0.1", p) for p in ports):
            return SandboxConfig(
                data_dir=data_dir,
                bookies=bookies,
                zookeeper_port=base,
                bookie_port_base=base + 1,
                start_timeout_s=90.0,  # a bookie restarted after kill -9 waits out its session
                bookie_args=("-o", "lost_bookie_recovery_delay_s=2"),
                bookie_env=((SLOW_SYNC_ENV, "1"),) if slow_disks else (),
            )
    raise ConfigError(
        f"no free ports for a cluster of {bookies} bookies after {PORT_ATTEMPTS_MAX} tries"
    )


async def _drive(
    config: VerifyConfig,
    uri: str,
    sandbox: Sandbox | None,
    schedule: tuple[Fault, ...],
    workload: LedgerWorkload | LogWorkload | KvWorkload,
    nemesis: Nemesis | KvNemesis,
    history: History,
    status: RunStatus,
) -> tuple[list[tuple[Fault, str]], Verdict]:
    loop = asyncio.get_running_loop()
    finish = asyncio.Event()
    start = loop.time()
    status.enter("workload with faults", config.duration_s)
    task = asyncio.create_task(workload.run(finish))
    done: list[tuple[Fault, str]] = []
    harness: list[str] = []
    try:
        for fault in schedule:
            await _until(start + fault.at_s, task)
            what = await _step(history, nemesis.inject, fault, "inject", harness)
            await _until(start + fault.heal_s, task)
            healed = await _step(history, nemesis.heal, fault, "heal", harness)
            done.append((fault, f"{what}; {healed}"))
        await _until(start + config.duration_s, task)
    finally:
        finish.set()
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            task.cancel()  # stopped (Ctrl-C): the workload's clients close at once
        await task  # the workload's own failure (a harness bug) is raised here
    status.enter("reading back and checking the history")
    if isinstance(workload, KvWorkload):
        verdict = Verdict()
        readable = await workload.finish(verdict)
        checked = check_kv(history)
        for line in checked.violations:
            verdict.violate(line)
        verdict.count += checked.count - len(checked.violations)
        verdict.acknowledged, verdict.reads = checked.acknowledged, checked.reads
        verdict.ledgers = len(readable)
    elif isinstance(workload, LogWorkload):
        try:
            records, mark, readable = await read_log(uri, workload.name)
            verdict = check_log(history, records, mark)
        except BKeeperError as exc:
            verdict, readable = Verdict(), []
            verdict.violate(f"the log could not be read whole at the end: {exc}")
    else:
        final = await read_final(uri, list(workload.created))
        verdict = check_ledgers(history, final)
        readable = [ledger_id for ledger_id, found in final.items() if not found.error]
    for line in harness:
        verdict.violate(line)
    # The kv store's leader truncates its log after each snapshot: a ledger of it may go.
    gone_ok = isinstance(workload, KvWorkload)
    await _check_replication(
        uri, readable, config.settle_s, verdict, gone_ok, audit=sandbox is not None,
        status=status,
    )  # fmt: skip
    base = nemesis.base if isinstance(nemesis, KvNemesis) else nemesis
    if sandbox is not None:
        await _check_flipped(sandbox, base.flipped, verdict)
    return done, verdict


async def _check_flipped(
    sandbox: Sandbox, flipped: list[tuple[int, FlippedEntries]], verdict: Verdict
) -> None:
    """Each entry a ``corrupt-entry-log`` fault damaged on a bookie is whole there again
    (read from that bookie alone, its digest checked), unless the bookie no longer has to
    hold it (its ledger gone, or the entry's write set changed)."""
    if not flipped:
        return
    async with await start_client(sandbox.metadata_uri) as bk:
        for index, damaged in flipped:
            host, port = sandbox.bookie_address(index)
            bookie = f"{host}:{port}"
            try:
                meta = await bk.ledger_metadata(damaged.ledger_id)
            except LedgerNotFoundError:
                continue  # deleted since (the kv store truncates its log)
            handle = await bk.open_ledger(damaged.ledger_id, meta.password, recovery=False)
            try:
                for entry_id in damaged.entry_ids:
                    ensemble = [str(b) for b in meta.ensemble_for(entry_id)]
                    members = write_set(entry_id, meta.ensemble_size, meta.write_quorum)
                    if bookie not in [ensemble[i] for i in members]:
                        continue
                    try:
                        await handle.read_entry_from(bookie, entry_id)
                    except BKeeperError as exc:
                        verdict.violate(
                            f"ledger {damaged.ledger_id} entry {entry_id}: bookie {bookie} "
                            f"still lacks a whole copy after its entry log was damaged: {exc}"
                        )
            finally:
                await handle.close()


def _unknown_writes(history: History) -> int:
    return sum(1 for op in history if op.type == "info" and op.f in ("put", "delete", "cas"))


async def _step(
    history: History,
    step: object,
    fault: Fault,
    what: str,
    harness: list[str],
) -> str:
    assert callable(step)
    target = -1 if fault.target is None else fault.target
    history.add("nemesis", "invoke", f"{what} {fault.kind}", entry=target)
    try:
        done: str = await step(fault)
    except (BKeeperError, OSError) as exc:
        history.add("nemesis", "fail", f"{what} {fault.kind}", entry=target, error=str(exc))
        harness.append(f"{fault.describe()}: {what} failed: {exc}")
        return f"{what} failed: {exc}"
    history.add("nemesis", "ok", f"{what} {fault.kind}", entry=target, value=done)
    return done


async def _until(when: float, task: asyncio.Task[None]) -> None:
    delay = when - asyncio.get_running_loop().time()
    if delay > 0:
        with contextlib.suppress(TimeoutError):
            await within(asyncio.shield(task), delay)
    if task.done():
        task.result()  # a workload that ended early: its error, raised


async def _audit_and_settle(bk: BookKeeper, settle_s: float, verdict: Verdict) -> None:
    """The auditor's replicas check over the cluster, once; then the workers have
    ``settle_s`` to repair what it marked, and a ledger still marked is a violation."""
    urm = bk.cluster.underreplication
    await urm.ensure_layout()
    await Auditor(bk, urm, AutoRecoveryConfig()).replicas_check()
    deadline = asyncio.get_running_loop().time() + settle_s
    while asyncio.get_running_loop().time() < deadline:
        if not [x async for x in urm.ledger_ids()]:
            break
        await asyncio.sleep(1.0)
    marked = sorted([x async for x in urm.ledger_ids()])
    if marked:
        verdict.violate(
            f"{len(marked)} ledgers still marked under-replicated {settle_s:g} s after "
            f"the faults stopped: {marked[:10]}"
        )


async def _check_replication(
    uri: str,
    ledger_ids: list[int],
    settle_s: float,
    verdict: Verdict,
    gone_ok: bool = False,
    *,
    audit: bool = True,
    status: RunStatus | None = None,
) -> None:
    """``gone_ok``: a ledger deleted meanwhile is skipped (else its absence is an error).
    ``audit``: run the auditor's replicas check over the cluster and give the workers
    ``settle_s`` first (on verify's own cluster; someone else's is its own auditor's)."""
    status = status or RunStatus()
    async with await start_client(uri) as bk:
        if audit:
            status.enter("settling: auto-recovery repairs what the faults left", settle_s)
            await _audit_and_settle(bk, settle_s, verdict)
        status.enter(f"checking the replicas of {len(ledger_ids)} ledgers")
        live = (await bk.cluster.registry.bookies()).writable
        lists = asyncio.Semaphore(32)
        for ledger_id in ledger_ids:
            try:
                meta = await bk.ledger_metadata(ledger_id)
            except LedgerNotFoundError:
                if gone_ok:
                    continue
                raise
            shortfall, unknown, _asked = await list_ledger(bk, ledger_id, meta, live, lists)
            if shortfall:
                verdict.violate(
                    f"ledger {ledger_id}: replicas lack entries after repair: "
                    f"{dict(shortfall.lacking)}"
                )
            if unknown:
                verdict.violate(f"ledger {ledger_id}: replicas could not list entries: {unknown}")
