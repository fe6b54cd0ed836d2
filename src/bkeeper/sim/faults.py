"""A run's faults: planned from the seed before the run starts (pure), applied on time.

Kinds (each with a duration, then healed):

- ``crash``: a bookie's process dies (unsynced writes lost, the last one possibly torn) and
  starts again on its disk when the fault ends;
- ``partition``: the network between two nodes (a client and a bookie, or two bookies) is
  cut, both ways or one way;
- ``zk-cut``: a node loses the metadata service (a cut past the session timeout expires its
  session);
- ``zk-loss``: the metadata service loses requests and answers at random;
- ``slow``: a node's links take 20 times longer;
- ``corrupt``: a ``crash``, and then one payload bit of each entry of one ledger in the last
  group of the bookie's newest journal file flipped, durably (media damage to data that may
  have been acknowledged): started again, the bookie must answer "unknown" for that ledger,
  never "absent", until its integrity check has repaired it from the other replicas;
- ``member-crash`` (kv workload): a kv store member's process dies, and starts again when the
  fault ends (:mod:`bkeeper.sim.kv`). With members, partitions, ``zk-cut`` and ``slow`` reach
  them too.

The plan is a tuple of :class:`Fault`, so a failing run can be run again with fewer of them
(:mod:`bkeeper.sim.shrink`) and everything else the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bkeeper.sim.world import World

if TYPE_CHECKING:
    from bkeeper.sim.kv import SimKv

__all__ = ["FAULT_KINDS", "Fault", "Nemesis", "plan_faults"]

FAULT_KINDS = ("crash", "partition", "zk-cut", "zk-loss", "slow", "corrupt", "member-crash")
#: Faults begin no later than this long before a run's end (the rest of it heals).
QUIET_END_S = 2.0
#: A ``zk-loss`` fault's chance of losing each request, and each answer.
ZK_LOSS = 0.05
#: How much longer a ``slow`` node's links take.
SLOW_FACTOR = 20.0


@dataclass(frozen=True)
class Fault:
    at_s: float
    kind: str
    target: str
    duration_s: float
    #: a partition that cuts only ``a -> b`` of ``target`` "a|b"
    one_way: bool = False

    def describe(self) -> str:
        what = self.target.replace("|", " -/> " if self.one_way else " <-/-> ")
        return f"{self.kind} {what} for {self.duration_s:.2f}s"


def plan_faults(
    rng: random.Random,
    duration_s: float,
    bookies: Sequence[str],
    clients: Sequence[str],
    kinds: Sequence[str] = FAULT_KINDS,
    members: Sequence[str] = (),
) -> tuple[Fault, ...]:
    """Faults at random times until :data:`QUIET_END_S` before the end (module doc).
    ``members``: the kv store's member nodes (none: no ``member-crash``)."""
    faults: list[Fault] = []
    kinds = [k for k in kinds if k != "member-crash" or members]
    if not kinds:
        return ()
    # With members, they are clients of the bookies and servers of the clients.
    callers, servers = [*clients, *members], [*bookies, *members]
    at = rng.uniform(0.5, 2.0)
    while at < duration_s - QUIET_END_S:
        kind = rng.choice(list(kinds))
        one_way = False
        if kind in ("crash", "corrupt"):
            target, length = rng.choice(list(bookies)), rng.uniform(0.2, 6.0)
        elif kind == "member-crash":
            target, length = rng.choice(list(members)), rng.uniform(0.5, 8.0)
        elif kind == "partition":
            if rng.random() < 0.7 or len(bookies) < 2:
                pair = [rng.choice(callers), rng.choice(servers)]
                while members and pair[0] == pair[1]:
                    pair[1] = rng.choice(servers)
                rng.shuffle(pair)
            else:
                pair = rng.sample(list(bookies), 2)
            target, length, one_way = "|".join(pair), rng.uniform(0.2, 8.0), rng.random() < 0.3
        elif kind == "zk-cut":
            target, length = rng.choice([*bookies, *callers]), rng.uniform(0.5, 10.0)
        elif kind == "zk-loss":
            target, length = "zk", rng.uniform(0.5, 5.0)
        else:
            target, length = rng.choice([*bookies, *callers]), rng.uniform(0.5, 5.0)
        faults.append(Fault(round(at, 4), kind, target, round(length, 4), one_way))
        at += rng.uniform(0.3, 3.0)
    return tuple(faults)


class Nemesis:
    """Applies a plan to a :class:`World` and heals each fault when it ends; overlapping
    faults of one target heal when the last one ends."""

    def __init__(self, world: World, kv: SimKv | None = None) -> None:
        self.world = world
        self.kv = kv
        self._held: Counter[tuple[str, str]] = Counter()
        #: bookie -> the task starting it again (until it is up)
        self._restarts: dict[str, asyncio.Task[None]] = {}
        self._heals: list[asyncio.TimerHandle] = []
        self.applied = 0

    async def run(self, faults: Sequence[Fault]) -> None:
        loop = self.world.loop
        start = loop.time()
        for fault in faults:
            wait = start + fault.at_s - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            self._apply(fault)
            self._heals.append(loop.call_later(fault.duration_s, self._heal, fault))

    def _apply(self, fault: Fault) -> None:
        world = self.world
        self.applied += 1
        world.trace.event("nemesis", fault.describe())
        if fault.kind in ("crash", "corrupt"):
            key = ("crash", fault.target)
            self._held[key] += 1
            sim = world.bookie(fault.target)
            restart = self._restarts.pop(fault.target, None)
            if restart is not None:
                restart.cancel()  # down again before it was up: it waits for this heal
            world.crash_bookie(sim)
            if fault.kind == "corrupt":
                world.trace.event(fault.target, f"corrupt: {world.corrupt_journal(sim)}")
        elif fault.kind == "member-crash":
            if self.kv is None:
                raise ValueError("member-crash: no kv store in this run")
            self._held[("member", fault.target)] += 1
            self.kv.crash_member(fault.target)
        elif fault.kind == "partition":
            a, b = fault.target.split("|")
            for src, dst in [(a, b)] if fault.one_way else [(a, b), (b, a)]:
                self._held[("cut", f"{src}|{dst}")] += 1
                world.net.cut(src, dst)
        elif fault.kind == "zk-cut":
            self._held[("zk-cut", fault.target)] += 1
            world.meta.cut(fault.target)
        elif fault.kind == "zk-loss":
            self._held[("zk-loss", "zk")] += 1
            world.meta.loss = ZK_LOSS
        elif fault.kind == "slow":
            self._held[("slow", fault.target)] += 1
            world.net.slow[fault.target] = SLOW_FACTOR
        else:
            raise ValueError(f"unknown fault kind {fault.kind!r}")

    def _release(self, key: tuple[str, str]) -> bool:
        if key not in self._held:
            return False
        self._held[key] -= 1
        if self._held[key] > 0:
            return False
        del self._held[key]
        return True

    def _heal(self, fault: Fault) -> None:
        world = self.world
        world.trace.event("nemesis", f"heal {fault.describe()}")
        if fault.kind in ("crash", "corrupt"):
            if self._release(("crash", fault.target)):
                self._restart(fault.target)
        elif fault.kind == "member-crash":
            if self._release(("member", fault.target)) and self.kv is not None:
                self.kv.start_member(fault.target)
        elif fault.kind == "partition":
            a, b = fault.target.split("|")
            for src, dst in [(a, b)] if fault.one_way else [(a, b), (b, a)]:
                if self._release(("cut", f"{src}|{dst}")):
                    world.net.mend(src, dst)
        elif fault.kind == "zk-cut":
            if self._release(("zk-cut", fault.target)):
                world.meta.mend(fault.target)
        elif fault.kind == "zk-loss":
            if self._release(("zk-loss", "zk")):
                world.meta.loss = 0.0
        elif fault.kind == "slow" and self._release(("slow", fault.target)):
            world.net.slow.pop(fault.target, None)

    def _restart(self, name: str) -> None:
        sim = self.world.bookie(name)
        if not sim.up:
            self._restarts[name] = self.world.spawn("nemesis", self.world.supervise(sim))

    async def heal_all(self) -> None:
        """Every fault ends now: the network and metadata service mend, every bookie is up."""
        world = self.world
        world.trace.event("nemesis", "heal all")
        for handle in self._heals:
            handle.cancel()
        self._held.clear()
        world.net.mend_all()
        world.net.slow.clear()
        world.meta.loss = 0.0
        world.meta.mend_all()
        for task in self._restarts.values():
            task.cancel()
        for task in self._restarts.values():
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for sim in world.bookies:
            if not sim.up:
                await world.start_bookie(sim)
        if self.kv is not None:
            for node in self.kv.nodes:
                self.kv.start_member(node)
