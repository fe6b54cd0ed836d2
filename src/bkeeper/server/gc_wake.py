"""Wake the garbage collector of a full bookie when ledgers it holds lose their metadata.

A bookie read-only on a full disk frees space only by garbage collection, whose passes come
every ``gc_wait_ms`` (60 s +-25%): ledgers deleted to make room waited up to 75 s for it.
While the disk is full the collector (:mod:`bkeeper.server.garbage`) also waits on
:meth:`LedgerDeletionWatch.wait_change`: a one-shot children watch on each metadata node
that holds ledgers this bookie stores (``/ledgers/00/0000`` holds up to 10,000 ledgers, so a
few nodes cover thousands of ledgers), and it returns when one of them changes (a ledger
deleted there, or created: the pass that follows finds which) or the watch is reset (a new
ZooKeeper connection: changes may have been missed).

Watch, then read: once armed, each node's children are listed, and a ledger held here that
is missing already (deleted between the last pass's listing and the arming) returns at once.
At most :data:`WATCHED_NODES_MAX` nodes are watched, those holding the most local ledgers;
ledgers under the others wait for the periodic pass.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterable

from bkeeper.common.errors import NoNodeError
from bkeeper.meta.events import Subscription, wait_any
from bkeeper.meta.layout import ledger_path
from bkeeper.meta.store import NodeStore, WatchEvent, WatchKind, parent_path

__all__ = ["WATCHED_NODES_MAX", "LedgerDeletionWatch", "nodes_to_watch"]

#: The most metadata nodes watched at once (one ZooKeeper watch each).
WATCHED_NODES_MAX = 64


def nodes_to_watch(
    root: str, ledger_ids: Iterable[int], limit: int = WATCHED_NODES_MAX
) -> dict[str, set[str]]:
    """The metadata nodes holding ``ledger_ids``' nodes (at most ``limit``, those holding the
    most first), each with the names of those ledgers' nodes under it."""
    under: dict[str, set[str]] = {}
    for ledger_id in ledger_ids:
        path = ledger_path(root, ledger_id)
        under.setdefault(parent_path(path), set()).add(path.rsplit("/", 1)[1])
    counts = Counter({parent: len(names) for parent, names in under.items()})
    return {parent: under[parent] for parent, _ in counts.most_common(limit)}


class LedgerDeletionWatch:
    """Waits for the metadata of some ledgers to change (module doc)."""

    def __init__(self, store: NodeStore, root: str) -> None:
        self._store = store
        self._root = root

    async def wait_change(self, ledger_ids: Iterable[int]) -> None:
        """Return once a node holding one of ``ledger_ids``' metadata changes, one of those
        ledgers has no metadata, or the watch is reset; never when there is nothing to
        watch. Metadata errors propagate (``MetadataError``)."""
        nodes = nodes_to_watch(self._root, ledger_ids)
        if not nodes:
            await asyncio.Event().wait()  # nothing to watch: until cancelled
        subscriptions: list[Subscription[WatchEvent]] = []
        try:
            for node in nodes:
                subscriptions.append(await self._store.watch(node, WatchKind.CHILDREN))
            if await self._missing_already(nodes):
                return
            await wait_any(*subscriptions)
        finally:
            for subscription in subscriptions:
                subscription.close()

    async def _missing_already(self, nodes: dict[str, set[str]]) -> bool:
        for node, names in nodes.items():
            try:
                present = set(await self._store.children(node))
            except NoNodeError:
                return True  # the node went with its last ledger
            if not names <= present:
                return True
        return False
