"""A named log deleted under its writer (issue 36): the writer learns of it within a second
and nothing it reports from then on is a success, on the in-memory cluster (``memory://``).

The deletes here go past ``NamedLogs.delete``'s fencing (the log's node deleted by another
tool, the ledgers deleted without a fence, bookies that have forgotten the fence at their
garbage collection): before the fix the writer went on acknowledging appends into a log and
ledgers that were gone.
"""

from __future__ import annotations

import asyncio

import pytest

from bkeeper.client.config import ClientConfig
from bkeeper.common.errors import (
    LedgerDeletedError,
    LogDeletedError,
    LogFencedError,
    LogNotFoundError,
)
from bkeeper.namedlog import LogConfig, NamedLogs
from bkeeper.testing.cluster import Fault, MemoryCluster
from bkeeper.testing.virtual_time import on_virtual_time
from bkeeper.wire.messages import AddRequest

FAST = ClientConfig(add_timeout_ms=60_000, read_timeout_ms=500)
#: Within this long of the delete, the writer knows (the issue's bound).
LEARN_S = 1.0


async def _drop_log_node(logs: NamedLogs, name: str) -> None:
    """Delete a log's node and its ledgers' metadata without fencing anything (as a tool
    that deletes nodes, or a bkeeper from before the delete fenced, does)."""
    meta, version = await logs.store.read(name)
    await logs.store.delete(name, version)
    for ledger in meta.ledgers:
        await logs.bk.delete_ledger(ledger.ledger_id, fence=False)


async def _sent(faults: list[Fault]) -> None:
    """Wait until every bookie holds an add back (the append is on its way, unanswered)."""
    async with asyncio.timeout(10):
        while not all(fault.applied for fault in faults):
            await asyncio.sleep(0.005)


@pytest.mark.parametrize("batching", [False, True], ids=["entries", "batches"])
@on_virtual_time
async def test_an_append_pending_at_the_delete_fails_within_a_second(batching: bool) -> None:
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST), LogConfig(batching=batching, linger_ms=0))
        other = NamedLogs(await cluster.client(FAST))
        writer = await (await logs.create("doomed")).open_writer()
        before = await writer.append(b"acknowledged before")
        faults = [cluster.fault(i, AddRequest, delay_s=3.0) for i in range(3)]
        pending = await writer.append_async(b"in flight at the delete")
        await _sent(faults)
        await _drop_log_node(other, "doomed")
        async with asyncio.timeout(LEARN_S):
            with pytest.raises(LogDeletedError, match="log 'doomed' was deleted"):
                await pending
        await asyncio.sleep(3.5)  # the bookies acknowledge it now: still a failure
        assert isinstance(pending.exception(), LogDeletedError)
        with pytest.raises(LogDeletedError):
            await writer.append(b"after the delete")
        with pytest.raises(LogDeletedError):
            await writer.close()
        assert before.entry_id == 0


@on_virtual_time
async def test_an_idle_writer_learns_of_the_delete_and_fails_every_later_append() -> None:
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST))
        writer = await (await logs.create("doomed")).open_writer()
        await writer.append(b"x")
        await _drop_log_node(NamedLogs(await cluster.client(FAST)), "doomed")
        async with asyncio.timeout(LEARN_S):
            error = await writer.wait_deleted()
        assert isinstance(error, LogNotFoundError)  # what callers caught before
        assert not error.retriable
        for append in (
            writer.append(b"y"),
            writer.append_many([b"a", b"b"]),
            writer.append_async(b"z"),
        ):
            with pytest.raises(LogDeletedError, match="'doomed'"):
                await append


@on_virtual_time
async def test_the_fenced_delete_is_named_as_a_delete_not_another_writer() -> None:
    """``NamedLogs.delete`` seals the writer's ledger a moment before it deletes the node: a
    writer failing in between said "another writer took over"."""
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST))
        writer = await (await logs.create("doomed")).open_writer()
        await writer.append(b"x")
        other = NamedLogs(await cluster.client(FAST))
        await other.log("doomed").seal_unsealed(await other.log("doomed").metadata())
        sealed_only = asyncio.ensure_future(writer.append(b"fenced, not yet deleted"))
        await asyncio.sleep(0.2)  # the append fails at the fence and asks the metadata
        assert await other.delete("doomed") == 1
        with pytest.raises(LogDeletedError):
            await sealed_only


@on_virtual_time
async def test_a_writer_taken_over_is_still_fenced_not_deleted() -> None:
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST))
        writer = await (await logs.create("shared")).open_writer()
        await writer.append(b"x")
        newer = await NamedLogs(await cluster.client(FAST)).log("shared").open_writer()
        with pytest.raises(LogFencedError, match="another writer took over") as caught:
            await writer.append(b"y")
        assert not isinstance(caught.value, LogDeletedError)
        await newer.close()


@on_virtual_time
async def test_a_raw_ledger_deleted_under_its_writer_fails_its_appends() -> None:
    """A ledger's metadata deleted without a fence: bookies still take its adds."""
    async with MemoryCluster(3) as cluster:
        bk = await cluster.client(FAST)
        handle = await bk.create_ledger(3, 3, 2, password=b"pw")
        assert await handle.append(b"before") == 0
        faults = [cluster.fault(i, AddRequest, delay_s=3.0) for i in range(3)]
        pending = await handle.append_async(b"in flight at the delete")
        await _sent(faults)
        await (await cluster.client(FAST)).delete_ledger(handle.ledger_id, fence=False)
        async with asyncio.timeout(LEARN_S):
            with pytest.raises(LedgerDeletedError, match=f"ledger {handle.ledger_id} was deleted"):
                await pending
        with pytest.raises(LedgerDeletedError):
            await handle.append(b"after")
        with pytest.raises(LedgerDeletedError):
            await handle.close()


@on_virtual_time
async def test_a_log_writer_whose_ledger_is_deleted_by_hand_fails() -> None:
    """The log stays, its writer's ledger is deleted under it (``bkeeper ledger delete``
    without a fence): the writer fails, saying so, instead of writing into a ledger that
    is gone."""
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST))
        writer = await (await logs.create("kept")).open_writer()
        await writer.append(b"before")
        faults = [cluster.fault(i, AddRequest, delay_s=3.0) for i in range(3)]
        pending = await writer.append_async(b"in flight at the delete")
        await _sent(faults)
        await (await cluster.client(FAST)).delete_ledger(writer.ledger_id, fence=False)
        async with asyncio.timeout(LEARN_S):
            with pytest.raises(LogFencedError, match="was taken from it") as caught:
                await pending
        assert f"ledger {writer.ledger_id} was deleted" in str(caught.value)
        with pytest.raises(LogFencedError):
            await writer.append(b"after")
