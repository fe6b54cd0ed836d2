"""The ``zk://`` driver: :class:`ZkNodeStore`, the node store port over kazoo.

The only module of the library that imports kazoo. kazoo runs its own threads; every result,
watch and session callback crosses to the event loop with ``loop.call_soon_threadsafe`` and
never blocks kazoo's threads. Blocking kazoo calls (start, stop) run in worker threads.

Invariants:

* kazoo errors never escape: they are translated through :data:`KAZOO_ERRORS` (first match
  along the exception's class hierarchy) with ``raise ... from``.
* kazoo forgets all watches whenever the connection drops, so the store keeps its own table of
  watch slots (one per kind and path). On every ``CONNECTED`` it arms each slot again and
  sends its subscribers ``RESET``. A fired watch is armed again *before* its event reaches
  persistent subscribers, so a subscriber that reads after the event cannot miss a change.
  Callbacks carry a generation number and stale ones are ignored.
* A request is refused (``ConnectionLossError``) while kazoo or this loop knows the connection
  is down: kazoo would hold it and send it on the next connection, perhaps after its caller
  gave up on it (``request_timeout_ms``) and went on as if it had failed.
* kazoo opens a new session by itself after expiry (``LOST`` then ``CONNECTED``); the store
  reports ``EXPIRED`` then ``CONNECTED`` with the new session id.
* Quiet: kazoo's per-attempt narration goes to DEBUG through
  :class:`~bkeeper.meta.zk_reach.KazooNarration`; this module logs one line per change of the
  session's state, at WARNING only for an expired session (its ephemerals and watches are
  gone); a lost connection and its return are INFO. A connect that fails names each host and
  why (:meth:`~bkeeper.meta.zk_reach.Reachability.explain`), and gives up after
  ``unreachable_timeout_ms`` when every host refuses or does not resolve.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kazoo import exceptions as kz
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError, SequentialThreadingHandler
from kazoo.protocol.states import KazooState, WatchedEvent
from kazoo.security import make_digest_acl

from bkeeper.common.clock import Clock, SystemClock
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

__all__ = ["ARM_ATTEMPTS_MAX", "EXPIRE_ATTEMPTS_MAX", "KAZOO_ERRORS", "ZkNodeStore"]

_log = logging.getLogger(__name__)

#: How often arming a children watch may race with its node appearing and vanishing.
ARM_ATTEMPTS_MAX = 8

#: How often ``expire_session`` tries to close the session from a second connection.
EXPIRE_ATTEMPTS_MAX = 3

#: How often a connect looks whether it has a session, or cause to give up: first after
#: ``CONNECT_FIRST_POLL_S``, then at twice the interval each time up to ``CONNECT_POLL_S``
#: (a local ZooKeeper gives a session in 5-15 ms: a first look at 50 ms cost every command
#: ~45 ms; docs/benchmarks.md, "CLI start-up").
CONNECT_POLL_S = 0.05
CONNECT_FIRST_POLL_S = 0.005

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

_WatchKey = tuple[WatchKind, str]


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
        self._clock: Clock = clock or SystemClock()
        self._reach = Reachability(hosts)
        self._client = _new_client(hosts, config, digest, self._reach)
        self._lost_at = 0.0
        self._away_warning: asyncio.TimerHandle | None = None
        self._state = SessionState.SUSPENDED
        self._session_id = 0
        self._closing = False
        self._slots: dict[_WatchKey, _Slot] = {}
        self._generation = 0
        self._session_subs: set[Subscription[SessionEvent]] = set()
        self._tasks = TaskOwner(f"zk {hosts}", error=MetadataError)

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
        try:
            await store._wait_session()
        except BaseException as exc:
            await store._discard_client(exc)
            raise
        store._session_id = store._client.client_id[0]
        store._state = SessionState.CONNECTED
        return store

    async def _discard_client(self, cause: BaseException) -> None:
        """Stop the client of a connect that failed or was cancelled, without letting the
        clean-up replace ``cause`` (a cancellation above all: a kazoo ``stop`` that fails
        would otherwise be taken for the connect's own error, and the cancel lost)."""
        try:
            await asyncio.shield(asyncio.to_thread(_stop_client, self._client))
        except Exception as cleanup:  # reported on ``cause``, which goes on
            _log.warning(
                "ZooKeeper %s: stopping an unfinished client failed: %r", self._hosts, cleanup
            )
            cause.add_note(f"stopping the unfinished ZooKeeper client also failed: {cleanup!r}")

    async def _wait_session(self) -> None:
        config, clock = self._config, self._clock
        # kazoo's start runs in a thread that a cancel cannot stop: the client is stopped
        # only after it has finished (stopping it half-started fails inside kazoo).
        starting = asyncio.ensure_future(asyncio.to_thread(self._client.start_async))
        try:
            await asyncio.shield(starting)
        except asyncio.CancelledError as cancel:
            while not starting.done():
                with contextlib.suppress(asyncio.CancelledError):  # ``cancel`` goes on
                    await asyncio.wait({starting})
            if not starting.cancelled() and (error := starting.exception()) is not None:
                cancel.add_note(f"the ZooKeeper client's start failed meanwhile: {error!r}")
            raise
        started = clock.monotonic()
        deadline = started + config.connect_timeout_ms / 1000
        give_up = started + config.unreachable_timeout_ms / 1000
        poll_s = CONNECT_FIRST_POLL_S
        while not self._client.connected:
            now = clock.monotonic()
            if now >= deadline:
                waited_ms = config.connect_timeout_ms
            elif now >= give_up and self._reach.hopeless():
                waited_ms = config.unreachable_timeout_ms
            else:
                await asyncio.sleep(poll_s)
                poll_s = min(poll_s * 2, CONNECT_POLL_S)
                continue
            raise ConnectionLossError(self._reach.explain(self._hosts, waited_ms / 1000))

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
        key = (kind, check_path(path))
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
        self._cancel_away_warning()
        for slot in list(self._slots.values()):
            for sub in list(slot.subs):
                sub.close()
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

    async def _ensure_armed(self, key: _WatchKey, slot: _Slot) -> None:
        async with slot.lock:
            if not slot.armed:
                await self._arm(key, slot)

    async def _arm(self, key: _WatchKey, slot: _Slot) -> None:
        self._generation += 1
        generation = slot.generation = self._generation
        callback = functools.partial(self._on_watch_threadsafe, key, generation)
        kind, path = key
        for _attempt in range(ARM_ATTEMPTS_MAX):
            if kind is WatchKind.DATA:
                await self._call(self._client.exists_async, path, watch=callback)
                slot.armed = slot.fired != generation  # fired already: a re-arm is on its way
                return
            try:
                await self._call(self._client.get_children_async, path, watch=callback)
                slot.armed = slot.fired != generation
                return
            except NoNodeError:
                pass
            # No node: watch for its creation instead. If it appeared meanwhile, try again.
            if await self._call(self._client.exists_async, path, watch=callback) is None:
                slot.armed = slot.fired != generation
                return
        raise MetadataError(f"{path}: could not arm a children watch in {ARM_ATTEMPTS_MAX} tries")

    def _on_watch_threadsafe(self, key: _WatchKey, generation: int, event: WatchedEvent) -> None:
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._on_watch, key, generation, event)

    def _on_watch(self, key: _WatchKey, generation: int, event: WatchedEvent) -> None:
        slot = self._slots.get(key)
        event_type = _EVENT_TYPES.get(event.type)
        if slot is None or generation != slot.generation or event_type is None:
            return  # stale, or kazoo's NONE on a dropped connection (re-armed on CONNECTED)
        if key[0] is WatchKind.CHILDREN and event_type is EventType.CHANGED:
            return  # the creation watch of a children slot saw a data change: not ours
        slot.armed = False
        slot.fired = generation
        watch_event = WatchEvent(event_type, key[1])
        if any(slot.subs.values()) and not self._closing:
            self._tasks.spawn(self._rearm_then_deliver(key, slot, watch_event), "re-arm watch")
        else:
            _deliver(slot, watch_event)

    async def _rearm_then_deliver(self, key: _WatchKey, slot: _Slot, event: WatchEvent) -> None:
        try:
            await self._ensure_armed(key, slot)
        except MetadataError as exc:  # armed again with a RESET on the next CONNECTED
            _log.debug("re-arming %s failed: %s", key, exc)
        finally:
            _deliver(slot, event)

    async def _rearm_all(self) -> None:
        for key, slot in list(self._slots.items()):
            slot.armed = False
            try:
                await self._ensure_armed(key, slot)
            except MetadataError as exc:
                _log.debug("re-arming %s failed: %s", key, exc)
            _deliver(slot, WatchEvent(EventType.RESET, key[1]))

    def _unwatch(self, key: _WatchKey, sub: Subscription[WatchEvent]) -> None:
        slot = self._slots.get(key)
        if slot is not None:
            slot.subs.pop(sub, None)
            if not slot.subs:
                del self._slots[key]

    def _on_state_threadsafe(self, state: str) -> None:
        client_id = self._client.client_id
        session_id = client_id[0] if client_id else 0
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._on_state, state, session_id)

    def _on_state(self, state: str, session_id: int) -> None:
        if self._closing:
            return
        self._log_state(state)
        if state == KazooState.CONNECTED:
            self._session_id = session_id or self._session_id
            self._announce(SessionState.CONNECTED)
            self._tasks.spawn(self._rearm_all(), "re-arm watches")
        elif state == KazooState.SUSPENDED:
            for slot in self._slots.values():
                slot.armed = False
            self._announce(SessionState.SUSPENDED)
        elif state == KazooState.LOST:
            self._announce(SessionState.EXPIRED)

    def _log_state(self, state: str) -> None:
        """One line per change of the session's state (kazoo's own narration is DEBUG):
        lost and back at INFO (the store reconnects by itself, and its callers retry);
        expired at WARNING (the session's ephemeral nodes, locks and watches are gone)."""
        if state == KazooState.SUSPENDED and self._state is SessionState.CONNECTED:
            self._lost_at = self._clock.monotonic()
            why = self._reach.last_drop
            because = f" ({why})" if why else ""
            _log.info("ZooKeeper %s: connection lost%s, reconnecting", self._hosts, because)
            self._cancel_away_warning()
            away_s = self._config.session_timeout_ms / 1000
            self._away_warning = self._loop.call_later(away_s, self._warn_away, away_s)
        elif state == KazooState.CONNECTED and self._state is SessionState.SUSPENDED:
            self._cancel_away_warning()
            if self._session_id:  # not the first connection
                away_s = self._clock.monotonic() - self._lost_at
                _log.info("ZooKeeper %s: reconnected after %.1f s", self._hosts, away_s)
        elif state == KazooState.LOST and self._state is not SessionState.EXPIRED:
            _log.warning(
                "ZooKeeper %s: session expired (its ephemeral nodes and watches are gone); "
                "opening a new one", self._hosts,
            )  # fmt: skip

    def _warn_away(self, away_s: float) -> None:
        """Still no connection a session timeout after it was lost: the servers expire the
        session meanwhile (its ephemeral nodes go), which matters: said once, at WARNING."""
        self._away_warning = None
        if self._state is SessionState.SUSPENDED and not self._closing:
            why = self._reach.last_drop
            _log.warning(
                "ZooKeeper %s: no connection for %g s%s: its session expires on the servers; "
                "still trying", self._hosts, away_s, f" ({why})" if why else "",
            )  # fmt: skip

    def _cancel_away_warning(self) -> None:
        if self._away_warning is not None:
            self._away_warning.cancel()
            self._away_warning = None

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


def _deliver(slot: _Slot, event: WatchEvent) -> None:
    for sub in list(slot.subs):
        sub.push(event)


def _node_stat(stat: Any) -> NodeStat:
    return NodeStat(
        version=int(stat.version),
        ephemeral_owner=int(stat.ephemeralOwner),
        num_children=int(stat.numChildren),
        child_version=int(stat.cversion),
    )
