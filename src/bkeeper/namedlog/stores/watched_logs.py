"""Log metadata kept behind watches (:class:`WatchedLogs`), for a reader that looks at the
same logs again and again: a Spark stream asks for each log's head at every trigger, about
100 times a second while no record comes (Spark's polling delay), and each look was one
metadata read (~1 ms of CPU between the client and ZooKeeper, docs/benchmarks.md, "An idle
stream").

Each log read is kept while a persistent watch on its node reports nothing: any event
(changed, deleted, created, or ``RESET`` after a reconnection, when events may have been
missed) drops what was kept, and the next look reads the node again. A look never returns
metadata older than the last event seen: a read that an event overtook is returned but not
kept. While the store is disconnected, the last metadata read is returned (no event can
arrive then); the watch's ``RESET`` on reconnection drops it.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from bkeeper.common.tasks import TaskOwner
from bkeeper.meta.events import Subscription
from bkeeper.meta.store import WatchEvent
from bkeeper.namedlog.core.log_metadata import LogMetadata
from bkeeper.namedlog.stores.log_nodes import LogStore

__all__ = ["WATCHED_LOGS_MAX", "WatchedLogs"]

#: Logs whose metadata one :class:`WatchedLogs` keeps (and watches) at most; the one looked
#: at longest ago is let go first.
WATCHED_LOGS_MAX = 1_000


@dataclass(eq=False)
class _Watched:
    subscription: Subscription[WatchEvent]
    #: Events seen so far: a read started before the last one is not kept.
    events: int = 0
    kept: LogMetadata | None = None

    def drop(self) -> None:
        """Forget what was kept, and any read still on its way."""
        self.events += 1
        self.kept = None


class WatchedLogs:
    """Reads log metadata through ``store``, keeping each log's until its node changes."""

    def __init__(self, store: LogStore, *, logs_max: int = WATCHED_LOGS_MAX) -> None:
        if logs_max < 1:
            raise ValueError(f"logs_max must be >= 1, got {logs_max}")
        self._store = store
        self._logs_max = logs_max
        self._watched: OrderedDict[str, _Watched] = OrderedDict()
        # One follower a watched log; those of logs let go of end at the loop's next turn.
        self._followers = TaskOwner("watched logs", tasks_max=2 * logs_max)
        self._closed = False
        #: Reads of the node made (for tests and figures: the looks that were not free).
        self.reads = 0

    async def read(self, name: str) -> LogMetadata:
        """The log's metadata: as kept, or read now (``LogNotFoundError`` when it is gone;
        a log that is gone is not kept, so its return is seen at once)."""
        watched = self._watched.get(name)
        if watched is None and not self._closed:
            watched = await self._watch(name)
        if watched is not None and self._watched.get(name) is watched:
            self._watched.move_to_end(name)
            if watched.kept is not None:
                return watched.kept
        events = -1 if watched is None else watched.events
        self.reads += 1
        meta, _version = await self._store.read(name)
        if watched is not None and watched.events == events and self._watched.get(name) is watched:
            watched.kept = meta
        return meta

    async def aclose(self) -> None:
        """Let every watch go (the store's own close ends them too)."""
        self._closed = True
        while self._watched:
            _name, watched = self._watched.popitem(last=False)
            watched.subscription.close()
        await self._followers.aclose()

    async def _watch(self, name: str) -> _Watched | None:
        subscription = await self._store.watch(name)
        existing = self._watched.get(name)
        if existing is not None or self._closed:  # another look set one up meanwhile
            subscription.close()
            return existing
        watched = _Watched(subscription)
        self._followers.spawn(self._follow(name, watched), f"log {name}")
        self._watched[name] = watched
        while len(self._watched) > self._logs_max:
            _name, oldest = self._watched.popitem(last=False)
            oldest.subscription.close()  # its follower ends
            oldest.drop()
        return watched

    async def _follow(self, name: str, watched: _Watched) -> None:
        """Drop what is kept at each event; once the subscription ends (let go of, or the
        store closed), the log is looked at afresh by the next read."""
        try:
            async for _event in watched.subscription:
                watched.drop()
        finally:
            watched.drop()
            if self._watched.get(name) is watched:
                del self._watched[name]
