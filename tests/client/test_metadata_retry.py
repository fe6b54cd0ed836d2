"""Metadata calls outlive a lost metadata connection (the in-memory store's suspend hook).

The real-ZooKeeper case (a writer stopped past its session timeout) is in
test_sync_client.py; here each rule is pinned without timing: a call made while the store is
away waits for it, within ``metadata_reconnect_timeout_ms``, and fails naming the wait after.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging

import pytest

from bkeeper.common.errors import ConnectionLossError
from bkeeper.meta.ledger_metadata import LedgerState
from bkeeper.meta.memory import MemoryNodeStore
from bkeeper.testing.cluster import MemoryCluster
from bkeeper.testing.virtual_time import on_virtual_time
from tests.client.test_scenarios_ensemble import FAST, until
from tests.client.test_scenarios_more import bounded


@on_virtual_time
async def test_calls_made_while_the_store_is_away_wait_for_it(caplog) -> None:
    caplog.set_level(logging.INFO, logger="bkeeper.client.metadata")
    async with MemoryCluster(3) as cluster:
        bk = await cluster.client(FAST)
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        other = await bk.create_ledger(3, 3, 2, password=b"pw")
        assert await bounded(wh.append(b"0")) == 0
        store = bk.cluster.store
        assert isinstance(store, MemoryNodeStore)
        store.suspend()
        assert await bounded(wh.append(b"1")) == 1  # adds need no metadata
        closing = asyncio.ensure_future(wh.close())
        listing = asyncio.ensure_future(_ids(bk))
        await until(
            lambda: sum("trying again" in r.getMessage() for r in caplog.records) >= 2,
            "both calls failing and waiting",
        )
        assert not closing.done() and not listing.done()
        store.resume()
        await bounded(closing)
        assert wh.metadata.state is LedgerState.CLOSED and wh.metadata.last_entry_id == 1
        assert await bounded(listing) == [wh.ledger_id, other.ledger_id]


@on_virtual_time
async def test_a_store_away_longer_than_the_wait_fails_the_call_naming_it() -> None:
    config = dataclasses.replace(FAST, metadata_reconnect_timeout_ms=200)
    async with MemoryCluster(3) as cluster:
        bk = await cluster.client(config)
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        store = bk.cluster.store
        assert isinstance(store, MemoryNodeStore)
        store.suspend()
        with pytest.raises(
            ConnectionLossError,
            match=rf"^reading ledger {wh.ledger_id}'s metadata: the metadata store stayed "
            r"unreachable for 0\.2 s \(metadata_reconnect_timeout_ms\): ",
        ):
            await bounded(bk.ledger_metadata(wh.ledger_id))
        store.resume()
        assert (await bounded(bk.ledger_metadata(wh.ledger_id))).state is LedgerState.OPEN


@on_virtual_time
async def test_a_close_whose_seal_failed_seals_when_called_again() -> None:
    """A close whose seal failed (the store away past ``metadata_reconnect_timeout_ms``)
    marked the handle closed all the same, so a second close returned at once and the
    ledger stayed open for good: a named log's readers then waited at its end for ever,
    behind the ledgers the writer went on to. A second close now seals it."""
    config = dataclasses.replace(FAST, metadata_reconnect_timeout_ms=200)
    async with MemoryCluster(3) as cluster:
        bk = await cluster.client(config)
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        assert await bounded(wh.append(b"0")) == 0
        store = bk.cluster.store
        assert isinstance(store, MemoryNodeStore)
        store.suspend()
        with pytest.raises(ConnectionLossError, match="stayed unreachable"):
            await bounded(wh.close())
        store.resume()
        await bounded(wh.close())
        meta = await bounded(bk.ledger_metadata(wh.ledger_id))
        assert meta.state is LedgerState.CLOSED and meta.last_entry_id == 0
        await bounded(wh.close())  # sealed: a no-op


async def _ids(bk) -> list[int]:  # type: ignore[no-untyped-def]
    return [ledger_id async for ledger_id in bk.list_ledgers()]


@on_virtual_time
async def test_entering_a_started_client_touches_no_metadata() -> None:
    """``async with await start(...) as bk`` entered a started client by starting it again,
    which read the cluster's LAYOUT and INSTANCEID: during a ZooKeeper outage that failed
    with ``ConnectionLoss (at /ledgers/INSTANCEID)`` though the client was up (a verify
    campaign's client process exited so, seed 30261)."""
    async with MemoryCluster(3) as cluster:
        bk = await cluster.client(FAST)
        store = bk.cluster.store
        assert isinstance(store, MemoryNodeStore)
        store.suspend()
        try:
            entered = await bk.__aenter__()
            assert entered is bk
        finally:
            store.resume()
