"""The ``memory://name`` driver: an in-process node store with ZooKeeper's semantics.

A :class:`MemoryTree` is one named tree shared by every store opened on ``memory://name``
in this process (it stays until :func:`drop_memory_tree`). Each :class:`MemoryNodeStore` is
one client with its own session. Invariants, as ZooKeeper's:

* versions start at 0 and grow by one per ``set``; the child version grows by one per child
  created or deleted; a sequential create appends, as 10 zero-padded digits, the number of
  children created under the parent before it (ZooKeeper's counter, which deletes do not
  advance);
* ephemeral nodes record their session and vanish when it ends; they cannot have children;
* a change fires the watches registered at that moment; one-shot watches fire once.

The tree is guarded by one lock so stores on different event loops or threads may share it;
events reach each subscriber on its own loop. Fault hooks: ``expire_session`` ends a session
on purpose; ``suspend``/``resume`` drop and restore the connection; a tree's ``faults`` (a
:class:`StoreFaults`, the simulator's) is asked before each request is applied and before its
answer is given, so requests take time and a request or its answer can be lost (the
``ConnectionLossError`` of a request that was applied all the same).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from bkeeper.common.errors import (
    ConnectionLossError,
    MetadataClosedError,
    MetadataError,
    MetadataVersionError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
)
from bkeeper.meta.events import Subscription
from bkeeper.meta.store import (
    ANY_VERSION,
    NODE_DATA_BYTES_MAX,
    EventType,
    NodeStat,
    SessionEvent,
    SessionState,
    StoreConfig,
    WatchEvent,
    WatchKind,
    basename,
    check_path,
    parent_path,
)

__all__ = ["MemoryNodeStore", "MemoryTree", "StoreFaults", "drop_memory_tree", "memory_tree"]

T = TypeVar("T")


class StoreFaults(Protocol):
    """What happens to the requests of a tree's sessions on their way (the simulator's)."""

    async def request(self, store: MemoryNodeStore, op: str, path: str) -> None:
        """Before ``op`` on ``path`` is applied: may wait (latency), or raise
        ``ConnectionLossError`` (the request was lost: nothing applied)."""

    async def answer(self, store: MemoryNodeStore, op: str, path: str) -> None:
        """After it was applied: may wait, or raise ``ConnectionLossError`` (the answer was
        lost: the caller cannot tell that it was applied)."""


_TREES: dict[str, MemoryTree] = {}
_TREES_LOCK = threading.Lock()

_WatchKey = tuple[WatchKind, str]


def memory_tree(name: str) -> MemoryTree:
    """The tree named ``name`` in this process, created empty on first use."""
    with _TREES_LOCK:
        tree = _TREES.get(name)
        if tree is None:
            tree = _TREES[name] = MemoryTree(name)
        return tree


def drop_memory_tree(name: str) -> None:
    """Forget the tree named ``name``; stores already open on it keep working on their own."""
    with _TREES_LOCK:
        _TREES.pop(name, None)


@dataclass
class _Node:
    data: bytes
    ephemeral_owner: int = 0
    version: int = 0
    child_version: int = 0
    sequence: int = 0
    children: set[str] = field(default_factory=set)

    def stat(self) -> NodeStat:
        return NodeStat(self.version, self.ephemeral_owner, len(self.children), self.child_version)


class MemoryTree:
    """One named tree of nodes with sessions and watches; thread-safe."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.RLock()
        self._nodes: dict[str, _Node] = {"/": _Node(b"")}
        self._ephemerals: dict[int, set[str]] = {}
        self._watches: dict[_WatchKey, dict[Subscription[WatchEvent], bool]] = {}
        self._next_session_id = 1
        #: Set by a simulator: what happens to requests on their way (None: nothing).
        self.faults: StoreFaults | None = None

    def open_session(self) -> int:
        with self._lock:
            session_id = self._next_session_id
            self._next_session_id += 1
            self._ephemerals[session_id] = set()
            return session_id

    def close_session(self, session_id: int) -> None:
        """End a session: its ephemeral nodes are deleted, firing their watches."""
        with self._lock:
            for path in sorted(self._ephemerals.pop(session_id, set()), reverse=True):
                if path in self._nodes:
                    self._remove(path)

    def is_live(self, session_id: int) -> bool:
        with self._lock:
            return session_id in self._ephemerals

    def create(
        self, session_id: int, path: str, data: bytes, ephemeral: bool, sequential: bool
    ) -> str:
        check_path(path)
        _check_size(data)
        with self._lock:
            self._check_live(session_id)
            parent = self._nodes.get(parent_path(path))
            if parent is None:
                raise NoNodeError(f"{parent_path(path)}: no such node (creating {path})")
            if parent.ephemeral_owner:
                raise MetadataError(f"{parent_path(path)}: ephemeral nodes cannot have children")
            if sequential:
                path = f"{path}{parent.sequence:010d}"
            if path in self._nodes or path == "/":
                raise NodeExistsError(f"{path}: node exists")
            self._add(path, parent, data, session_id if ephemeral else 0)
            return path

    def get(self, path: str) -> tuple[bytes, int]:
        with self._lock:
            node = self._node(path)
            return node.data, node.version

    def set(self, path: str, data: bytes, version: int) -> int:
        _check_size(data)
        with self._lock:
            node = self._node(path)
            _check_version(path, node, version)
            node.data = data
            node.version += 1
            self._fire(WatchKind.DATA, path, EventType.CHANGED)
            return node.version

    def delete(self, path: str, version: int) -> None:
        with self._lock:
            node = self._node(path)
            _check_version(path, node, version)
            if node.children:
                raise NotEmptyError(f"{path}: node has {len(node.children)} children")
            if path == "/":
                raise MetadataError("the root node cannot be deleted")
            self._remove(path)

    def children(self, path: str) -> list[str]:
        with self._lock:
            return sorted(self._node(path).children)

    def exists(self, path: str) -> NodeStat | None:
        check_path(path)
        with self._lock:
            node = self._nodes.get(path)
            return None if node is None else node.stat()

    def add_watch(
        self, kind: WatchKind, path: str, sub: Subscription[WatchEvent], persistent: bool
    ) -> None:
        check_path(path)
        with self._lock:
            self._watches.setdefault((kind, path), {})[sub] = persistent

    def remove_watch(self, kind: WatchKind, path: str, sub: Subscription[WatchEvent]) -> None:
        with self._lock:
            subs = self._watches.get((kind, path), {})
            subs.pop(sub, None)
            if not subs:
                self._watches.pop((kind, path), None)

    def _check_live(self, session_id: int) -> None:
        if session_id not in self._ephemerals:
            raise MetadataClosedError(f"memory://{self.name}: session {session_id} has ended")

    def _node(self, path: str) -> _Node:
        node = self._nodes.get(check_path(path))
        if node is None:
            raise NoNodeError(f"{path}: no such node")
        return node

    def _add(self, path: str, parent: _Node, data: bytes, owner: int) -> None:
        self._nodes[path] = _Node(data, ephemeral_owner=owner)
        parent.children.add(basename(path))
        parent.child_version += 1
        parent.sequence += 1
        if owner:
            self._ephemerals[owner].add(path)
        self._fire(WatchKind.DATA, path, EventType.CREATED)
        self._fire(WatchKind.CHILDREN, path, EventType.CREATED)
        self._fire(WatchKind.CHILDREN, parent_path(path), EventType.CHILDREN_CHANGED)

    def _remove(self, path: str) -> None:
        node = self._nodes.pop(path)
        parent = self._nodes[parent_path(path)]
        parent.children.discard(basename(path))
        parent.child_version += 1
        if node.ephemeral_owner:
            self._ephemerals.get(node.ephemeral_owner, set()).discard(path)
        self._fire(WatchKind.DATA, path, EventType.DELETED)
        self._fire(WatchKind.CHILDREN, path, EventType.DELETED)
        self._fire(WatchKind.CHILDREN, parent_path(path), EventType.CHILDREN_CHANGED)

    def _fire(self, kind: WatchKind, path: str, event_type: EventType) -> None:
        subs = self._watches.get((kind, path))
        if not subs:
            return
        for sub, persistent in list(subs.items()):
            if not persistent:
                del subs[sub]
            sub.push(WatchEvent(event_type, path))
        if not subs:
            self._watches.pop((kind, path), None)


def _check_size(data: bytes) -> None:
    if len(data) > NODE_DATA_BYTES_MAX:
        raise MetadataError(f"node data of {len(data)} bytes exceeds {NODE_DATA_BYTES_MAX}")


def _check_version(path: str, node: _Node, version: int) -> None:
    if version not in (ANY_VERSION, node.version):
        raise MetadataVersionError(f"{path}: expected version {version}, found {node.version}")


class MemoryNodeStore:
    """One client session on a :class:`MemoryTree`; implements ``NodeStore``."""

    def __init__(self, tree: MemoryTree, config: StoreConfig | None = None) -> None:
        self._tree = tree
        self._config = config or StoreConfig()
        self._session_id = tree.open_session()
        self._state = SessionState.CONNECTED
        self._watches: dict[Subscription[WatchEvent], _WatchKey] = {}
        # Insertion-ordered (a dict, not a set): subscribers hear events in the order they
        # subscribed, the same in every run (a simulator replays runs bit for bit).
        self._session_subs: dict[Subscription[SessionEvent], None] = {}

    @classmethod
    def open(cls, name: str, config: StoreConfig | None = None) -> MemoryNodeStore:
        """A new session on the process-wide tree named ``name``."""
        return cls(memory_tree(name), config)

    @property
    def tree(self) -> MemoryTree:
        return self._tree

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
        if make_parents:
            check_path(path)

        def apply() -> str:
            if make_parents:
                self._create_parents(parent_path(path))
            return self._tree.create(self._session_id, path, data, ephemeral, sequential)

        return await self._call("create", path, apply)

    async def get(self, path: str) -> tuple[bytes, int]:
        return await self._call("get", path, lambda: self._tree.get(path))

    async def set(self, path: str, data: bytes, version: int = ANY_VERSION) -> int:
        return await self._call("set", path, lambda: self._tree.set(path, data, version))

    async def delete(self, path: str, version: int = ANY_VERSION) -> None:
        await self._call("delete", path, lambda: self._tree.delete(path, version))

    async def children(self, path: str) -> list[str]:
        return await self._call("children", path, lambda: self._tree.children(path))

    async def exists(self, path: str) -> NodeStat | None:
        return await self._call("exists", path, lambda: self._tree.exists(path))

    async def _call(self, op: str, path: str, apply: Callable[[], T]) -> T:
        self._check_open()
        faults = self._tree.faults
        if faults is None:
            return apply()
        await faults.request(self, op, path)
        self._check_open()
        result = apply()
        await faults.answer(self, op, path)
        return result

    async def watch(
        self, path: str, kind: WatchKind = WatchKind.DATA, *, persistent: bool = False
    ) -> Subscription[WatchEvent]:
        self._check_open()
        if len(self._watches) >= self._config.watches_max:
            raise MetadataError(f"{self._config.watches_max} watches open (watches_max)")
        sub: Subscription[WatchEvent] = Subscription(
            limit=self._config.watch_events_max, one_shot=not persistent, on_close=self._unwatch
        )
        self._watches[sub] = (kind, path)
        self._tree.add_watch(kind, path, sub, persistent)
        return sub

    def session_events(self) -> Subscription[SessionEvent]:
        sub: Subscription[SessionEvent] = Subscription(
            limit=self._config.session_events_max, on_close=self._forget_session_sub
        )
        self._session_subs[sub] = None
        return sub

    async def expire_session(self) -> None:
        """Fault hook: the session ends (its ephemeral nodes go) and, as a ZooKeeper client
        reconnecting after an expiry, the store hears ``EXPIRED`` and gets a new session.
        Also for a session the tree already ended (a simulator's service expiring a
        disconnected client), suspended or not."""
        if self._state is SessionState.CLOSED:
            raise MetadataClosedError(f"memory://{self._tree.name}: store is closed")
        old = self._session_id
        self._tree.close_session(old)
        self._announce(SessionState.EXPIRED, old)
        self._session_id = self._tree.open_session()
        self._announce(SessionState.CONNECTED, self._session_id)
        for sub, (_kind, path) in list(self._watches.items()):
            sub.push(WatchEvent(EventType.RESET, path))

    def suspend(self) -> None:
        """Fault hook: act as if the connection dropped. Calls raise ``ConnectionLossError``
        until :meth:`resume`; the session (and its ephemeral nodes) lives on."""
        self._check_open()
        self._announce(SessionState.SUSPENDED, self._session_id)

    def resume(self) -> None:
        """Fault hook: reconnect to the same session; every watch reports ``RESET``."""
        if self._state is SessionState.SUSPENDED:
            self._announce(SessionState.CONNECTED, self._session_id)
            for sub, (_kind, path) in list(self._watches.items()):
                sub.push(WatchEvent(EventType.RESET, path))

    async def aclose(self) -> None:
        if self._state is SessionState.CLOSED:
            return
        self._tree.close_session(self._session_id)
        self._announce(SessionState.CLOSED, self._session_id)
        for sub in list(self._watches):
            sub.close()
        for session_sub in list(self._session_subs):
            session_sub.close()

    def _create_parents(self, path: str) -> None:
        missing: list[str] = []
        while path != "/" and self._tree.exists(path) is None:
            missing.append(path)
            path = parent_path(path)
        for each in reversed(missing):
            with contextlib.suppress(NodeExistsError):
                self._tree.create(self._session_id, each, b"", False, False)

    def _forget_session_sub(self, sub: Subscription[SessionEvent]) -> None:
        self._session_subs.pop(sub, None)

    def _check_open(self) -> None:
        if self._state is SessionState.CLOSED:
            raise MetadataClosedError(f"memory://{self._tree.name}: store is closed")
        if self._state is SessionState.SUSPENDED:
            raise ConnectionLossError(f"memory://{self._tree.name}: disconnected (suspended)")
        if not self._tree.is_live(self._session_id):
            raise MetadataClosedError(f"memory://{self._tree.name}: session ended")

    def _announce(self, state: SessionState, session_id: int) -> None:
        self._state = state
        for sub in list(self._session_subs):
            sub.push(SessionEvent(state, session_id))

    def _unwatch(self, sub: Subscription[WatchEvent]) -> None:
        key = self._watches.pop(sub, None)
        if key is not None:
            self._tree.remove_watch(key[0], key[1], sub)
