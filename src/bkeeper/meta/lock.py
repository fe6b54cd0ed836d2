"""A distributed lock on the node store port (ZooKeeper's lock recipe).

Contenders queue as ephemeral-sequential children ``<prefix><seq>`` of one directory; the
lowest sequence holds the lock. Each waiter watches only its immediate predecessor, so a
release wakes one waiter (no herd). Because the nodes are ephemeral, a holder whose session
expires loses the lock: :meth:`Lock.wait_lost` returns, and the next contender takes over.

Invariant: at any moment at most one live node is first in the queue, so at most one
session holds the lock. A waiter deletes the nodes of its own session queued ahead of its own
that no contender of its store is queued with (left by a round whose delete failed, or whose
create's answer was lost, while the connection was down). Waiting is on watches, and on a
look at the queue every ``RECHECK_S`` besides (a lost watch event must not stall the
queue). (A holder cut off from the store learns of the loss only when its session is
declared expired; that is ZooKeeper's guarantee, not a stronger one.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from dataclasses import dataclass, field

from bkeeper.common.errors import (
    ConnectionLossError,
    LeadershipLostError,
    MetadataError,
    NoNodeError,
    SessionExpiredError,
)
from bkeeper.meta.events import Subscription, wait_any
from bkeeper.meta.store import NodeStore, SessionState, WatchEvent, basename, join_path

__all__ = ["RECHECK_S", "Lock"]

_log = logging.getLogger(__name__)

#: Seconds a waiter (or a holder) waits on a watch before it looks at the queue again: a
#: watch event lost (a ZooKeeper server restarted while a node was deleted) delays a
#: hand-over by this much at most instead of for ever (no member would lead again).
RECHECK_S = 5.0


@dataclass
class _Queued:
    """One store's (one session's) contenders, across its ``Lock`` objects: the nodes they
    wait or hold with, how many creates are unanswered, and what may be left queued by
    nobody: nodes whose delete failed (``leftovers``) and directories where a create's
    answer was lost (``lost_creates``: a node nobody knows of may be queued there)."""

    claimed: set[str] = field(default_factory=set)
    creating: int = 0
    leftovers: set[str] = field(default_factory=set)
    lost_creates: set[str] = field(default_factory=set)


_QUEUED: weakref.WeakKeyDictionary[NodeStore, _Queued] = weakref.WeakKeyDictionary()


def _queued(store: NodeStore) -> _Queued:
    queued = _QUEUED.get(store)
    if queued is None:
        queued = _QUEUED[store] = _Queued()
    return queued


class Lock:
    """An exclusive lock on ``directory`` shared by every store on the same tree."""

    def __init__(
        self, store: NodeStore, directory: str, *, owner: bytes = b"", prefix: str = "lock-"
    ) -> None:
        self._store = store
        self._directory = directory
        self._owner = owner
        self._prefix = prefix
        self._node: str | None = None
        self._queued_once = asyncio.Event()

    @property
    def node(self) -> str | None:
        """The path of this contender's node while it holds the lock."""
        return self._node

    @property
    def held(self) -> bool:
        return self._node is not None

    async def acquire(self, timeout_s: float | None = None) -> None:
        """Queue and wait until first; ``TimeoutError`` (leaving the queue) after timeout_s."""
        if self._node is not None:
            raise MetadataError(f"lock {self._directory} is held already by this contender")
        queued = _queued(self._store)
        queued.creating += 1
        try:
            node = await self._store.create(
                join_path(self._directory, self._prefix),
                self._owner,
                ephemeral=True,
                sequential=True,
                make_parents=True,
            )
        except ConnectionLossError:  # it may have been made: look for it next time
            queued.lost_creates.add(self._directory)
            raise
        finally:
            queued.creating -= 1
        queued.claimed.add(node)
        self._queued_once.set()
        try:
            async with asyncio.timeout(timeout_s):
                await self._wait_first(node)
        except BaseException:
            queued.claimed.discard(node)
            await self._delete_quietly(node)
            raise
        self._node = node

    async def wait_queued(self) -> None:
        """Return once this contender's node has been created (queued) at least once: from
        then on, a reader of the queue sees a holder or a contender."""
        await self._queued_once.wait()

    async def release(self) -> None:
        """Leave the queue; a no-op when not held."""
        node, self._node = self._node, None
        if node is not None:
            _queued(self._store).claimed.discard(node)
            await self._delete_quietly(node)

    async def wait_lost(self) -> None:
        """Return once the lock is no longer held: the node vanished or its session expired."""
        node = self._node
        if node is None:
            return
        session = self._store.session_events()
        watch: Subscription[WatchEvent] | None = None
        try:
            while await self._still_held(node):
                if watch is not None:
                    with contextlib.suppress(TimeoutError):  # as in _wait_first
                        async with asyncio.timeout(RECHECK_S):
                            await wait_any(watch, session)
                    continue
                try:
                    watch = await self._store.watch(node, persistent=True)
                except (ConnectionLossError, SessionExpiredError):
                    await session.get()  # try again once the session state changes
        finally:
            session.close()
            if watch is not None:
                watch.close()
        if self._node == node:
            self._node = None
            _queued(self._store).claimed.discard(node)

    async def holder(self) -> bytes | None:
        """The owner data of the current holder, or None when nobody holds the lock."""
        for name in await self._queue():
            try:
                data, _version = await self._store.get(join_path(self._directory, name))
                return data
            except MetadataError:
                continue  # it left between listing and reading
        return None

    async def __aenter__(self) -> Lock:
        await self.acquire()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.release()

    async def _wait_first(self, node: str) -> None:
        while True:
            queue = await self._queue()
            mine = basename(node)
            if mine not in queue:
                raise LeadershipLostError(f"{node} vanished while queued (session expired)")
            position = queue.index(mine)
            if position == 0:
                return
            if await self._drop_leftovers(queue[:position]):
                continue
            predecessor = join_path(self._directory, queue[position - 1])
            async with await self._store.watch(predecessor) as watch:
                if await self._store.exists(predecessor) is not None:
                    # The queue is looked at again now and then: a deletion whose event
                    # is lost (across a ZooKeeper restart) must not hold the queue for good.
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(RECHECK_S):
                            await watch.get()

    async def _drop_leftovers(self, ahead: list[str]) -> bool:
        """Delete the nodes of this session among ``ahead`` that no contender of this store
        is queued with: left by a round whose delete failed while the connection was down
        (the session lived on), or whose create's answer was lost. Nobody else removes such
        a node while the session lives, and once first it holds the lock for nobody. True
        when it deleted one. Costs nothing unless this store lost a
        delete or a create's answer; the nodes' owners are looked at only for the latter,
        and not while a create of this store is unanswered (its node may be among them; a
        create sent later queues behind this waiter's node, never among ``ahead``)."""
        queued = _queued(self._store)
        scan = self._directory in queued.lost_creates and not queued.creating
        if not scan and not queued.leftovers:
            return False
        deleted = False
        for name in ahead:
            path = join_path(self._directory, name)
            if path in queued.claimed:
                continue
            if path not in queued.leftovers:
                if not scan:
                    continue
                stat = await self._store.exists(path)
                if stat is None or stat.ephemeral_owner != self._store.session_id:
                    continue
            _log.info("lock %s: deleting %s, left queued by this session", self._directory, name)
            with contextlib.suppress(NoNodeError):
                await self._store.delete(path)
            queued.leftovers.discard(path)
            deleted = True
        if scan and not queued.creating:
            queued.lost_creates.discard(self._directory)
        return deleted

    async def _queue(self) -> list[str]:
        names = await self._store.children(self._directory)
        mine = [n for n in names if n.startswith(self._prefix)]
        return sorted(mine, key=lambda n: n[-10:])

    async def _still_held(self, node: str) -> bool:
        if self._node != node or self._store.session_state is SessionState.EXPIRED:
            return False
        try:
            stat = await self._store.exists(node)
        except MetadataError:
            return True  # cannot tell while disconnected; the session decides
        return stat is not None and stat.ephemeral_owner == self._store.session_id

    async def _delete_quietly(self, node: str) -> None:
        """Delete ``node``; one that could not be deleted (the connection down) is noted as
        left over: it goes with the session, but while the session lives it stays queued,
        and the store's next waiter in this directory deletes it (``_drop_leftovers``)."""
        leftovers = _queued(self._store).leftovers
        try:
            await self._store.delete(node)
        except NoNodeError:
            pass
        except MetadataError as exc:
            leftovers.add(node)
            _log.debug("could not delete %s: %s", node, exc)
            return
        leftovers.discard(node)
