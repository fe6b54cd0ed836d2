"""The kv workload in the simulator: members of a replicated key-value store as nodes,
clients calling them over HTTP, every call recorded and the history checked linearizable.

Each member is what ``bkeeper kv serve`` runs (:func:`bkeeper.kv.server.serve_member`: the
replicated state machine on a named log, leader election, the crash detector, the HTTP API),
on a node of its own (``kv-<i>``, its HTTP port :data:`KV_PORT`); its clients are
``verify``'s (:class:`bkeeper.verify.kv_workload.KvClients`: linearizable gets, puts,
deletes and compare-and-sets through coalescing and plain clients, and roaming readers), on
the node ``kv-client``. HTTP goes through the simulated network (:mod:`bkeeper.sim.http`).
Snapshots are taken every :data:`SNAPSHOT_EVERY` commands and the log's ledgers roll at
:data:`ROLL_BYTES`, so that snapshots, log truncation and restores happen within a run.
Even seeds run the members with a read lease, odd seeds without (a barrier per read).

A member **crash** (the ``member-crash`` fault) is a process death: its tasks cancelled, its
connections reset, its metadata sessions orphaned; it starts again, on the same address,
when the fault heals (and, as a service manager would, every :data:`RESTART_DELAY_S` while
it fails to start). The other faults (partitions, ``zk-cut``, ``slow``) reach the member
nodes and the client node as any other.

:meth:`SimKv.finish`, once every fault healed: a linearizable read of every key (recorded:
a lost acknowledged write makes the history illegal), and every member must converge to
that state within :data:`CONVERGE_S`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json

from bkeeper.common.errors import BKeeperError, StateMachineError
from bkeeper.kv import KvClient
from bkeeper.kv.server import KvServerConfig, log_name, serve_member
from bkeeper.namedlog import LogConfig, NamedLogs
from bkeeper.sim.http import sim_connector
from bkeeper.sim.world import RESTART_DELAY_S, World
from bkeeper.verify.check import Verdict
from bkeeper.verify.history import History
from bkeeper.verify.kv_workload import KEYS, KvClients
from bkeeper.verify.workload import start_client

__all__ = ["KV_CLIENT", "KV_PORT", "MEMBERS", "SimKv"]

STORE = "verify"
MEMBERS = 3
KV_PORT = 8080
#: The node of the store's clients.
KV_CLIENT = "kv-client"
#: The members' metadata session (the simulated service expires a dead one's after its own
#: session timeout).
SESSION_MS = 4_000
#: Each client task's pause after a call (a call a second from each of 12 tasks: a few hundred
#: calls a run, which the linearizability check decides quickly).
CALL_PAUSE_S = 1.0
#: Seconds between a follower's probes of the leader's port (``bkeeper kv serve``: 0.1; each
#: probe is a connection, a fifth of a run's events at 0.1).
LEADER_PROBE_S = 0.5
SNAPSHOT_EVERY = 50
ROLL_BYTES = 2 * 1024
READ_LEASE_S = 0.5
#: Seconds the final reads keep trying, and each member has to converge.
FINAL_READ_S = 90.0
CONVERGE_S = 60.0
#: Seconds a member has to stop when the run ends (then it is cancelled).
STOP_S = 10.0


class SimKv:
    """The store's members and clients in a :class:`World` (module doc)."""

    def __init__(self, world: World, seed: int) -> None:
        self.world = world
        self.seed = seed
        self.nodes = [f"kv-{i}" for i in range(MEMBERS)]
        self.urls = [f"http://{node}:{KV_PORT}" for node in self.nodes]
        self.read_lease_s = 0.0 if seed % 2 else READ_LEASE_S
        self._stops: dict[str, asyncio.Event] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}

    # -- members -------------------------------------------------------------------------
    def start_member(self, node: str) -> None:
        """Start ``node``'s member (again: on what the store and the log kept)."""
        if node in self._tasks and not self._tasks[node].done():
            return
        self.world.net.revive(node)
        stop = self._stops[node] = asyncio.Event()
        self._tasks[node] = self.world.spawn(node, self._serve(node, stop))

    async def _serve(self, node: str, stop: asyncio.Event) -> None:
        config = KvServerConfig(
            name=STORE,
            member_id=node,
            host=node,
            http_port=KV_PORT,
            snapshot_every_commands=SNAPSHOT_EVERY,
            read_lease_s=self.read_lease_s,
            leader_probe_s=LEADER_PROBE_S,
        )
        trace = self.world.trace
        while not stop.is_set():
            try:
                await serve_member(
                    self.world.uri,
                    config,
                    SESSION_MS,
                    ROLL_BYTES,
                    stop,
                    lambda url: trace.event(node, f"kv member serving at {url}"),
                    clock=self.world.clock,
                )
            except (BKeeperError, OSError) as exc:
                trace.event(node, f"kv member failed: {exc!r}")
                await asyncio.sleep(RESTART_DELAY_S)

    def crash_member(self, node: str) -> None:
        """Process death (module doc)."""
        task = self._tasks.pop(node, None)
        if task is None:
            return
        self.world.trace.event(node, "kv member crash")
        self.world.net.kill(node)
        self.world.meta.node_died(node)
        for owned in self.world.loop.node_tasks(node):
            owned.cancel()

    def running(self, node: str) -> bool:
        task = self._tasks.get(node)
        return task is not None and not task.done()

    async def stop_all(self) -> None:
        """Stop every member (gracefully, within :data:`STOP_S`; then cancelled)."""
        for stop in self._stops.values():
            stop.set()
        tasks = list(self._tasks.values())
        self._tasks.clear()
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=STOP_S)
            for task in pending:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    # -- clients ---------------------------------------------------------------------------
    def clients(self, history: History) -> KvClients:
        return KvClients(
            self.urls, history, self.seed, connector=sim_connector, pause_s=CALL_PAUSE_S
        )

    # -- the end ---------------------------------------------------------------------------
    async def finish(self, history: History, verdict: Verdict) -> list[int]:
        """The end of a run (module doc): violations into ``verdict``; the log's ledgers."""
        for node in self.nodes:
            if not self.running(node):
                task = self._tasks.get(node)
                why = "" if task is None or task.cancelled() else f": {task.exception()!r}"
                verdict.violate(f"kv member {node} is not running at the end{why}")
        truth: dict[str, tuple[str | None, int]] = {}
        async with self._client(self.urls, FINAL_READ_S, "final") as kv:
            try:
                for n in range(KEYS):
                    key = f"k{n}"
                    history.add("final", "invoke", "get", value=json.dumps(["get", key]))
                    item = await kv.get(key)
                    history.add("final", "ok", "get", value=json.dumps([item.value, item.version]))
                    if item.value is not None:
                        truth[key] = (item.value, item.version)
            except StateMachineError as exc:
                verdict.violate(f"the store did not answer a linearizable read at the end: {exc}")
                return []
        for node, url in zip(self.nodes, self.urls, strict=True):
            if self.running(node):
                seen = await self._converged(node, url, truth)
                if seen != truth:
                    verdict.violate(
                        f"kv member {node} did not converge to the leader's state within "
                        f"{CONVERGE_S:g} s: {seen} != {truth}"
                    )
        async with await start_client(self.world.uri) as bk:
            named = NamedLogs(bk, LogConfig()).log(log_name(STORE))
            return [x.ledger_id for x in (await named.metadata()).ledgers]

    def _client(self, urls: list[str], timeout_s: float, name: str) -> KvClient:
        return KvClient(
            urls,
            timeout_s=timeout_s,
            client_id=f"{name}-{self.seed}",
            connector=sim_connector,
        )

    async def _converged(
        self, node: str, url: str, truth: dict[str, tuple[str | None, int]]
    ) -> dict[str, tuple[str | None, int]] | None:
        """``node``'s whole store (a stale read) once it equals ``truth``, or the last one
        read when :data:`CONVERGE_S` ran out (None: it never answered)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CONVERGE_S
        seen: dict[str, tuple[str | None, int]] | None = None
        while seen != truth and loop.time() < deadline:
            if seen is not None:
                await asyncio.sleep(0.2)
            with contextlib.suppress(StateMachineError):
                async with self._client([url], 5.0, f"converge-{node}") as one:
                    items = await one.range("", stale=True)
                seen = {i.key: (i.value, i.version) for i in items}
        return seen
