"""The simulated metadata service: the ``memory://`` driver's tree, as ZooKeeper would be
reached over a network.

:class:`SimStoreFaults` plugs into a :class:`~bkeeper.meta.memory.MemoryTree` (its
``faults`` port) and decides, per request of each session:

- **latency**: each request and each answer takes a random time; one session's requests
  are applied in the order they were sent (ZooKeeper's FIFO client order);
- **lost messages** (while ``loss`` is above 0): a request is lost before it is applied, or
  its answer after: both raise ``ConnectionLossError``, and the caller cannot tell which;
- **a node cut off** (:meth:`cut`): its sessions are suspended at once (calls raise
  ``ConnectionLossError``, as a client that lost its server), and if the cut lasts past the
  session timeout the service ends the session: its ephemeral nodes go, and when the cut
  heals the client hears ``EXPIRED`` and gets a new session. A shorter cut resumes the
  same session;
- **a node dead** (:meth:`node_died`): as a cut that never heals; its sessions end one
  session timeout later (its ephemeral nodes linger until then, as ZooKeeper's do).

Sessions are told apart by node through the node the calling task belongs to
(:data:`~bkeeper.sim.loop.NODE`). Code of a dead node's ended life neither calls nor hears
an answer (:meth:`~bkeeper.sim.loop.SimLoop.check_alive`).
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass

from bkeeper.common.errors import ConnectionLossError
from bkeeper.meta.memory import MemoryNodeStore, MemoryTree
from bkeeper.meta.store import SessionState
from bkeeper.sim.loop import NODE, SimLoop
from bkeeper.sim.trace import Trace

__all__ = ["MetaConfig", "SimStoreFaults"]


@dataclass(frozen=True)
class MetaConfig:
    latency_min_s: float = 0.000_2
    latency_max_s: float = 0.002
    session_timeout_s: float = 6.0


class SimStoreFaults:
    def __init__(
        self,
        loop: SimLoop,
        tree: MemoryTree,
        rng: random.Random,
        trace: Trace,
        config: MetaConfig | None = None,
    ) -> None:
        self._loop = loop
        self._tree = tree
        self._rng = rng
        self._trace = trace
        self.config = config or MetaConfig()
        #: chance that a request (or its answer) is lost, each
        self.loss = 0.0
        self._stores: dict[str, dict[MemoryNodeStore, None]] = {}
        self._fifo_s: dict[int, float] = {}
        self._cut: dict[str, asyncio.TimerHandle | None] = {}
        self._expired: dict[int, None] = {}  # sessions the service ended during a cut
        tree.faults = self

    # -- the port ------------------------------------------------------------------------
    async def request(self, store: MemoryNodeStore, op: str, path: str) -> None:
        self._loop.check_alive(f"{op} {path}")
        node = NODE.get()
        nodes_stores = self._stores.setdefault(node, {})
        if store not in nodes_stores:
            nodes_stores[store] = None
            if node in self._cut:
                store.suspend()
                raise ConnectionLossError(f"{op} {path}: disconnected")
        await self._wait(store)
        if self.loss and self._rng.random() < self.loss:
            self._trace.event(node, f"zk lost request {op} {path}")
            raise ConnectionLossError(f"{op} {path}: connection lost (request)")
        self._trace.request(node, f"{store.session_id} {op} {path}")

    async def answer(self, store: MemoryNodeStore, op: str, path: str) -> None:
        await self._wait(store)
        self._loop.check_alive(f"the answer to {op} {path}")
        if self.loss and self._rng.random() < self.loss:
            self._trace.event(NODE.get(), f"zk lost answer {op} {path}")
            raise ConnectionLossError(f"{op} {path}: connection lost (answer; applied)")

    async def _wait(self, store: MemoryNodeStore) -> None:
        config = self.config
        now = self._loop.time()
        at = now + self._rng.uniform(config.latency_min_s, config.latency_max_s)
        session = store.session_id
        at = max(at, self._fifo_s.get(session, 0.0) + 1e-7)
        self._fifo_s[session] = at
        await asyncio.sleep(at - now)

    # -- faults --------------------------------------------------------------------------
    def cut(self, node: str) -> None:
        """``node`` loses the service (module doc)."""
        if node in self._cut:
            return
        self._trace.event(node, "zk cut")
        for store in self._stores.get(node, {}):
            if store.session_state is SessionState.CONNECTED:
                store.suspend()
        self._cut[node] = self._loop.call_later(self.config.session_timeout_s, self._expire, node)

    def mend(self, node: str) -> None:
        timer = self._cut.pop(node, "absent")
        if timer == "absent":
            return
        if isinstance(timer, asyncio.TimerHandle):
            timer.cancel()
        self._trace.event(node, "zk mended")
        for store in list(self._stores.get(node, {})):
            if store.session_state is not SessionState.SUSPENDED:
                continue
            if store.session_id in self._expired:
                self._loop.create_task(store.expire_session())  # EXPIRED, then a new session
            else:
                store.resume()

    def mend_all(self) -> None:
        for node in list(self._cut):
            self.mend(node)

    def node_died(self, node: str) -> None:
        """Its sessions end one session timeout from now; it never calls again (a node
        started again under its name has sessions of its own)."""
        self._trace.event(node, "zk sessions orphaned")
        timer = self._cut.pop(node, None)
        if isinstance(timer, asyncio.TimerHandle):
            timer.cancel()
        stores = self._stores.pop(node, {})
        for store in stores:
            if store.session_state is SessionState.CONNECTED:
                store.suspend()
        self._loop.call_later(self.config.session_timeout_s, self._end_sessions, list(stores))

    def _expire(self, node: str) -> None:
        self._cut[node] = None
        self._trace.event(node, "zk session expired")
        for store in self._stores.get(node, {}):
            self._expired[store.session_id] = None
            self._tree.close_session(store.session_id)

    def _end_sessions(self, stores: list[MemoryNodeStore]) -> None:
        for store in stores:
            self._tree.close_session(store.session_id)
