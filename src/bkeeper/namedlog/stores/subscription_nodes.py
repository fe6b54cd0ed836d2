"""Where subscriptions live: ``<log node>/subscriptions/<name>`` (the state, JSON) and its
ephemeral child ``owner`` (the exclusive consumer holding it), every write a
compare-and-set."""

from __future__ import annotations

import contextlib

from bkeeper.common.clock import Clock, default_clock
from bkeeper.common.errors import (
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    SubscriptionBusyError,
    SubscriptionNotFoundError,
)
from bkeeper.common.tasks import within
from bkeeper.meta.store import NodeStore, WatchKind, join_path
from bkeeper.namedlog.core.subscription_state import SubscriptionState, check_subscription_name
from bkeeper.namedlog.stores.log_nodes import LogStore

__all__ = ["SubscriptionStore"]


class SubscriptionStore:
    """The subscriptions' nodes: ``<log node>/subscriptions/<name>`` and its ``owner``."""

    def __init__(self, store: NodeStore, logs: LogStore, clock: Clock | None = None) -> None:
        self._store = store
        self._logs = logs
        self._clock: Clock = clock or default_clock()

    def directory(self, log_name: str) -> str:
        return join_path(self._logs.path(log_name), "subscriptions")

    def path(self, log_name: str, name: str) -> str:
        return join_path(self.directory(log_name), check_subscription_name(name))

    def owner_path(self, log_name: str, name: str) -> str:
        return join_path(self.path(log_name, name), "owner")

    async def create(self, log_name: str, name: str, state: SubscriptionState) -> bool:
        """Create it; False when it exists already (its state is kept)."""
        try:
            await self._store.create(self.path(log_name, name), state.encode(), make_parents=True)
        except NodeExistsError:
            return False
        return True

    async def read(self, log_name: str, name: str) -> tuple[SubscriptionState, int]:
        try:
            data, version = await self._store.get(self.path(log_name, name))
        except NoNodeError:
            raise SubscriptionNotFoundError(
                f"log {log_name!r} has no subscription {name!r}"
            ) from None
        return SubscriptionState.decode(data, f"subscription {name!r}"), version

    async def write(self, log_name: str, name: str, state: SubscriptionState, version: int) -> int:
        try:
            return await self._store.set(self.path(log_name, name), state.encode(), version)
        except NoNodeError:
            raise SubscriptionNotFoundError(
                f"log {log_name!r} has no subscription {name!r} (unsubscribed?)"
            ) from None

    async def delete(self, log_name: str, name: str) -> None:
        with contextlib.suppress(NoNodeError):
            await self._store.delete(self.owner_path(log_name, name))
        try:
            await self._store.delete(self.path(log_name, name))
        except NoNodeError:
            raise SubscriptionNotFoundError(
                f"log {log_name!r} has no subscription {name!r}"
            ) from None
        with contextlib.suppress(NoNodeError, NotEmptyError):
            await self._store.delete(self.directory(log_name))

    async def names(self, log_name: str) -> list[str]:
        try:
            return sorted(await self._store.children(self.directory(log_name)))
        except NoNodeError:
            return []

    async def states(self, log_name: str) -> dict[str, SubscriptionState]:
        found = {}
        for name in await self.names(log_name):
            with contextlib.suppress(SubscriptionNotFoundError):
                found[name] = (await self.read(log_name, name))[0]
        return found

    async def owner(self, log_name: str, name: str) -> str | None:
        """The id of the consumer holding the subscription now, if any."""
        try:
            data, _ = await self._store.get(self.owner_path(log_name, name))
        except NoNodeError:
            return None
        return data.decode("utf-8", "replace")

    async def release(self, log_name: str, name: str) -> None:
        """Delete the owner node if this session holds it (never another consumer's)."""
        path = self.owner_path(log_name, name)
        stat = await self._store.exists(path)
        if stat is not None and stat.ephemeral_owner == self._store.session_id:
            with contextlib.suppress(NoNodeError):
                await self._store.delete(path, stat.version)

    async def take(self, log_name: str, name: str, consumer_id: str, wait_s: float | None) -> None:
        """Create the owner node; wait up to ``wait_s`` (None: for ever) for another's to go."""
        path = self.owner_path(log_name, name)
        clock = self._clock
        deadline = None if wait_s is None else clock.monotonic() + wait_s
        while True:
            watch = await self._store.watch(path, WatchKind.DATA)
            try:
                try:
                    await self._store.create(path, consumer_id.encode(), ephemeral=True)
                    return
                except NoNodeError:
                    raise SubscriptionNotFoundError(
                        f"log {log_name!r} has no subscription {name!r}"
                    ) from None
                except NodeExistsError:
                    holder = await self.owner(log_name, name)
                    left = None if deadline is None else deadline - clock.monotonic()
                    if left is not None and left <= 0:
                        raise SubscriptionBusyError(
                            f"subscription {name!r} of log {log_name!r} is held by consumer "
                            f"{holder!r}"
                        ) from None
                    with contextlib.suppress(TimeoutError):
                        await within(_next_event(watch), left)
            finally:
                watch.close()


async def _next_event(watch: object) -> None:
    async for _event in watch:  # type: ignore[attr-defined]
        return
