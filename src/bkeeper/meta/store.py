"""The node store port: a ZooKeeper-like tree of versioned nodes with sessions and watches.

Everything in :mod:`bkeeper.meta` above the drivers is written once against
:class:`NodeStore`; the ``memory://`` and ``zk://`` drivers both pass one conformance suite.

Contract, shared by every driver:

* Paths are absolute, ``/``-separated, with no empty component and no trailing ``/``.
* Every node has data (bytes, at most :data:`NODE_DATA_BYTES_MAX`) and a version that starts
  at 0 and grows by one per ``set``. ``set`` and ``delete`` compare it with the expected version
  (``ANY_VERSION`` = -1 matches any) and raise ``MetadataVersionError`` when it differs.
* A sequential create appends a per-parent counter as 10 zero-padded digits: the number of
  children created under the parent before (deletes do not advance it), so sequence numbers
  only increase.
* An ephemeral node belongs to the session that created it and vanishes when that session
  expires or the store closes. Ephemeral nodes cannot have children.
* A store lives across sessions: when its session expires it reports ``EXPIRED``, opens a new
  session by itself and reports ``CONNECTED``. Calls in flight fail with
  ``SessionExpiredError`` or ``ConnectionLossError`` (retriable; the call may have applied).
* Watches belong to the store, not the session. A data watch reports ``CREATED``, ``CHANGED``
  and ``DELETED`` of its node; a children watch reports ``CHILDREN_CHANGED`` and the node's
  own ``CREATED``/``DELETED``. After a reconnection every watch reports ``RESET`` (changes may
  have been missed). A watch is armed when :meth:`NodeStore.watch` returns, so "watch, then
  read" never misses a change. Events say "read again", they carry no data.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from bkeeper.common.errors import MetadataError
from bkeeper.common.validate import check_positive_ints
from bkeeper.meta.events import Subscription

__all__ = [
    "ANY_VERSION",
    "NODE_DATA_BYTES_MAX",
    "EventType",
    "NodeStat",
    "NodeStore",
    "SessionEvent",
    "StoreConfig",
    "Versioned",
    "SessionState",
    "WatchEvent",
    "WatchKind",
    "basename",
    "check_path",
    "join_path",
    "parent_path",
]

T = TypeVar("T")

#: Version that matches any version in ``set`` and ``delete``.
ANY_VERSION = -1

#: Largest node data accepted, as ZooKeeper's default ``jute.maxbuffer`` (1 MiB).
NODE_DATA_BYTES_MAX = 1024 * 1024


@dataclass(frozen=True)
class StoreConfig:
    """Settings every driver takes. ``memory://`` ignores the timeouts.

    ``session_timeout_ms`` is ZooKeeper's negotiated session timeout (Apache BookKeeper's
    ``zkTimeout``, 10 s); the server clamps it to [2, 20] ticks. ``watch_events_max`` bounds
    one watch's buffered events, ``watches_max`` the open watches of one store (more raise
    ``MetadataError``). A request with no answer within ``request_timeout_ms`` fails with
    ``ConnectionLossError`` (its outcome unknown, as ZooKeeper's connection loss): while no
    server answers, a ZooKeeper client queues requests until it reconnects, and a process
    shutting down with its ZooKeeper gone would wait for ever.

    A connect waits up to ``connect_timeout_ms`` for a session, but gives up after
    ``unreachable_timeout_ms`` once every host has refused the connection or failed to
    resolve (retried meanwhile: a server being started comes up within it).
    """

    session_timeout_ms: int = 10_000
    connect_timeout_ms: int = 10_000
    unreachable_timeout_ms: int = 2_000
    request_timeout_ms: int = 10_000
    reconnect_delay_ms_max: int = 1_000
    watch_events_max: int = 1024
    watches_max: int = 10_000
    session_events_max: int = 64

    def __post_init__(self) -> None:
        check_positive_ints(
            self,
            "session_timeout_ms",
            "connect_timeout_ms",
            "unreachable_timeout_ms",
            "request_timeout_ms",
            "reconnect_delay_ms_max",
            "watch_events_max",
            "watches_max",
            "session_events_max",
        )


@dataclass(frozen=True)
class Versioned(Generic[T]):
    """A value read from the store and the node version it was read at (for compare-and-set)."""

    value: T
    version: int


class WatchKind(enum.Enum):
    DATA = "data"
    CHILDREN = "children"


class EventType(enum.Enum):
    CREATED = "created"
    DELETED = "deleted"
    CHANGED = "changed"
    CHILDREN_CHANGED = "children_changed"
    RESET = "reset"


@dataclass(frozen=True)
class WatchEvent:
    type: EventType
    path: str


class SessionState(enum.Enum):
    CONNECTED = "connected"
    SUSPENDED = "suspended"
    EXPIRED = "expired"
    CLOSED = "closed"


@dataclass(frozen=True)
class SessionEvent:
    state: SessionState
    session_id: int


@dataclass(frozen=True)
class NodeStat:
    version: int
    ephemeral_owner: int
    num_children: int
    child_version: int


class NodeStore(Protocol):
    """A ZooKeeper-like tree of versioned nodes; see the module docstring for the contract."""

    @property
    def session_id(self) -> int:
        """The current session's id (ephemeral nodes record it as their owner)."""
        ...

    @property
    def session_state(self) -> SessionState: ...

    async def create(
        self,
        path: str,
        data: bytes = b"",
        *,
        ephemeral: bool = False,
        sequential: bool = False,
        make_parents: bool = False,
    ) -> str:
        """Create a node and return its actual path; ``NodeExistsError``, ``NoNodeError``."""
        ...

    async def get(self, path: str) -> tuple[bytes, int]:
        """The node's data and version; ``NoNodeError``."""
        ...

    async def set(self, path: str, data: bytes, version: int = ANY_VERSION) -> int:
        """Replace the data if the version matches; return the new version."""
        ...

    async def delete(self, path: str, version: int = ANY_VERSION) -> None:
        """Delete a node with no children; ``NoNodeError``, ``NotEmptyError``, version errors."""
        ...

    async def children(self, path: str) -> list[str]:
        """Names of the node's children, sorted; ``NoNodeError``."""
        ...

    async def exists(self, path: str) -> NodeStat | None: ...

    async def watch(
        self, path: str, kind: WatchKind = WatchKind.DATA, *, persistent: bool = False
    ) -> Subscription[WatchEvent]:
        """Watch a node (which need not exist); one event unless ``persistent``."""
        ...

    def session_events(self) -> Subscription[SessionEvent]:
        """Every session state change from now on, until closed."""
        ...

    async def expire_session(self) -> None:
        """End the current session as the server does on expiry, and wait for a new one.

        For tests and fault injection: ephemeral nodes of the old session are gone on return.
        """
        ...

    async def aclose(self) -> None:
        """Close the session (its ephemeral nodes vanish) and every subscription."""
        ...


def check_path(path: str) -> str:
    """Return ``path`` if it is a valid absolute node path, else raise ``MetadataError``."""
    if path == "/":
        return path
    if not path.startswith("/") or path.endswith("/") or "//" in path or "\0" in path:
        raise MetadataError(f"invalid node path {path!r}")
    return path


def join_path(parent: str, *names: str) -> str:
    """``parent`` and ``names`` joined with ``/``."""
    return "/".join([parent.rstrip("/"), *names]) or "/"


def parent_path(path: str) -> str:
    """The parent of ``path`` (the root is its own parent)."""
    head = path.rsplit("/", 1)[0]
    return head or "/"


def basename(path: str) -> str:
    """The last component of ``path``."""
    return path.rsplit("/", 1)[-1]
