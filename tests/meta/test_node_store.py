"""Conformance of the node store port: the same tests against memory:// and a real ZooKeeper."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable

import pytest

from bkeeper.common.errors import (
    ConnectionLossError,
    MetadataClosedError,
    MetadataError,
    MetadataVersionError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
)
from bkeeper.meta.memory import MemoryNodeStore, drop_memory_tree
from bkeeper.meta.store import EventType, NodeStore, SessionState, WatchKind, join_path

OpenStore = Callable[..., Awaitable[NodeStore]]

pytestmark = pytest.mark.asyncio(loop_scope="session")

WAIT_S = 5.0


async def test_create_get_set_delete_with_versions(open_store: OpenStore, root: str) -> None:
    store = await open_store()
    path = join_path(root, "a", "b")
    assert await store.create(path, b"one", make_parents=True) == path
    assert await store.get(path) == (b"one", 0)
    assert await store.set(path, b"two", 0) == 1
    with pytest.raises(MetadataVersionError):
        await store.set(path, b"stale", 0)
    assert await store.set(path, b"three") == 2  # -1 matches any version
    with pytest.raises(MetadataVersionError):
        await store.delete(path, 1)
    await store.delete(path, 2)
    assert await store.exists(path) is None
    with pytest.raises(NoNodeError, match=re.escape(path)):  # errors name their node
        await store.get(path)


async def test_create_errors(open_store: OpenStore, root: str) -> None:
    store = await open_store()
    with pytest.raises(NoNodeError, match=re.escape(join_path(root, "missing", "child"))):
        await store.create(join_path(root, "missing", "child"))
    await store.create(root, make_parents=True)
    with pytest.raises(NodeExistsError):
        await store.create(root)
    await store.create(join_path(root, "x", "y"), make_parents=True)
    with pytest.raises(NotEmptyError):
        await store.delete(join_path(root, "x"))
    with pytest.raises(MetadataError):
        await store.get("relative/path")


async def test_children_are_sorted_and_stat_counts_them(open_store: OpenStore, root: str) -> None:
    store = await open_store()
    await store.create(root, make_parents=True)
    for name in ("c", "a", "b"):
        await store.create(join_path(root, name))
    assert await store.children(root) == ["a", "b", "c"]
    stat = await store.exists(root)
    assert stat is not None and stat.num_children == 3 and stat.ephemeral_owner == 0


async def test_sequential_nodes_count_children_created(open_store: OpenStore, root: str) -> None:
    store = await open_store()
    await store.create(root, make_parents=True)
    first = await store.create(join_path(root, "n-"), sequential=True)
    assert first == join_path(root, "n-0000000000")
    await store.delete(first)
    second = await store.create(join_path(root, "n-"), sequential=True)
    await store.create(join_path(root, "plain"))
    third = await store.create(join_path(root, "n-"), sequential=True)
    # ZooKeeper counts the children created under the parent; deletes do not advance it.
    assert (second, third) == (join_path(root, "n-0000000001"), join_path(root, "n-0000000003"))


async def test_ephemeral_nodes_vanish_when_the_session_expires(
    open_store: OpenStore, root: str
) -> None:
    owner, observer = await open_store(), await open_store()
    await observer.create(root, make_parents=True)
    path = await owner.create(join_path(root, "e"), b"mine", ephemeral=True)
    stat = await observer.exists(path)
    assert stat is not None and stat.ephemeral_owner == owner.session_id
    with pytest.raises(MetadataError):
        await owner.create(join_path(path, "child"))
    old_session = owner.session_id
    await owner.expire_session()
    assert owner.session_id != old_session
    assert await observer.exists(path) is None
    assert owner.session_state is SessionState.CONNECTED
    await owner.create(path, ephemeral=True)  # the store works on in its new session


async def test_ephemeral_nodes_vanish_when_the_store_closes(
    open_store: OpenStore, root: str
) -> None:
    owner, observer = await open_store(), await open_store()
    await observer.create(root, make_parents=True)
    path = await owner.create(join_path(root, "e"), ephemeral=True)
    await owner.aclose()
    assert await observer.exists(path) is None
    with pytest.raises(MetadataClosedError):
        await owner.get(root)


async def test_one_shot_data_watch_fires_once(open_store: OpenStore, root: str) -> None:
    watcher, writer = await open_store(), await open_store()
    path = join_path(root, "w")
    watch = await watcher.watch(path)
    await writer.create(path, b"1", make_parents=True)
    event = await watch.get(WAIT_S)
    assert (event.type, event.path) == (EventType.CREATED, path)
    await writer.set(path, b"2")
    assert [e async for e in watch] == []  # one-shot: it has ended


async def test_persistent_data_watch_sees_change_and_delete(
    open_store: OpenStore, root: str
) -> None:
    watcher, writer = await open_store(), await open_store()
    path = join_path(root, "w")
    await writer.create(path, b"1", make_parents=True)
    async with await watcher.watch(path, persistent=True) as watch:
        await writer.set(path, b"2")
        assert (await watch.get(WAIT_S)).type is EventType.CHANGED
        await writer.set(path, b"3")
        assert (await watch.get(WAIT_S)).type is EventType.CHANGED
        await writer.delete(path)
        assert (await watch.get(WAIT_S)).type is EventType.DELETED


async def test_children_watch(open_store: OpenStore, root: str) -> None:
    watcher, writer = await open_store(), await open_store()
    async with await watcher.watch(root, WatchKind.CHILDREN, persistent=True) as watch:
        await writer.create(root, make_parents=True)
        assert (await watch.get(WAIT_S)).type is EventType.CREATED
        await writer.create(join_path(root, "kid"), ephemeral=True)
        assert (await watch.get(WAIT_S)).type is EventType.CHILDREN_CHANGED
        await writer.set(root, b"data changes are not child changes")
        await writer.delete(join_path(root, "kid"))
        assert (await watch.get(WAIT_S)).type is EventType.CHILDREN_CHANGED


async def test_watches_report_reset_after_session_expiry(open_store: OpenStore, root: str) -> None:
    store, writer = await open_store(), await open_store()
    path = join_path(root, "w")
    await writer.create(path, make_parents=True)
    events = store.session_events()
    async with await store.watch(path, persistent=True) as watch:
        await store.expire_session()
        states = [(await events.get(WAIT_S)).state]
        while states[-1] is not SessionState.CONNECTED:
            states.append((await events.get(WAIT_S)).state)
        assert SessionState.EXPIRED in states  # zk reports SUSPENDED first
        seen = await watch.get(WAIT_S)
        while seen.type is not EventType.RESET:
            seen = await watch.get(WAIT_S)
        await writer.set(path, b"after")  # the watch is armed again in the new session
        assert (await watch.get(WAIT_S)).type is EventType.CHANGED
    events.close()


async def test_memory_store_can_drop_its_connection() -> None:
    """memory:// fault hook: suspended, calls fail as retriable; resumed, watches reset."""
    store = MemoryNodeStore.open("suspend-test")
    try:
        await store.create("/n", b"x")
        watch = await store.watch("/n", persistent=True)
        events = store.session_events()
        store.suspend()
        with pytest.raises(ConnectionLossError) as raised:
            await store.get("/n")
        assert raised.value.retriable
        store.resume()
        assert await store.get("/n") == (b"x", 0)
        assert [(await events.get(WAIT_S)).state for _ in range(2)] == [
            SessionState.SUSPENDED,
            SessionState.CONNECTED,
        ]
        assert (await watch.get(WAIT_S)).type is EventType.RESET
    finally:
        await store.aclose()
        drop_memory_tree("suspend-test")
