"""The middle of a verification run: the workload runs while the nemesis injects and heals
the schedule's faults on time; then the workload's data is read back and the history checked
(:mod:`~bkeeper.verify.check`, ``check_kv``, ``check_log``), and the replicas
(:mod:`~bkeeper.verify.end_checks`). A fault the harness could not inject or heal is a
violation."""

from __future__ import annotations

import asyncio
import contextlib

from bkeeper.common.errors import BKeeperError
from bkeeper.common.tasks import within
from bkeeper.testing.sandbox import Sandbox
from bkeeper.verify.check import Verdict, check_ledgers
from bkeeper.verify.check_kv import add_kv_checks
from bkeeper.verify.check_log import check_log
from bkeeper.verify.end_checks import check_flipped, check_listed, check_replication
from bkeeper.verify.history import History
from bkeeper.verify.kv_workload import KvNemesis, KvWorkload
from bkeeper.verify.log_workload import LogWorkload, read_log
from bkeeper.verify.nemesis import Nemesis
from bkeeper.verify.run_config import VerifyConfig
from bkeeper.verify.schedule import Fault
from bkeeper.verify.status import RunStatus
from bkeeper.verify.workload import LedgerWorkload, read_final

__all__ = ["drive"]


async def drive(
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
        add_kv_checks(verdict, history, len(readable))
    elif isinstance(workload, LogWorkload):
        try:
            records, mark, readable = await read_log(uri, workload.name, workload.log_config)
            verdict = check_log(history, records, mark)
            readable = await check_listed(uri, readable, verdict)
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
    await check_replication(
        uri,
        readable,
        config.settle_s,
        verdict,
        gone_ok,
        audit=sandbox is not None,
        status=status,
    )
    base = nemesis.base if isinstance(nemesis, KvNemesis) else nemesis
    if sandbox is not None:
        await check_flipped(sandbox, base.flipped, verdict)
    return done, verdict


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
