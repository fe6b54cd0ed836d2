"""The ``zk://`` driver: :class:`ZkNodeStore`, the node store port over kazoo.

The only module of the library that imports kazoo. kazoo runs its own threads; every result,
watch and session callback crosses to the event loop with ``loop.call_soon_threadsafe`` and
never blocks kazoo's threads. Blocking kazoo calls (start, stop) run in worker threads.

Invariants:

* kazoo errors never escape: they are translated through :data:`KAZOO_ERRORS` (first match
  along the exception's class hierarchy) with ``raise ... from``.
* kazoo forgets all watches whenever the connection drops, so the store keeps its own table of
  watch slots (:class:`~bkeeper.meta.zk_watches.WatchTable`, one per kind and path). On
  every ``CONNECTED`` it arms each slot again and sends its subscribers ``RESET``. A fired
  watch is armed again *before* its event reaches persistent subscribers, so a subscriber
  that reads after the event cannot miss a change. Callbacks carry a generation number and
  stale ones are ignored.
* A request is refused (``ConnectionLossError``) while kazoo or this loop knows the connection
  is down: kazoo would hold it and send it on the next connection, perhaps after its caller
  gave up on it (``request_timeout_ms``) and went on as if it had failed.
* kazoo opens a new session by itself after expiry (``LOST`` then ``CONNECTED``); the store
  reports ``EXPIRED`` then ``CONNECTED`` with the new session id.
* Quiet: kazoo's per-attempt narration goes to DEBUG through
  :class:`~bkeeper.meta.zk_reach.KazooNarration`; this module logs one line per change of the
  session's state (:class:`~bkeeper.meta.zk_session.SessionNarration`), at WARNING only for an
  expired session (its ephemerals and watches are gone); a lost connection and its return are
  INFO. A connect that fails names each host and
  why (:meth:`~bkeeper.meta.zk_reach.Reachability.explain`), and gives up after
  ``unreachable_timeout_ms`` when every host refuses or does not resolve.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable
from typing import Any

from kazoo import exceptions as kz
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError, SequentialThreadingHandler
from kazoo.protocol.states import KazooState, WatchedEvent
from kazoo.security import make_digest_acl

from bkeeper.common.clock import Clock, default_clock
from bkeeper.common.errors import (
    ConnectionLossError,
    MetadataAuthError,
    MetadataClosedError,
    MetadataError,
    MetadataVersionError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    SessionExpiredError,
)
from bkeeper.meta.events import Subscription, TaskOwner
from bkeeper.meta.store import (
    ANY_VERSION,
    EventType,
    NodeStat,
    SessionEvent,
    SessionState,
    StoreConfig,
    WatchEvent,
    WatchKind,
    check_path,
)
from bkeeper.meta.zk_reach import KazooNarration, Reachability
from bkeeper.meta.zk_session import SessionNarration, start_session
from bkeeper.meta.zk_watches import WatchKey, WatchTable

__all__ = ["ARM_ATTEMPTS_MAX", "EXPIRE_ATTEMPTS_MAX", "KAZOO_ERRORS", "ZkNodeStore"]

_log = logging.getLogger(__name__)

#: How often arming a children watch may race with its node appearing and vanishing.
ARM_ATTEMPTS_MAX = 8

#: How often ``expire_session`` tries to close the session from a second connection.
EXPIRE_ATTEMPTS_MAX = 3

#: kazoo exception class -> bkeeper error class. Subclasses come before their bases.
KAZOO_ERRORS: dict[type[BaseException], type[MetadataError]] = {
    kz.NoNodeError: NoNodeError,
    kz.NoAuthError: MetadataAuthError,
    kz.AuthFailedError: MetadataAuthError,
    kz.NodeExistsError: NodeExistsError,
    kz.BadVersionError: MetadataVersionError,
    kz.NotEmptyError: NotEmptyError,
    kz.ZookeeperStoppedError: MetadataClosedError,
    kz.ConnectionClosedError: ConnectionLossError,
    kz.SessionExpiredError: SessionExpiredError,
    kz.ConnectionLoss: ConnectionLossError,
    kz.ConnectionDropped: ConnectionLossError,
    kz.OperationTimeoutError: ConnectionLossError,
    KazooTimeoutError: ConnectionLossError,
}

_EVENT_TYPES = {
    "CREATED": EventType.CREATED,
    "DELETED": EventType.DELETED,
    "CHANGED": EventType.CHANGED,
    "CHILD": EventType.CHILDREN_CHANGED,
}


#: kazoo's session states as the store's.
_SESSION_STATES = {
    KazooState.CONNECTED: SessionState.CONNECTED,
    KazooState.SUSPENDED: SessionState.SUSPENDED,
    KazooState.LOST: SessionState.EXPIRED,
}


#: kazoo exception class -> what it means, in words (kazoo's own messages are mostly empty).
KAZOO_WORDS: dict[type[BaseException], str] = {
    kz.NoNodeError: "no such node",
    kz.NoAuthError: "not authorized",
    kz.AuthFailedError: "authentication failed",
    kz.NodeExistsError: "node exists",
    kz.BadVersionError: "the node's version changed",
    kz.NotEmptyError: "the node has children",
    kz.ZookeeperStoppedError: "the client is stopped",
    kz.ConnectionClosedError: "connection closed",
    kz.SessionExpiredError: "session expired",
    kz.ConnectionLoss: "connection lost before the answer",
    kz.ConnectionDropped: "connection lost",
    kz.OperationTimeoutError: "no answer in time",
    KazooTimeoutError: "no answer in time",
}


def translate(exc: BaseException) -> MetadataError:
    """The bkeeper error for a kazoo error (``MetadataError`` when it has no closer match),
    worded: ``session expired``, not kazoo's bare ``SessionExpiredError``."""
    for cls in type(exc).__mro__:
        target = KAZOO_ERRORS.get(cls)
        if target is not None:
            words = KAZOO_WORDS.get(cls, type(exc).__name__)
            detail = str(exc)
            return target(f"{words}: {detail}" if detail else words)
    return MetadataError(f"ZooKeeper: {type(exc).__name__}: {exc}")


class ZkNodeStore:
    """The node store over a ZooKeeper ensemble; open with :meth:`connect`."""

    def __init__(
        self,
        hosts: str,
        config: StoreConfig,
        digest: tuple[str, str] | None = None,
        clock: Clock | None = None,
    ) -> None:
        self._hosts = hosts
        self._config = config
        self._loop = asyncio.get_running_loop()
        self._clock: Clock = clock or default_clock()
        self._reach = Reachability(hosts)
        self._client = _new_client(hosts, config, digest, self._reach)
        self._narration = SessionNarration(
            hosts, config.session_timeout_ms / 1000, self._reach, self._clock, self._away
        )
        self._state = SessionState.SUSPENDED
        self._session_id = 0
        self._closing = False
        self._session_subs: set[Subscription[SessionEvent]] = set()
        self._tasks = TaskOwner(f"zk {hosts}", error=MetadataError)
        self._watches = WatchTable(config, self._arm, self._tasks, lambda: self._closing)

    @classmethod
    async def connect(
        cls,
        hosts: str,
        config: StoreConfig | None = None,
        *,
        digest: tuple[str, str] | None = None,
        clock: Clock | None = None,
    ) -> ZkNodeStore:
        """Connect to ``hosts`` ("h1:p1,h2:p2"). ``ConnectionLossError`` naming each host and
        why it failed after ``connect_timeout_ms``, or sooner (``unreachable_timeout_ms``)
        when every host refuses the connection or does not resolve.
        With ``digest`` (user, password) the session authenticates with that identity and
        every node created gets an ACL for it alone (``digest:user:hash``, all permissions).
        ``clock`` times the connect and a lost connection (a ``SystemClock`` by default)."""
        store = cls(hosts, config or StoreConfig(), digest, clock)
        store._client.add_listener(store._on_state_threadsafe)
        stop = functools.partial(_stop_client, store._client)
        await start_session(store._client, stop, hosts, store._config, store._reach, store._clock)
        store._session_id = store._client.client_id[0]
        store._state = SessionState.CONNECTED
        return store

    @property
    def hosts(self) -> str:
        return self._hosts

    @property
    def session_id(self) -> int:
        return self._session_id

    @property
    def session_state(self) -> SessionState:
        return self._state

    async def create(
        self,
        path: str,
        data: bytes = b"",
        *,
        ephemeral: bool = False,
        sequential: bool = False,
        make_parents: bool = False,
    ) -> str:
        created: str = await self._call(
            self._client.create_async,
            check_path(path),
            data,
            ephemeral=ephemeral,
            sequence=sequential,
            makepath=make_parents,
        )
        return created

    async def get(self, path: str) -> tuple[bytes, int]:
        data, stat = await self._call(self._client.get_async, check_path(path))
        return bytes(data or b""), int(stat.version)

    async def set(self, path: str, data: bytes, version: int = ANY_VERSION) -> int:
        stat = await self._call(self._client.set_async, check_path(path), data, version)
        return int(stat.version)

    async def delete(self, path: str, version: int = ANY_VERSION) -> None:
        await self._call(self._client.delete_async, check_path(path), version)

    async def children(self, path: str) -> list[str]:
        names = await self._call(self._client.get_children_async, check_path(path))
        return sorted(names)

    async def exists(self, path: str) -> NodeStat | None:
        stat = await self._call(self._client.exists_async, check_path(path))
        return None if stat is None else _node_stat(stat)

    async def watch(
        self, path: str, kind: WatchKind = WatchKind.DATA, *, persistent: bool = False
    ) -> Subscription[WatchEvent]:
        return await self._watches.subscribe((kind, check_path(path)), persistent)

    def session_events(self) -> Subscription[SessionEvent]:
        sub: Subscription[SessionEvent] = Subscription(
            limit=self._config.session_events_max, on_close=self._session_subs.discard
        )
        self._session_subs.add(sub)
        return sub

    async def expire_session(self) -> None:
        events = self.session_events()
        try:
            for _attempt in range(EXPIRE_ATTEMPTS_MAX):
                old = self._session_id
                await asyncio.to_thread(self._close_session_elsewhere, self._client.client_id)
                if await self._wait_new_session(events, old):
                    return
            raise MetadataError(f"could not expire session {old:#x} of {self._hosts}")
        finally:
            events.close()

    async def aclose(self) -> None:
        if self._closing:
            return
        self._closing = True
        self._narration.close()
        self._watches.close()
        await self._tasks.aclose()
        self._client.remove_listener(self._on_state_threadsafe)
        await asyncio.to_thread(_stop_client, self._client)
        self._announce(SessionState.CLOSED)
        for session_sub in list(self._session_subs):
            session_sub.close()

    async def _call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run one kazoo ``*_async`` call and await its result on this loop. While the
        connection is down, and when no answer comes within ``request_timeout_ms``:
        ``ConnectionLossError`` (see :class:`~bkeeper.meta.store.StoreConfig`)."""
        if self._closing:
            raise MetadataClosedError(f"ZooKeeper store {self._hosts} is closed")
        if self._state is SessionState.SUSPENDED or not self._client.connected:
            # As the in-memory store does: callers retry once the session is back. kazoo
            # would queue the request until it reconnects, maybe never, maybe after its
            # caller gave up (request_timeout_ms) and took it for failed. kazoo knows of a
            # drop before this loop hears of it: both are asked.
            raise ConnectionLossError(f"ZooKeeper {self._hosts}: disconnected (reconnecting)")
        future: asyncio.Future[Any] = self._loop.create_future()
        timeout_s = self._config.request_timeout_ms / 1000
        try:
            method(*args, **kwargs).rawlink(functools.partial(self._settle_threadsafe, future))
            async with asyncio.timeout(timeout_s):
                return await future
        except (kz.KazooException, KazooTimeoutError) as exc:
            error = translate(exc)
            where = f" {args[0]}" if args and isinstance(args[0], str) else ""
            if isinstance(error, MetadataAuthError):
                error = MetadataAuthError(
                    f"ZooKeeper {self._hosts}: not authorized for{where} ({error}): the "
                    "cluster's nodes have ACLs; give the metadata URI the cluster's identity "
                    "with ?digest-file=FILE (docs/security.md)"
                )
            elif where:  # kazoo's errors name no node ("NoNodeError"): say which one
                error = type(error)(f"{error} (at{where})")
            if not isinstance(error, MetadataAuthError):
                error = type(error)(f"ZooKeeper {self._hosts}: {error}")
            raise error from exc
        except TimeoutError as exc:
            raise ConnectionLossError(
                f"ZooKeeper {self._hosts}: no answer within {timeout_s:g} s (request_timeout_ms)"
            ) from exc

    def _settle_threadsafe(self, future: asyncio.Future[Any], result: Any) -> None:
        # RuntimeError: the loop is closed, nobody awaits the result any more.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(_settle, future, result)

    async def _arm(self, key: WatchKey, generation: int) -> None:
        """Set the kazoo watch of ``key``, its firing told to the table with ``generation``."""
        callback = functools.partial(self._on_watch_threadsafe, key, generation)
        kind, path = key
        for _attempt in range(ARM_ATTEMPTS_MAX):
            if kind is WatchKind.DATA:
                await self._call(self._client.exists_async, path, watch=callback)
                return
            try:
                await self._call(self._client.get_children_async, path, watch=callback)
                return
            except NoNodeError:
                pass
            # No node: watch for its creation instead. If it appeared meanwhile, try again.
            if await self._call(self._client.exists_async, path, watch=callback) is None:
                return
        raise MetadataError(f"{path}: could not arm a children watch in {ARM_ATTEMPTS_MAX} tries")

    def _on_watch_threadsafe(self, key: WatchKey, generation: int, event: WatchedEvent) -> None:
        event_type = _EVENT_TYPES.get(event.type)
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._watches.fired, key, generation, event_type)

    def _on_state_threadsafe(self, state: str) -> None:
        client_id = self._client.client_id
        session_id = client_id[0] if client_id else 0
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._on_state, state, session_id)

    def _on_state(self, state: str, session_id: int) -> None:
        if self._closing:
            return
        after = _SESSION_STATES.get(state)
        if after is not None:
            self._narration.changed(self._state, after, reconnect=bool(self._session_id))
        if state == KazooState.CONNECTED:
            self._session_id = session_id or self._session_id
            self._announce(SessionState.CONNECTED)
            self._tasks.spawn(self._watches.rearm_all(), "re-arm watches")
        elif state == KazooState.SUSPENDED:
            self._watches.disarm_all()
            self._announce(SessionState.SUSPENDED)
        elif state == KazooState.LOST:
            self._announce(SessionState.EXPIRED)

    def _away(self) -> bool:
        return self._state is SessionState.SUSPENDED and not self._closing

    def _announce(self, state: SessionState) -> None:
        if self._state is state and state is not SessionState.CONNECTED:
            return
        self._state = state
        for sub in list(self._session_subs):
            sub.push(SessionEvent(state, self._session_id))

    def _close_session_elsewhere(self, client_id: tuple[int, bytes] | None) -> None:
        """Blocking: take over the session from a second connection and close it there."""
        if client_id is None:
            return
        other = KazooClient(
            self._hosts,
            client_id=client_id,
            timeout=self._config.session_timeout_ms / 1000,
            logger=KazooNarration(logging.getLogger("kazoo.client"), Reachability(self._hosts)),
        )
        try:
            other.start(self._config.connect_timeout_ms / 1000)
        except (KazooTimeoutError, kz.KazooException):
            pass  # the session is gone already
        finally:
            _stop_client(other)

    async def _wait_new_session(self, events: Subscription[SessionEvent], old: int) -> bool:
        expired = False
        try:
            async with asyncio.timeout(self._config.connect_timeout_ms / 1000):
                async for event in events:
                    expired = expired or event.state is SessionState.EXPIRED
                    if expired and event.state is SessionState.CONNECTED:
                        return event.session_id != old
        except TimeoutError:
            pass
        return False


class _ObservedHandler(SequentialThreadingHandler):  # type: ignore[misc]
    """kazoo's threading handler, telling a :class:`Reachability` how each TCP connect went
    (kazoo's narration does not say when one succeeded: a server that then gives no session
    is told apart so)."""

    def __init__(self, reach: Reachability) -> None:
        super().__init__()
        self._reach = reach

    def create_connection(self, *args: Any, **kwargs: Any) -> Any:
        address = kwargs.get("address") or args[0]
        host = kwargs.get("hostname") or address[0]
        try:
            sock = super().create_connection(*args, **kwargs)
        except OSError as exc:
            self._reach.attempted(host, address[1], exc)
            raise
        self._reach.attempted(host, address[1], None)
        return sock


def _new_client(
    hosts: str,
    config: StoreConfig,
    digest: tuple[str, str] | None = None,
    reach: Reachability | None = None,
) -> KazooClient:
    # Reconnecting never gives up while the store is open (kazoo stops it on ``stop``); the
    # named bound is the longest pause between attempts.
    retry = {
        "max_tries": -1,
        "delay": 0.05,
        "max_jitter": 0.1,
        "max_delay": config.reconnect_delay_ms_max / 1000,
    }
    security: dict[str, Any] = {}
    if digest is not None:
        user, password = digest
        # kazoo sends the auth on every (re)connection, before other requests, and applies
        # default_acl to every create (parents made with makepath too).
        security = {
            "auth_data": [("digest", f"{user}:{password}")],
            "default_acl": [make_digest_acl(user, password, all=True)],
        }
    reach = reach or Reachability(hosts)
    return KazooClient(
        hosts,
        timeout=config.session_timeout_ms / 1000,
        connection_retry=retry,
        randomize_hosts=True,
        handler=_ObservedHandler(reach),
        logger=KazooNarration(logging.getLogger("kazoo.client"), reach),
        **security,
    )


def _stop_client(client: KazooClient) -> None:
    try:
        client.stop()
    finally:
        client.close()


def _settle(future: asyncio.Future[Any], result: Any) -> None:
    if future.done():
        return
    exception = result.exception
    if exception is not None:
        future.set_exception(exception)
    else:
        future.set_result(result.value)


def _node_stat(stat: Any) -> NodeStat:
    return NodeStat(
        version=int(stat.version),
        ephemeral_owner=int(stat.ephemeralOwner),
        num_children=int(stat.numChildren),
        child_version=int(stat.cversion),
    )
