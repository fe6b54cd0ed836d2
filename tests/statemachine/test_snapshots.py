"""The snapshot store on the in-memory cluster: a record whose write went in with its
answer lost keeps the ledger it names."""

from __future__ import annotations

import pytest

from bkeeper.common.errors import (
    ConnectionLossError,
    LedgerNotFoundError,
    MetadataError,
    NoNodeError,
)
from bkeeper.namedlog import LogConfig, NamedLogs, Position
from bkeeper.statemachine.snapshot_store import RECORD_RETRIES_MAX, SnapshotInfo, SnapshotStore
from bkeeper.testing.cluster import MemoryCluster
from bkeeper.testing.virtual_time import on_virtual_time


class AnswerLost:
    """Wraps a node store: its next write (``set`` or ``create``) is applied, then fails
    as if the server died before it answered; with ``reads_fail`` the reads after it fail
    too (the connection is still down)."""

    def __init__(self, store, *, reads_fail: bool = False) -> None:
        self._store = store
        self._reads_fail = reads_fail
        self.lost = 0

    def __getattr__(self, name):
        return getattr(self._store, name)

    async def _lose(self, method, *args, **kwargs):
        result = await method(*args, **kwargs)
        if not self.lost:
            self.lost += 1
            raise ConnectionLossError("ZooKeeper: connection lost (before the answer)")
        return result

    async def set(self, *args, **kwargs):
        return await self._lose(self._store.set, *args, **kwargs)

    async def create(self, *args, **kwargs):
        return await self._lose(self._store.create, *args, **kwargs)

    async def get(self, path):
        if self.lost and self._reads_fail:
            raise ConnectionLossError("ZooKeeper: disconnected (reconnecting)")
        return await self._store.get(path)


@pytest.mark.parametrize("first", [True, False], ids=["create", "set"])
@on_virtual_time
async def test_a_record_written_with_its_answer_lost_keeps_its_ledger(first):
    """The write of the record went in, its answer was lost: the store deleted the
    snapshot's ledger as unrecorded, so the record named a ledger that was gone and no
    member could restore it. It now reads the record to tell."""
    async with MemoryCluster(3) as cluster:
        bk = await cluster.client()
        logs = NamedLogs(bk, LogConfig())
        store = AnswerLost(bk.cluster.store)
        snapshots = SnapshotStore(logs, store, "journal")
        if not first:
            store.lost = 1  # the first snapshot is recorded normally
            earlier = await snapshots.write(b"earlier", Position(1, 0))
            store.lost = 0
        info = await snapshots.write(b"state", Position(2, 5))
        assert store.lost == 1 and info is not None
        assert await snapshots.latest() == info
        assert await snapshots.read(info) == b"state"
        if not first:  # the one it replaced is deleted, as after any record
            with pytest.raises(LedgerNotFoundError):
                await bk.ledger_metadata(earlier.ledger_id)


@on_virtual_time
async def test_a_record_whose_outcome_is_unknown_keeps_its_ledger(caplog):
    """The answer lost and the record unreadable after it: the write may have gone in,
    so the ledger is kept (and said), and the error is the caller's."""
    async with MemoryCluster(3) as cluster:
        bk = await cluster.client()
        logs = NamedLogs(bk, LogConfig())
        store = AnswerLost(bk.cluster.store, reads_fail=True)
        snapshots = SnapshotStore(logs, store, "journal")
        with pytest.raises(ConnectionLossError):
            await snapshots.write(b"state", Position(2, 5))
        recorded = await SnapshotStore(logs, bk.cluster.store, "journal").latest()
        assert recorded is not None and recorded.position == Position(2, 5)
        await bk.ledger_metadata(recorded.ledger_id)  # there
        assert f"recording ledger {recorded.ledger_id} failed" in caplog.text


class Racing:
    """Wraps a node store: before each of its next ``races`` writes, another member records
    an older snapshot, so the write loses the compare-and-set (``NodeExistsError`` on a
    create, ``MetadataVersionError`` on a set)."""

    def __init__(self, store, races: int) -> None:
        self._store = store
        self.races = races
        self.other = SnapshotInfo(999, Position(1, 0), 1, 1, 0).encode()

    def __getattr__(self, name):
        return getattr(self._store, name)

    async def _race(self, path) -> None:
        if self.races:
            self.races -= 1
            try:
                _data, version = await self._store.get(path)
            except NoNodeError:
                await self._store.create(path, self.other, make_parents=True)
            else:
                await self._store.set(path, self.other, version)

    async def create(self, path, *args, **kwargs):
        await self._race(path)
        return await self._store.create(path, *args, **kwargs)

    async def set(self, path, *args, **kwargs):
        await self._race(path)
        return await self._store.set(path, *args, **kwargs)


@on_virtual_time
async def test_a_record_that_loses_races_is_written_on_a_fresh_read_within_a_bound():
    async with MemoryCluster(3) as cluster:
        bk = await cluster.client()
        logs = NamedLogs(bk, LogConfig())
        store = Racing(bk.cluster.store, races=3)  # a create, then sets, lose
        info = await SnapshotStore(logs, store, "journal").write(b"state", Position(2, 5))
        assert store.races == 0 and info is not None
        assert await SnapshotStore(logs, bk.cluster.store, "journal").latest() == info
        store.races = RECORD_RETRIES_MAX  # every round lost: it gives up, deleting its ledger
        racing = SnapshotStore(logs, store, "journal")
        with pytest.raises(MetadataError, match=r"snapshot record .*journal: .*kept changing"):
            await racing.write(b"newer", Position(3, 0))
        assert [i async for i in bk.list_ledgers()] == [info.ledger_id]
