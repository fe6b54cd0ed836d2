"""The bookie registry: which bookies are up, and whether they take writes.

A bookie registers as the ephemeral node ``<root>/available/<bookieId>`` (writable) or
``<root>/available/readonly/<bookieId>`` (read-only), holding its
:class:`~bkeeper.meta.bookie_info.BookieServiceInfo`. Invariants:

* a registered bookie has exactly one node, in its current mode; switching mode creates the
  new node before deleting the old, so the bookie never looks absent;
* a node left by a previous session of the same bookie (a restart within the session timeout)
  is waited for, at most ``stale_registration_wait_ms``, never overwritten;
* after a session expiry the :class:`BookieRegistration` registers again, in its current
  mode, as soon as the store has a new session; it stops only on ``aclose``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Awaitable
from dataclasses import dataclass

from bkeeper.common.clock import Clock, default_clock
from bkeeper.common.errors import (
    ConfigError,
    ConnectionLossError,
    MetadataClosedError,
    MetadataError,
    NodeExistsError,
    NoNodeError,
    SessionExpiredError,
)
from bkeeper.common.ids import BookieId
from bkeeper.common.validate import check_non_negative_ints
from bkeeper.meta.bookie_info import BookieServiceInfo
from bkeeper.meta.events import Subscription, TaskOwner, wait_any
from bkeeper.meta.layout import AVAILABLE, READONLY
from bkeeper.meta.store import (
    NodeStore,
    SessionEvent,
    SessionState,
    StoreConfig,
    WatchKind,
    join_path,
)

__all__ = ["BookieRegistration", "BookieRegistry", "BookieSet", "RegistryConfig"]

_log = logging.getLogger(__name__)


#: How long after a session's timeout ZooKeeper may take to expire it: sessions expire in
#: buckets of ``tickTime`` (2 s by default), and a ZooKeeper that restarted meanwhile starts
#: every session's timeout again.
SESSION_EXPIRY_SLACK_MS = 15_000


@dataclass(frozen=True)
class RegistryConfig:
    """``stale_registration_wait_ms``: how long a bookie waits for the registration of a dead
    predecessor (itself, killed and restarted at once) to go with its session: the session
    timeout (10 s by default) and :data:`SESSION_EXPIRY_SLACK_MS`: ZooKeeper may expire the old
    session a tick after the timeout, and a bookie restarted right after kill -9 that waited
    only the timeout would exit with "held by another live session"."""

    stale_registration_wait_ms: int = StoreConfig().session_timeout_ms + SESSION_EXPIRY_SLACK_MS

    def __post_init__(self) -> None:
        check_non_negative_ints(self, "stale_registration_wait_ms")


@dataclass(frozen=True)
class BookieSet:
    """The registered bookies at one moment."""

    writable: frozenset[BookieId]
    read_only: frozenset[BookieId]


class BookieRegistry:
    """Register bookies, list them, look up their service info, watch membership."""

    def __init__(
        self,
        store: NodeStore,
        root: str,
        config: RegistryConfig | None = None,
        clock: Clock | None = None,
    ) -> None:
        self._store = store
        self._clock: Clock = clock if clock is not None else default_clock()
        self._root = root
        self._config = config or RegistryConfig()
        self._writable_dir = join_path(root, AVAILABLE)
        self._read_only_dir = join_path(root, AVAILABLE, READONLY)

    def path(self, bookie_id: str, read_only: bool) -> str:
        """The registration node of ``bookie_id`` in the given mode."""
        return join_path(self._read_only_dir if read_only else self._writable_dir, bookie_id)

    async def register(
        self, bookie_id: str, info: BookieServiceInfo, *, read_only: bool = False
    ) -> BookieRegistration:
        """Register ``bookie_id`` and keep it registered until the result is closed.

        ``NoNodeError`` if the cluster is not formatted; ``NodeExistsError`` if another live
        session holds the registration for longer than ``stale_registration_wait_ms``.
        """
        if not bookie_id or "/" in bookie_id or bookie_id == READONLY:
            raise ConfigError(f"bookie id {bookie_id!r} cannot be registered")
        registration = BookieRegistration(self, self._store, BookieId(bookie_id), info, read_only)
        await registration.start()
        return registration

    async def bookies(self) -> BookieSet:
        writable = await self._children(self._writable_dir)
        read_only = await self._children(self._read_only_dir)
        return BookieSet(
            frozenset(BookieId(b) for b in writable if b != READONLY),
            frozenset(BookieId(b) for b in read_only),
        )

    async def service_info(self, bookie_id: str) -> BookieServiceInfo:
        """The info ``bookie_id`` registered (writable or read-only); ``NoNodeError``."""
        for read_only in (False, True):
            try:
                data, _version = await self._store.get(self.path(bookie_id, read_only))
            except NoNodeError:
                continue
            return BookieServiceInfo.decode(data, bookie_id)
        raise NoNodeError(f"bookie {bookie_id} is not registered")

    async def watch(self) -> AsyncGenerator[BookieSet, None]:
        """The current :class:`BookieSet`, then each different one; ends when the store closes.

        Use ``contextlib.aclosing`` to stop watching early.
        """
        writable = await self._store.watch(self._writable_dir, WatchKind.CHILDREN, persistent=True)
        read_only = await self._store.watch(
            self._read_only_dir, WatchKind.CHILDREN, persistent=True
        )
        last: BookieSet | None = None
        try:
            while True:
                try:
                    current = await self.bookies()
                    if current != last:
                        last = current
                        yield current
                except (ConnectionLossError, SessionExpiredError):
                    pass  # a RESET follows once the store reconnects
                await wait_any(writable, read_only)
        except MetadataClosedError:
            return
        finally:
            writable.close()
            read_only.close()

    async def create_owned(self, path: str, data: bytes) -> None:
        """Create ephemeral ``path`` for this session, waiting out a stale one from another."""
        clock = self._clock
        deadline = clock.monotonic() + self._config.stale_registration_wait_ms / 1000
        waited = False
        while True:
            try:
                await self._store.create(path, data, ephemeral=True)
                return
            except NodeExistsError:
                pass
            stat = await self._store.exists(path)
            if stat is not None and stat.ephemeral_owner == self._store.session_id:
                return
            if clock.monotonic() >= deadline:
                raise NodeExistsError(f"{path} is held by another live session")
            if not waited:
                waited = True
                _log.warning(
                    "%s is held by an earlier session (a process that died?); waiting up to "
                    "%.0f s for it to expire",
                    path,
                    deadline - clock.monotonic(),
                )
            async with await self._store.watch(path) as gone:
                if await self._store.exists(path) is not None:
                    await _wait_quietly(gone.get(), deadline - clock.monotonic())

    async def _children(self, path: str) -> list[str]:
        try:
            return await self._store.children(path)
        except NoNodeError:
            return []


class BookieRegistration:
    """One bookie's registration; :meth:`set_read_only` switches mode, :meth:`aclose` ends it."""

    def __init__(
        self,
        registry: BookieRegistry,
        store: NodeStore,
        bookie_id: BookieId,
        info: BookieServiceInfo,
        read_only: bool,
    ) -> None:
        self.bookie_id = bookie_id
        self._registry = registry
        self._store = store
        self._data = info.encode()
        self._read_only = read_only
        self._mutex = asyncio.Lock()
        self._tasks = TaskOwner(f"registration {bookie_id}", error=MetadataError)
        self._closed = False

    @property
    def read_only(self) -> bool:
        return self._read_only

    async def start(self) -> None:
        session = self._store.session_events()
        try:
            async with self._mutex:
                await self._publish()
        except BaseException:
            session.close()
            raise
        self._tasks.spawn(self._keep(session), "keep registered")

    async def set_read_only(self, read_only: bool) -> None:
        """Switch to read-only (or back to writable); the new node exists before the old goes."""
        async with self._mutex:
            if self._closed:
                raise MetadataClosedError(f"registration of {self.bookie_id} is closed")
            self._read_only = read_only
            await self._publish()

    async def aclose(self) -> None:
        """Unregister: the node is deleted and no longer re-created."""
        self._closed = True
        await self._tasks.aclose()
        async with self._mutex:
            for read_only in (False, True):
                await self._delete_if_owned(self._registry.path(self.bookie_id, read_only))

    async def __aenter__(self) -> BookieRegistration:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def _publish(self) -> None:
        try:
            await self._registry.create_owned(
                self._registry.path(self.bookie_id, self._read_only), self._data
            )
        except NoNodeError as exc:
            raise NoNodeError(f"cannot register {self.bookie_id}: cluster not formatted") from exc
        await self._delete_if_owned(self._registry.path(self.bookie_id, not self._read_only))

    async def _delete_if_owned(self, path: str) -> None:
        try:
            stat = await self._store.exists(path)
            if stat is not None and stat.ephemeral_owner == self._store.session_id:
                await self._store.delete(path)
        except MetadataError as exc:  # ephemeral: it goes with the session anyway
            _log.debug("could not delete %s: %s", path, exc)

    async def _keep(self, session: Subscription[SessionEvent]) -> None:
        async for event in session:
            if event.state is not SessionState.CONNECTED or self._closed:
                continue
            try:
                async with self._mutex:
                    await self._publish()
                _log.info("bookie %s registered again after reconnecting", self.bookie_id)
            except MetadataError as exc:
                _log.warning("bookie %s could not register again: %s", self.bookie_id, exc)


async def _wait_quietly(waiter: Awaitable[object], timeout_s: float) -> None:
    try:
        async with asyncio.timeout(max(timeout_s, 0.0)):
            await waiter
    except (TimeoutError, MetadataClosedError):
        pass
