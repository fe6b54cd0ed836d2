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
end unless it found a violation (:func:`~bkeeper.verify.external.run_external`).

The history (JSON lines), the schedule, the log, a command that repeats the run, the verdict
(``verdict.txt``: faults as injected, counts, violations; ``result.json``: the same as one
JSON line) and, for a run with a violation, the cluster's process logs (``logs/``) are written
to ``out_dir/seed-<seed>/``; each finished run's verdict is also appended to
``out_dir/summary.jsonl``.
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
from pathlib import Path

from bkeeper.common.errors import BKeeperError, ConfigError
from bkeeper.storage.slow_sync import ENV_VAR as SLOW_SYNC_ENV
from bkeeper.testing.sandbox import Sandbox, SandboxConfig
from bkeeper.testing.tmpfs import mounted_tmpfs
from bkeeper.testing.zookeeper import port_free
from bkeeper.verify import stop
from bkeeper.verify.drive import drive
from bkeeper.verify.external import run_external
from bkeeper.verify.history import History
from bkeeper.verify.kv_workload import MEMBERS, KvNemesis, KvWorkload
from bkeeper.verify.log_workload import LogWorkload
from bkeeper.verify.nemesis import RECENT_LEDGERS, Nemesis
from bkeeper.verify.netns import NetnsSandbox, Network
from bkeeper.verify.run_config import EXTERNAL_WORKLOADS, WORKLOADS, RunResult, VerifyConfig
from bkeeper.verify.run_records import (
    SUMMARY_NAME,
    finish_run,
    keep_logs,
    logs_to,
    plan_run,
    summarize,
)
from bkeeper.verify.schedule import MEMBER_PARTITIONS, PARTITIONS
from bkeeper.verify.status import RunStatus
from bkeeper.verify.teardown import count_mounts, counted_temp_dir, kill_processes, teardown_counted
from bkeeper.verify.workload import LedgerWorkload

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

#: Bytes of each bookie's own tmpfs (``disk-full``).
BOOKIE_DISK_BYTES = 256 * 1024 * 1024


#: Attempts at finding free ports for a run's cluster.
PORT_ATTEMPTS_MAX = 20


def run_once(config: VerifyConfig, seed: int, status: RunStatus | None = None) -> RunResult:
    """One run (module doc); raises only for what stops the harness itself (ports, Java).
    ``status`` follows the run's phases, and after a stop (``KeyboardInterrupt``) says what
    was cleaned up."""
    status = status or RunStatus()
    if config.metadata is not None:
        return run_external(config, config.metadata, seed, status)
    started = time.monotonic()
    out = config.out_dir / f"seed-{seed}"
    out.mkdir(parents=True, exist_ok=True)
    nemeses = list(config.nemeses)
    skipped: dict[str, str] = {}
    cleanup = status.cleanup
    with (
        logs_to(out / "verify.log"),
        counted_temp_dir(cleanup) as tmp,
        contextlib.ExitStack() as stack,
    ):
        data_dir = Path(tmp)
        disks: dict[int, Path] = {}
        if "disk-full" in nemeses:
            status.enter("mounting a tmpfs per bookie")
            stack.callback(count_mounts, cleanup, disks)  # runs after they are unmounted
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
                stack.callback(teardown_counted, network, cleanup)
            except ConfigError as exc:
                for name in partitions:
                    skipped[name] = str(exc)
                    nemeses.remove(name)
                network = None
        workload_config, schedule = plan_run(config, seed, out, nemeses, skipped)
        sandbox_config = _sandbox_config(data_dir, config.bookies, seed, "slow-disk" in nemeses)
        sandbox = (
            Sandbox(sandbox_config) if network is None else NetnsSandbox(sandbox_config, network)
        )
        history = History()
        status.history = history
        workload: LedgerWorkload | LogWorkload | KvWorkload | None = None
        members: KvWorkload | None = None
        harness_failed = False
        stack.enter_context(stop.killing(lambda: kill_processes(sandbox, workload, cleanup)))
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
                driven = drive(config, uri, sandbox, schedule, workload, nemesis, history, status)
                # SIGTERM, Ctrl-C: out of the loop at once (its processes already killed:
                # the runner's clean-up waits for none of them)
                faults, verdict = runner.run(driven)
        except BKeeperError as exc:  # the harness could not finish the run: its logs are
            # kept and it is a line of the summary too, so that it can be looked into
            harness_failed = True
            # the trace to the run's log only (the console says it in one line, below)
            log.warning("the harness could not finish the run: %s", exc, exc_info=True)
            summarize(config, {"seed": seed, "harness_error": str(exc)})
            raise
        finally:
            status.enter("stopping the cluster")
            if stop.requested() is not None:
                kill_processes(sandbox, workload, cleanup)  # one started since the signal
            if members is not None:
                members.stop_members()
            sandbox.stop()
            if harness_failed:
                keep_logs(data_dir, out / "logs")
        if not verdict.ok:  # the processes' logs, for whoever looks into it
            keep_logs(data_dir, out / "logs")
    return finish_run(config, seed, out, history, faults, verdict, skipped, started)


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
