"""A verification run on a cluster given with ``--metadata`` instead of one of its own:
the ledger or log workload, only the faults of verify's own client process, the replicas
check without the auditor's pass (the cluster's auditor is not verify's to run), and what
the run wrote deleted at the end unless it found a violation."""

from __future__ import annotations

import contextlib
import logging
import secrets
import time

from bkeeper.client.bookkeeper import BookKeeper
from bkeeper.common.errors import BKeeperError, ConfigError, LedgerNotFoundError, LogNotFoundError
from bkeeper.namedlog import LogConfig, NamedLogs
from bkeeper.verify import stop
from bkeeper.verify.drive import drive
from bkeeper.verify.history import History
from bkeeper.verify.log_workload import LogWorkload
from bkeeper.verify.nemesis import RECENT_LEDGERS, Nemesis
from bkeeper.verify.run_config import RunResult, VerifyConfig
from bkeeper.verify.run_records import finish_run, logs_to, plan_run, summarize
from bkeeper.verify.status import RunStatus
from bkeeper.verify.teardown import kill_processes
from bkeeper.verify.workload import LedgerWorkload, start_client

__all__ = ["EXTERNAL_BOOKIES_MIN", "check_reachable", "delete_written", "run_external"]

log = logging.getLogger(__name__)

#: The writable bookies a cluster given with ``--metadata`` needs (the ledgers are E3).
EXTERNAL_BOOKIES_MIN = 3


def run_external(config: VerifyConfig, uri: str, seed: int, status: RunStatus) -> RunResult:
    """One run on the cluster at ``uri`` (``--metadata``): the workload, on a log or ledgers
    of the run's own, with only the faults of verify's own client process; the same checks
    (auto-recovery's only on the run's ledgers: the cluster's auditor is not verify's to
    run). What the run wrote is deleted at the end unless it found a violation (kept then,
    for whoever looks into it)."""
    started = time.monotonic()
    status.enter(f"connecting to {uri}")
    with stop.BoundedRunner() as runner:
        runner.run(check_reachable(uri))
    out = config.out_dir / f"seed-{seed}"
    out.mkdir(parents=True, exist_ok=True)
    nemeses = list(config.nemeses)
    skipped: dict[str, str] = {}
    workload_config, schedule = plan_run(config, seed, out, nemeses, skipped)
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
        logs_to(out / "verify.log"),
        stop.killing(lambda: kill_processes(None, workload, status.cleanup)),
        stop.BoundedRunner() as runner,
    ):
        try:
            faults, verdict = runner.run(
                drive(config, uri, None, schedule, workload, nemesis, history, status)
            )
            if verdict.ok:
                status.enter("deleting what the run wrote")
                runner.run(delete_written(uri, workload))
            else:
                log.warning(
                    "kept for whoever looks into it: %s%d ledger(s) %s",
                    f"log {name}, " if isinstance(workload, LogWorkload) else "",
                    len(set(workload.created)),
                    sorted(set(workload.created)),
                )
        except BKeeperError as exc:
            log.warning("the harness could not finish the run: %s", exc, exc_info=True)
            summarize(config, {"seed": seed, "harness_error": str(exc)})
            raise
    return finish_run(config, seed, out, history, faults, verdict, skipped, started)


async def check_reachable(uri: str) -> None:
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


async def delete_written(uri: str, workload: LedgerWorkload | LogWorkload) -> None:
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
