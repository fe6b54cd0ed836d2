"""One simulated run: a seed in, a verdict and a trace hash out.

:func:`run_seed` builds a :class:`~bkeeper.sim.world.World` on a new
:class:`~bkeeper.sim.loop.SimLoop`, starts the workload (the same
:class:`~bkeeper.verify.workload.LedgerWorkload` as ``bkeeper verify``, its clients on the
simulated network and clock), applies the seed's fault plan for ``duration_s`` simulated
seconds, stops the workload, heals every fault, reads every ledger back with recovery and
runs ``verify``'s checker over the history. Everything random is drawn from generators
seeded from the run's seed (and Python's global generator, which production code uses for
jitter, is seeded too), so the same seed is the same run: the same trace hash.

A run is **failed** when the checker finds a violation, a bookie cannot start again on
what its disk kept, a storage thread raises, or the run itself cannot go on (stuck, or
past :data:`RUN_SIM_S_MAX` simulated seconds).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
import re
import resource
from dataclasses import dataclass, field
from typing import Any

from bkeeper.autorecovery.config import AutoRecoveryConfig
from bkeeper.common import bugs
from bkeeper.common.clock import set_default_clock
from bkeeper.common.errors import BKeeperError
from bkeeper.common.tasks import within
from bkeeper.meta.memory import drop_memory_tree
from bkeeper.namedlog import LogConfig
from bkeeper.sim.faults import FAULT_KINDS, Fault, Nemesis, plan_faults
from bkeeper.sim.kv import KV_CLIENT, SimKv
from bkeeper.sim.loop import START_S, SimClock, SimLoop, SimStuckError
from bkeeper.sim.trace import Trace
from bkeeper.sim.world import World
from bkeeper.verify.check import Verdict, check_ledgers
from bkeeper.verify.check_kv import add_kv_checks
from bkeeper.verify.check_log import check_log
from bkeeper.verify.end_checks import check_listed, check_replication
from bkeeper.verify.history import History
from bkeeper.verify.log_workload import LogWorkload, read_log
from bkeeper.verify.workload import LedgerWorkload, WorkloadConfig, read_final

__all__ = ["RUN_SIM_S_MAX", "SimResult", "SimRunConfig", "run_seed"]

log = logging.getLogger(__name__)

#: A run still going this many simulated seconds after its workload should have stopped is
#: stuck (a hang the simulator reports instead of waiting for).
RUN_SIM_S_MAX = 600.0
#: How long the workload gets to stop after its duration (each of its operations is bounded
#: by its op timeout).
WORKLOAD_STOP_S = 60.0
WORKLOADS = ("ledger", "log", "kv")
#: The log workload's log: ledgers of a few records (a writer holds the log for seconds, one
#: append each ``append_every_s``), so that a run of 30 s rolls several times.
SIM_LOG_CONFIG = LogConfig(roll_bytes=150, tail_poll_ms=200)
#: Simulated seconds auto-recovery has, once every fault healed, to repair what they left
#: (then every replica of every ledger must hold its entries).
SETTLE_S = 120.0
#: Operations of the violating ledgers a failed run's trace tells at most.
STORY_OPS_MAX = 200
#: The simulated client nodes: the writers', and the fencer's and readers'.
CLIENTS = ("writer", "reader")


@dataclass(frozen=True)
class SimRunConfig:
    seed: int
    workload: str = "ledger"
    duration_s: float = 30.0
    bookies: int = 4
    fault_kinds: tuple[str, ...] = FAULT_KINDS
    #: run with exactly these faults instead of the seed's plan (shrinking)
    faults: tuple[Fault, ...] | None = None
    #: known bugs put back for this run (:mod:`bkeeper.common.bugs`; tests of the simulator)
    bugs: tuple[str, ...] = ()
    #: auto-recovery in every bookie node, and the replicas checked once the faults heal
    autorecovery: bool = True
    #: each writer's pause after an append, and the reader's between reads
    append_every_s: float = 0.5
    read_every_s: tuple[float, float] = (1.0, 3.0)


@dataclass(frozen=True)
class SimResult:
    seed: int
    trace_hash: str
    violations: tuple[str, ...]
    faults: int
    acknowledged: int
    ledgers: int
    sim_s: float
    cpu_s: float
    plan: tuple[Fault, ...] = ()
    trace: tuple[str, ...] = field(default=(), repr=False)
    workload: str = "ledger"

    @property
    def ok(self) -> bool:
        return not self.violations


_names = itertools.count(1)


def run_seed(config: SimRunConfig) -> SimResult:
    """Run one seed to its verdict (module doc)."""
    if config.workload not in WORKLOADS:
        raise ValueError(f"workload {config.workload!r}: one of {', '.join(WORKLOADS)}")
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    random.seed(config.seed)
    loop = SimLoop()
    run = _Run(loop, config)
    system_clock = set_default_clock(SimClock())  # nothing in the run reads real time
    no_bugs = bugs.set_active(config.bugs)
    try:
        loop.run_until_complete(run.bounded())
    except SimStuckError as exc:
        run.violations.append(f"stuck: {exc}")
        drop_memory_tree(run.world.name)
    finally:
        with contextlib.suppress(Exception):
            _cancel_all(loop)
        loop.close()
        set_default_clock(system_clock)
        bugs.set_active(no_bugs)
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu_s = (after.ru_utime - cpu.ru_utime) + (after.ru_stime - cpu.ru_stime)
    return run.result(round(cpu_s, 4))


def _cancel_all(loop: SimLoop) -> None:
    tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))


class _Run:
    def __init__(self, loop: SimLoop, config: SimRunConfig) -> None:
        self.loop = loop
        self.config = config
        seeds = random.Random(config.seed)
        net_rng, meta_rng, disk_rng, fault_rng = (
            random.Random(seeds.getrandbits(64)) for _ in "1234"
        )
        self.trace = Trace(loop.time, START_S)
        self.world = World(
            loop,
            f"sim-{config.seed}-{next(_names)}",
            net_rng,
            meta_rng,
            disk_rng,
            self.trace,
            config.bookies,
            autorecovery=AutoRecoveryConfig() if config.autorecovery else None,
        )
        self.kv = SimKv(self.world, config.seed) if config.workload == "kv" else None
        names = [b.name for b in self.world.bookies]
        self.plan = (
            config.faults
            if config.faults is not None
            else plan_faults(
                fault_rng,
                config.duration_s,
                names,
                (KV_CLIENT,) if self.kv is not None else CLIENTS,
                config.fault_kinds,
                members=self.kv.nodes if self.kv is not None else (),
            )
        )
        self.nemesis = Nemesis(self.world, self.kv)
        self.violations: list[str] = []
        self.acknowledged = self.ledgers = 0

    async def bounded(self) -> None:
        """:meth:`run`, failed once it passes :data:`RUN_SIM_S_MAX` simulated seconds."""
        try:
            await within(self.run(), RUN_SIM_S_MAX)
        except TimeoutError:
            self.violations.append(
                f"the run did not end within {RUN_SIM_S_MAX:.0f} simulated seconds (a hang)"
            )

    async def run(self) -> None:
        world, config = self.world, self.config
        try:
            await world.start()
            clock = SimClock()
            history, kv = History(clock=clock), self.kv
            stop = asyncio.Event()
            workload = None
            work: asyncio.Future[Any]
            if kv is not None:
                for node in kv.nodes:
                    kv.start_member(node)
                work = world.spawn(KV_CLIENT, kv.clients(history).run(stop))
            else:
                workload = self._workload(history, clock)
                if isinstance(workload, LogWorkload):
                    await world.as_node("writer", workload.create())
                writers = world.spawn("writer", workload.run_writers(stop))
                others = world.spawn("reader", workload.run_others(stop))
                work = asyncio.gather(writers, others)
            faults = world.spawn("nemesis", self.nemesis.run(self.plan))
            await asyncio.sleep(config.duration_s)
            stop.set()
            faults.cancel()
            try:
                await within(work, WORKLOAD_STOP_S)
            except TimeoutError:
                self.violations.append(f"the workload did not stop within {WORKLOAD_STOP_S:.0f}s")
            except Exception as exc:
                self.violations.append(f"the workload failed: {exc!r}")
            await self.nemesis.heal_all()
            if kv is not None:
                verdict, readable = await self._check_kv(kv, history)
            elif isinstance(workload, LogWorkload):
                verdict, readable = await self._check_log(workload, history)
            else:
                assert workload is not None
                final = await world.as_node(
                    "checker", read_final(world.uri, list(workload.created), clock=clock)
                )
                verdict = check_ledgers(history, final)
                readable = list(workload.created)
            self.violations.extend(verdict.violations)
            self._story(history, verdict.violations)
            self.acknowledged, self.ledgers = verdict.acknowledged, verdict.ledgers
            self.trace.note(f"{verdict.count} {verdict.acknowledged} {verdict.reads}".encode())
            if config.autorecovery:
                replicas = Verdict()
                await world.as_node(
                    "checker",
                    # the kv store truncates its log: a ledger of it may go meanwhile
                    check_replication(world.uri, readable, SETTLE_S, replicas, kv is not None),
                )
                self.violations.extend(replicas.violations)
        finally:
            if self.kv is not None:
                await self.kv.stop_all()
            await world.stop()

    def _workload(self, history: History, clock: SimClock) -> LedgerWorkload | LogWorkload:
        config = self.config
        workload_config = WorkloadConfig(
            writers=2,
            readers=1,
            in_flight=8,
            entries_per_ledger=(5, 60),
            entry_bytes=64,
            fence_every_s=(2.0, 6.0),
            op_timeout_s=10.0,
            append_pause_s=config.append_every_s,
            read_every_s=config.read_every_s,
        )
        if config.workload == "log":
            return LogWorkload(
                self.world.uri, history, config.seed, workload_config, log_config=SIM_LOG_CONFIG
            )
        return LedgerWorkload(self.world.uri, history, config.seed, workload_config, clock=clock)

    async def _check_kv(self, kv: SimKv, history: History) -> tuple[Verdict, list[int]]:
        """The store read and converged at the end, the history checked linearizable; the
        log's ledgers."""
        verdict = Verdict()
        readable = await self.world.as_node("checker", kv.finish(history, verdict))
        add_kv_checks(verdict, history, len(readable))
        return verdict, readable

    async def _check_log(
        self, workload: LogWorkload, history: History
    ) -> tuple[Verdict, list[int]]:
        """The log read whole and checked; its ledgers (every one it names must exist: one
        that is gone fails the read)."""
        try:
            records, mark, listed = await self.world.as_node(
                "checker", read_log(self.world.uri, workload.name, workload.log_config)
            )
        except BKeeperError as exc:
            verdict = Verdict()
            verdict.violate(f"the log could not be read whole at the end: {exc}")
            return verdict, []
        verdict = check_log(history, records, mark)
        found = await self.world.as_node("checker", check_listed(self.world.uri, listed, verdict))
        return verdict, found

    def _story(self, history: History, violations: list[str]) -> None:
        """The operations on the ledgers a violation names, into the trace (the part of the
        history a person reads first)."""
        named = {int(m) for line in violations for m in re.findall(r"ledger (\d+)", line)}
        if not named:
            return
        self.trace.event("checker", f"the history of ledger(s) {sorted(named)}:")
        ops = [op for op in history if op.ledger in named and op.type != "invoke"]
        for op in ops[-STORY_OPS_MAX:]:
            at = f"{op.time_s:10.4f}"
            what = f"{op.f} {op.type} ledger {op.ledger} entry {op.entry} {op.error}".rstrip()
            self.trace.event(op.process, f"[at {at}] {what}")

    def result(self, cpu_s: float) -> SimResult:
        violations = [*self.violations, *self.world.failures]
        for line in violations:
            self.trace.event("checker", f"VIOLATION {line}")
        return SimResult(
            seed=self.config.seed,
            trace_hash=self.trace.digest,
            violations=tuple(violations),
            faults=self.nemesis.applied,
            acknowledged=self.acknowledged,
            ledgers=self.ledgers,
            sim_s=round(self.loop.time() - START_S, 3),
            cpu_s=cpu_s,
            plan=self.plan,
            trace=tuple(self.trace.lines) if violations else (),
            workload=self.config.workload,
        )
