"""One cluster's metadata: a node store session and the BookKeeper stores built on it.

:class:`ClusterMetadata` is what bookies, clients and tools open from a metadata URI; it owns
the store and closes it. :func:`format_cluster` lays out a new cluster (``LAYOUT``,
``INSTANCEID``, ``available/``, ``available/readonly/``, ``cookies/``, the under-replication
layout). Invariant: a formatted cluster is never formatted again unless asked with
``force``, which first deletes everything under the root.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from bkeeper.common.clock import Clock, default_clock
from bkeeper.common.errors import (
    ClusterExistsError,
    ClusterNotFoundError,
    MetadataError,
    NodeExistsError,
    NoNodeError,
)
from bkeeper.meta.cookie_store import CookieStore
from bkeeper.meta.idgen import IdGeneratorConfig, LedgerIdGenerator
from bkeeper.meta.layout import (
    AVAILABLE,
    COOKIES,
    HIERARCHICAL_LAYOUT,
    INSTANCEID,
    LAYOUT,
    READONLY,
    LedgerLayout,
)
from bkeeper.meta.ledgers import LedgerMetadataStore
from bkeeper.meta.racks import RackStore
from bkeeper.meta.registry import BookieRegistry, RegistryConfig
from bkeeper.meta.store import NodeStore, StoreConfig, join_path
from bkeeper.meta.underreplication import UnderReplicationConfig, UnderReplicationManager
from bkeeper.meta.uri import MetadataUri, open_node_store

__all__ = ["TREE_NODES_MAX", "ClusterMetadata", "MetadataConfig", "delete_tree", "format_cluster"]

#: Most nodes :func:`delete_tree` removes in one call.
TREE_NODES_MAX = 1_000_000


@dataclass(frozen=True)
class MetadataConfig:
    store: StoreConfig = field(default_factory=StoreConfig)
    id_generator: IdGeneratorConfig = field(default_factory=IdGeneratorConfig)
    registry: RegistryConfig = field(default_factory=RegistryConfig)
    underreplication: UnderReplicationConfig = field(default_factory=UnderReplicationConfig)


class ClusterMetadata:
    """The metadata of the cluster at ``root``: ledgers, ids, bookies, cookies, recovery."""

    def __init__(
        self,
        store: NodeStore,
        root: str,
        config: MetadataConfig | None = None,
        clock: Clock | None = None,
    ) -> None:
        config = config or MetadataConfig()
        self.store = store
        self.root = root
        self.id_generator = LedgerIdGenerator(store, root, config.id_generator)
        self.ledgers = LedgerMetadataStore(store, root, self.id_generator)
        self.registry = BookieRegistry(store, root, config.registry)
        #: Bookies' network locations (``<parent of root>/bookies``, Pulsar's format).
        self.racks = RackStore(store, root)
        self.cookies = CookieStore(store, root)
        self.underreplication = UnderReplicationManager(
            store, root, clock=clock or default_clock(), config=config.underreplication
        )

    @classmethod
    async def open(
        cls,
        uri: str | MetadataUri,
        config: MetadataConfig | None = None,
        *,
        require_cluster: bool = False,
    ) -> ClusterMetadata:
        """Open a session on the store ``uri`` names (``zk://...``, ``memory://...``).

        With ``require_cluster``, ``ClusterNotFoundError`` unless the root holds a formatted
        cluster (see :meth:`require_formatted`)."""
        parsed = uri if isinstance(uri, MetadataUri) else MetadataUri.parse(uri)
        config = config or MetadataConfig()
        cluster = cls(await open_node_store(parsed, config.store), parsed.root, config)
        if require_cluster:
            try:
                await cluster.require_formatted(uri if isinstance(uri, str) else parsed.root)
            except BaseException:
                await cluster.aclose()
                raise
        return cluster

    async def require_formatted(self, where: str = "") -> None:
        """``ClusterNotFoundError`` (saying how to make one) unless the root holds a
        cluster: its LAYOUT and INSTANCEID nodes."""
        if await self.layout() is None or await self.instance_id() is None:
            where = where or self.root
            raise ClusterNotFoundError(
                f"no cluster at {where} ({self.root} has no LAYOUT/INSTANCEID): check the "
                f"metadata URI, or create one with `bkeeper meta format --metadata {where}` "
                "(or `bkeeper sandbox` for a local cluster)"
            )

    async def format(self, *, force: bool = False) -> str:
        """Lay out a new cluster; its instance id. See :func:`format_cluster`."""
        return await format_cluster(self.store, self.root, force=force)

    async def instance_id(self) -> str | None:
        """The cluster's INSTANCEID, or None if it is not formatted."""
        try:
            data, _version = await self.store.get(join_path(self.root, INSTANCEID))
        except NoNodeError:
            return None
        return data.decode().strip()

    async def layout(self) -> LedgerLayout | None:
        """The LAYOUT node, or None if it is not formatted."""
        try:
            data, _version = await self.store.get(join_path(self.root, LAYOUT))
        except NoNodeError:
            return None
        return LedgerLayout.decode(data)

    async def aclose(self) -> None:
        await self.store.aclose()

    async def __aenter__(self) -> ClusterMetadata:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


async def format_cluster(store: NodeStore, root: str = "/ledgers", *, force: bool = False) -> str:
    """Create the layout of a new cluster under ``root``; return its new instance id.

    ``ClusterExistsError`` if ``root`` holds anything, unless ``force``: then it is deleted
    first (every ledger's metadata with it).
    """
    existing = await store.exists(root)
    if existing is not None and existing.num_children:
        if not force:
            raise ClusterExistsError(f"{root} holds a cluster already (format with force)")
        await delete_tree(store, root)
    instance_id = str(uuid.uuid4())
    try:
        await store.create(join_path(root, LAYOUT), HIERARCHICAL_LAYOUT.encode(), make_parents=True)
    except NodeExistsError as exc:
        raise ClusterExistsError(f"{root} was formatted concurrently") from exc
    await store.create(join_path(root, INSTANCEID), instance_id.encode())
    for name in (AVAILABLE, join_path(AVAILABLE, READONLY), COOKIES):
        await store.create(join_path(root, name))
    await UnderReplicationManager(store, root).ensure_layout()
    return instance_id


async def delete_tree(
    store: NodeStore, path: str, on_progress: Callable[[int, int], None] | None = None
) -> int:
    """Delete ``path`` and everything below it; the number of nodes deleted.

    ``MetadataError`` past :data:`TREE_NODES_MAX` nodes. Nodes created concurrently below a
    directory make its delete fail with ``NotEmptyError``. ``on_progress(done, total)`` is
    told after each delete, once every node is listed.
    """
    pending, order = [path], []
    while pending:
        node = pending.pop()
        order.append(node)
        if len(order) > TREE_NODES_MAX:
            raise MetadataError(f"{path} holds more than {TREE_NODES_MAX} nodes")
        try:
            pending.extend(join_path(node, name) for name in await store.children(node))
        except NoNodeError:
            continue
    for done, node in enumerate(reversed(order), 1):
        with contextlib.suppress(NoNodeError):
            await store.delete(node)
        if on_progress is not None:
            on_progress(done, len(order))
    return len(order)
