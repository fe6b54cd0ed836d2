"""A children watch that fires before the answer of the call that set it is processed.

kazoo hands both the answer and the watch event over from its own thread; the event can run
on the loop before the arming call resumes. Before the fix the slot was then marked armed
(no ZooKeeper watch behind it any more) and every later change was missed: an auditor never
saw a bookie that registered in such a moment die, and repaired nothing.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from kazoo.protocol.states import EventType, KazooState, WatchedEvent

from bkeeper.meta.store import StoreConfig, WatchKind
from bkeeper.meta.zk import ZkNodeStore
from bkeeper.testing.zookeeper import ZooKeeperServer


async def test_a_watch_fired_while_being_set_is_set_again(zookeeper: ZooKeeperServer) -> None:
    root = f"/watch-race-{uuid.uuid4().hex}"
    store = await ZkNodeStore.connect(zookeeper.connect_string, StoreConfig())
    other = await ZkNodeStore.connect(zookeeper.connect_string, StoreConfig())
    try:
        await other.create(root)
        client = store._client
        real = client.get_children_async
        racing = [True]

        def get_children_racing(path: str, watch: Any = None) -> Any:
            result = real(path, watch=watch)
            if watch is not None and racing[0]:
                racing[0] = False

                def fire(_result: Any) -> None:
                    # The watch is used up by a change, and its event is handed over before
                    # the answer (this callback runs before the store's own).
                    client._child_watchers[path].discard(watch)
                    watch(WatchedEvent(EventType.CHILD, KazooState.CONNECTED, path))

                result.rawlink(fire)
            return result

        client.get_children_async = get_children_racing
        sub = await store.watch(root, WatchKind.CHILDREN, persistent=True)
        await asyncio.wait_for(sub.get(), 30)  # the raced event
        client.get_children_async = real
        await other.create(f"{root}/later")
        event = await asyncio.wait_for(sub.get(), 30)  # before the fix: never came
        assert event.path == root
        sub.close()
    finally:
        await other.aclose()
        await store.aclose()
