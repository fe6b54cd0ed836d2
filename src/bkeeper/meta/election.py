"""Leader election on the node store port: the lock recipe held for as long as the session.

Candidates queue as ephemeral-sequential ``<prefix><seq>`` nodes (Apache BookKeeper's auditor
uses ``underreplication/auditorelection/V_``) whose data names the candidate; the first in the
queue leads. A leader leads until its session expires or it closes; then it loses leadership
(:meth:`LeaderElection.wait_leadership_lost` returns), waits for a new session and queues
again as a plain candidate.

Invariant: at most one live candidate node is first, so at most one session leads. The
re-queue loop runs until :meth:`LeaderElection.aclose`, pausing between rounds with a
doubling delay bounded by ``requeue_delay_ms_max``.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from bkeeper.common.errors import ConfigError, MetadataError
from bkeeper.meta.events import Subscription, TaskOwner
from bkeeper.meta.lock import Lock
from bkeeper.meta.store import NodeStore, SessionEvent, SessionState

__all__ = ["ElectionConfig", "LeaderElection"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ElectionConfig:
    requeue_delay_ms: int = 50
    requeue_delay_ms_max: int = 5_000

    def __post_init__(self) -> None:
        if not 1 <= self.requeue_delay_ms <= self.requeue_delay_ms_max:
            raise ConfigError("need 1 <= requeue_delay_ms <= requeue_delay_ms_max")


class LeaderElection:
    """One candidate in the election held in ``directory``; ``async with`` starts and ends it."""

    def __init__(
        self,
        store: NodeStore,
        directory: str,
        candidate: bytes,
        *,
        prefix: str = "V_",
        config: ElectionConfig | None = None,
    ) -> None:
        self._store = store
        self._lock = Lock(store, directory, owner=candidate, prefix=prefix)
        self._config = config or ElectionConfig()
        self._leading = asyncio.Event()
        self._not_leading = asyncio.Event()
        self._not_leading.set()
        self._term = 0
        self._tasks = TaskOwner(f"election {directory}", error=MetadataError)
        self._session: Subscription[SessionEvent] | None = None

    @property
    def is_leader(self) -> bool:
        return self._leading.is_set()

    @property
    def term(self) -> int:
        """How many times this candidate has become leader."""
        return self._term

    @property
    def sequence(self) -> int | None:
        """The sequence number of this candidate's node while it leads, else None.

        The store numbers the nodes of one directory in creation order, and a leader is the
        live node with the lowest number, so each leader's number is higher than every
        earlier leader's: a leadership term that orders leaders across candidates (a named
        log's writer term, say)."""
        node = self._lock.node
        if node is None or not self.is_leader:
            return None
        return int(node[-10:])

    async def start(self) -> None:
        """Join the election (returns at once; leadership comes later)."""
        if self._session is None:
            self._session = self._store.session_events()
            self._tasks.spawn(self._run(), "campaign")

    async def wait_leadership(self, timeout_s: float | None = None) -> int:
        """Wait until this candidate leads; the term number."""
        async with asyncio.timeout(timeout_s):
            await self._leading.wait()
        return self._term

    async def wait_joined(self, timeout_s: float | None = None) -> None:
        """Wait until this candidate's vote has been queued once (a reader of the election
        then sees a leader, this candidate or one ahead of it)."""
        async with asyncio.timeout(timeout_s):
            await self._lock.wait_queued()

    async def wait_leadership_lost(self, timeout_s: float | None = None) -> None:
        """Wait until this candidate does not lead (returns at once if it does not)."""
        async with asyncio.timeout(timeout_s):
            await self._not_leading.wait()

    async def leader(self) -> bytes | None:
        """The data of the current leader's node, or None when nobody leads."""
        return await self._lock.holder()

    async def aclose(self) -> None:
        """Leave the election; leadership, if held, ends."""
        await self._tasks.aclose()
        if self._session is not None:
            self._session.close()
        self._set_leading(False)

    async def __aenter__(self) -> LeaderElection:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def _run(self) -> None:
        delay_ms = self._config.requeue_delay_ms
        while True:
            try:
                await self._campaign_once()
                delay_ms = self._config.requeue_delay_ms
            except MetadataError as exc:
                _log.info("election round ended: %s", exc)
            await asyncio.sleep(delay_ms / 1000)
            delay_ms = min(delay_ms * 2, self._config.requeue_delay_ms_max)

    async def _campaign_once(self) -> None:
        try:
            await self._wait_connected()
            await self._lock.acquire()
            self._set_leading(True)
            await self._lock.wait_lost()
            _log.info("leadership lost (term %d)", self._term)
        finally:
            self._set_leading(False)
            await self._lock.release()

    async def _wait_connected(self) -> None:
        assert self._session is not None
        while self._store.session_state is not SessionState.CONNECTED:
            await self._session.get()

    def _set_leading(self, leading: bool) -> None:
        if leading and not self._leading.is_set():
            self._term += 1
            self._leading.set()
            self._not_leading.clear()
        elif not leading:
            self._leading.clear()
            self._not_leading.set()
