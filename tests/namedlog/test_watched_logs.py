"""Log metadata kept behind watches (bkeeper.namedlog.WatchedLogs), on the in-memory
cluster: looks after the first read nothing until the log's node changes; a change, a
deletion, a new log of the same name and a reconnection's ``RESET`` are each seen by the next
look; a read that an event overtook is not kept; at most ``logs_max`` logs are kept."""

from __future__ import annotations

import asyncio

import pytest

from bkeeper.common.errors import LogNotFoundError
from bkeeper.namedlog import LogStore, NamedLogs, WatchedLogs
from bkeeper.namedlog.core import LogMetadata
from bkeeper.testing.cluster import MemoryCluster
from bkeeper.testing.virtual_time import on_virtual_time


async def _settle() -> None:
    """Let the watches' followers take the events pushed so far."""
    for _ in range(3):
        await asyncio.sleep(0)


async def _touch(store: LogStore, name: str) -> int:
    """Write the log's metadata back unchanged: a new version, one ``CHANGED`` event."""
    meta, version = await store.read(name)
    new_version = await store.write(name, meta, version)
    await _settle()
    return new_version


@on_virtual_time
async def test_looks_read_nothing_until_the_node_changes():
    async with MemoryCluster(4) as cluster:
        logs = NamedLogs(await cluster.client())
        named = await logs.create("a")
        watched = WatchedLogs(logs.store)
        first = await watched.read("a")
        for _ in range(20):
            assert await watched.read("a") == first
        assert watched.reads == 1

        writer = await named.open_writer()  # a ledger added: the node changes
        await writer.append(b"x")
        await _settle()
        grown = await watched.read("a")
        assert [x.ledger_id for x in grown.ledgers] == [writer.ledger_id]
        assert await watched.read("a") == grown
        assert watched.reads == 2
        await writer.close()  # seals the ledger in its own metadata: the log's node stays
        await _settle()
        assert await watched.read("a") == grown
        assert watched.reads == 2
        await _touch(logs.store, "a")
        assert await watched.read("a") == grown, "the same content, read again"
        assert watched.reads == 3
        await watched.aclose()


@on_virtual_time
async def test_a_deleted_log_is_missing_at_once_and_a_new_one_of_its_name_is_seen():
    async with MemoryCluster(4) as cluster:
        logs = NamedLogs(await cluster.client())
        await logs.create("a")
        watched = WatchedLogs(logs.store)
        await watched.read("a")
        await logs.delete("a")
        await _settle()
        for _ in range(2):  # a log that is gone is not kept: each look asks again
            with pytest.raises(LogNotFoundError):
                await watched.read("a")
        assert watched.reads == 3
        await logs.create("a")
        await _settle()
        again = await watched.read("a")
        assert again.ledgers == ()
        await watched.read("a")
        assert watched.reads == 4
        await watched.aclose()


@on_virtual_time
async def test_a_reconnection_drops_what_was_kept():
    async with MemoryCluster(4) as cluster:
        bk = await cluster.client()
        logs = NamedLogs(bk)
        await logs.create("a")
        watched = WatchedLogs(logs.store)
        await watched.read("a")
        bk.cluster.store.suspend()
        assert await watched.read("a") is not None, "while disconnected, the last read"
        bk.cluster.store.resume()  # every watch reports RESET: events may have been missed
        await _settle()
        await watched.read("a")
        await bk.cluster.store.expire_session()
        await _settle()
        await watched.read("a")
        assert watched.reads == 3
        await watched.aclose()


class _Overtaken(LogStore):
    """A store whose read is overtaken: the node changes after it was read, before the
    reader has the answer."""

    def __init__(self, inner: LogStore) -> None:
        super().__init__(inner._store, "/unused")
        self.root = inner.root
        self.overtake = True

    async def read(self, name: str) -> tuple[LogMetadata, int]:
        meta, version = await super().read(name)
        if self.overtake:
            self.overtake = False
            await self.write(name, meta, version)
            await _settle()
        return meta, version


@on_virtual_time
async def test_a_read_an_event_overtook_is_returned_but_not_kept():
    async with MemoryCluster(4) as cluster:
        logs = NamedLogs(await cluster.client())
        await logs.create("a")
        store = _Overtaken(logs.store)
        watched = WatchedLogs(store)
        await watched.read("a")  # overtaken by its own write: not kept
        await watched.read("a")
        await watched.read("a")
        assert watched.reads == 2
        await watched.aclose()


@on_virtual_time
async def test_at_most_logs_max_logs_are_kept_and_closing_lets_every_watch_go():
    async with MemoryCluster(4) as cluster:
        logs = NamedLogs(await cluster.client())
        for name in "abc":
            await logs.create(name)
        watched = WatchedLogs(logs.store, logs_max=2)
        for name in "abc":
            await watched.read(name)
        await watched.read("b")
        await watched.read("c")
        assert watched.reads == 3
        await watched.read("a")  # let go of when "c" came: read again ("b" goes now)
        assert watched.reads == 4
        await watched.read("c")
        assert watched.reads == 4
        await watched.aclose()
        await watched.read("c")
        await watched.read("c")
        assert watched.reads == 6, "closed: every look reads"
        await _touch(logs.store, "c")  # no watch left to fire
    with pytest.raises(ValueError, match="logs_max"):
        WatchedLogs(logs.store, logs_max=0)
