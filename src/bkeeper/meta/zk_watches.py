"""The ``zk://`` driver's own table of watches, kept because kazoo forgets its watches
whenever the connection drops.

One slot per (kind, path) holds the subscribers and the state of the one kazoo watch behind
them. :class:`WatchTable` arms a slot through the ``arm`` function the driver gives it (the
kazoo call, setting a watch whose firing comes back to :meth:`WatchTable.fired` with the
slot's generation); a fired watch is armed again *before* its event reaches persistent
subscribers, so a subscriber that reads after the event cannot miss a change; after a new
connection every slot is armed again and its subscribers get ``RESET``. Firings of an older
generation are stale and ignored. Nothing here imports kazoo.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from bkeeper.common.errors import MetadataError
from bkeeper.common.tasks import TaskOwner
from bkeeper.meta.events import Subscription
from bkeeper.meta.store import EventType, StoreConfig, WatchEvent, WatchKind

__all__ = ["WatchKey", "WatchTable"]

_log = logging.getLogger("bkeeper.meta.zk")

WatchKey = tuple[WatchKind, str]


@dataclass
class _Slot:
    """Subscribers of one (kind, path) and the state of the kazoo watch behind them."""

    subs: dict[Subscription[WatchEvent], bool] = field(default_factory=dict)
    generation: int = 0
    armed: bool = False
    #: The generation of the last watch seen firing: a watch can fire before the answer of
    #: the call that set it is processed here (both come from kazoo's thread), and must
    #: then not count as armed.
    fired: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class WatchTable:
    """The slots of one store. ``arm(key, generation)`` sets the kazoo watch of ``key``;
    ``tasks`` runs the re-arms; ``closing()`` says whether the store is closing."""

    def __init__(
        self,
        config: StoreConfig,
        arm: Callable[[WatchKey, int], Awaitable[None]],
        tasks: TaskOwner,
        closing: Callable[[], bool],
    ) -> None:
        self._config = config
        self._arm_watch = arm
        self._tasks = tasks
        self._closing = closing
        self._slots: dict[WatchKey, _Slot] = {}
        self._generation = 0

    async def subscribe(self, key: WatchKey, persistent: bool) -> Subscription[WatchEvent]:
        """A subscription to ``key``'s events, its watch armed (``watches_max`` bounds them)."""
        if sum(len(slot.subs) for slot in self._slots.values()) >= self._config.watches_max:
            raise MetadataError(f"{self._config.watches_max} watches open (watches_max)")
        slot = self._slots.setdefault(key, _Slot())
        sub: Subscription[WatchEvent] = Subscription(
            limit=self._config.watch_events_max,
            one_shot=not persistent,
            on_close=functools.partial(self._unwatch, key),
        )
        slot.subs[sub] = persistent
        try:
            await self._ensure_armed(key, slot)
        except BaseException:
            sub.close()
            raise
        return sub

    def fired(self, key: WatchKey, generation: int, event_type: EventType | None) -> None:
        """The watch of ``key`` set at ``generation`` fired (``event_type`` None: kazoo's
        NONE on a dropped connection, re-armed on the next connection)."""
        slot = self._slots.get(key)
        if slot is None or generation != slot.generation or event_type is None:
            return
        if key[0] is WatchKind.CHILDREN and event_type is EventType.CHANGED:
            return  # the creation watch of a children slot saw a data change: not ours
        slot.armed = False
        slot.fired = generation
        watch_event = WatchEvent(event_type, key[1])
        if any(slot.subs.values()) and not self._closing():
            self._tasks.spawn(self._rearm_then_deliver(key, slot, watch_event), "re-arm watch")
        else:
            _deliver(slot, watch_event)

    def disarm_all(self) -> None:
        """The connection dropped: kazoo forgot every watch."""
        for slot in self._slots.values():
            slot.armed = False

    async def rearm_all(self) -> None:
        """A new connection: arm every slot again and tell its subscribers ``RESET``."""
        for key, slot in list(self._slots.items()):
            slot.armed = False
            try:
                await self._ensure_armed(key, slot)
            except MetadataError as exc:
                _log.debug("re-arming %s failed: %s", key, exc)
            _deliver(slot, WatchEvent(EventType.RESET, key[1]))

    def close(self) -> None:
        """End every subscription."""
        for slot in list(self._slots.values()):
            for sub in list(slot.subs):
                sub.close()

    async def _ensure_armed(self, key: WatchKey, slot: _Slot) -> None:
        async with slot.lock:
            if not slot.armed:
                self._generation += 1
                generation = slot.generation = self._generation
                await self._arm_watch(key, generation)
                slot.armed = slot.fired != generation  # fired already: a re-arm is on its way

    async def _rearm_then_deliver(self, key: WatchKey, slot: _Slot, event: WatchEvent) -> None:
        try:
            await self._ensure_armed(key, slot)
        except MetadataError as exc:  # armed again with a RESET on the next CONNECTED
            _log.debug("re-arming %s failed: %s", key, exc)
        finally:
            _deliver(slot, event)

    def _unwatch(self, key: WatchKey, sub: Subscription[WatchEvent]) -> None:
        slot = self._slots.get(key)
        if slot is not None:
            slot.subs.pop(sub, None)
            if not slot.subs:
                del self._slots[key]


def _deliver(slot: _Slot, event: WatchEvent) -> None:
    for sub in list(slot.subs):
        sub.push(event)
