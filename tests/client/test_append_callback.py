"""``WriteHandle.append_callback``: appends with a callback instead of a future (BookKeeper's
``asyncAddEntry`` with an ``AddCallback``), on the in-memory cluster."""

from __future__ import annotations

import asyncio
import logging

import pytest

from bkeeper.client.config import ClientConfig
from bkeeper.common.errors import LedgerFencedError, NotEnoughBookiesError
from bkeeper.testing.cluster import MemoryCluster
from bkeeper.testing.virtual_time import on_virtual_time
from bkeeper.wire.codes import StatusCode
from bkeeper.wire.messages import AddRequest

FAST = ClientConfig(add_timeout_ms=300, read_timeout_ms=300, speculative_read_timeout_ms=50)


@on_virtual_time
async def test_callbacks_come_in_entry_order_and_close_waits_for_them() -> None:
    async with MemoryCluster(3) as cluster:
        bk = await cluster.client()
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        called: list[tuple[int, BaseException | None]] = []
        ids = [
            await wh.append_callback(b"e%d" % i, lambda e, err: called.append((e, err)))
            for i in range(200)
        ]
        assert ids == list(range(200))
        await wh.close()  # returns once every callback was called
        assert called == [(i, None) for i in range(200)]
        assert wh.last_add_confirmed == 199
        rh = await bk.open_ledger(wh.ledger_id, b"pw")
        assert [e.data async for e in rh.read()] == [b"e%d" % i for i in range(200)]


@on_virtual_time
async def test_futures_and_callbacks_mix_in_one_ledger() -> None:
    async with MemoryCluster(3) as cluster:
        bk = await cluster.client()
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        called: list[int] = []
        futures = []
        for i in range(50):
            if i % 2:
                futures.append(await wh.append_async(b"%d" % i))
            else:
                await wh.append_callback(b"%d" % i, lambda e, err: called.append(e))
        assert await asyncio.gather(*futures) == list(range(1, 50, 2))
        await wh.close()
        assert called == list(range(0, 50, 2))


@on_virtual_time
async def test_a_callback_that_raises_is_logged_and_the_others_go_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with MemoryCluster(3) as cluster:
        bk = await cluster.client()
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        called: list[int] = []

        def callback(entry_id: int, error: BaseException | None) -> None:
            called.append(entry_id)
            if entry_id == 3:
                raise RuntimeError("the application's bug")

        with caplog.at_level(logging.ERROR, logger="bkeeper.client.write_handle"):
            for i in range(10):
                await wh.append_callback(b"%d" % i, callback)
            await wh.close()
        assert called == list(range(10))
        assert "the callback of entry 3 raised" in caplog.text
        assert wh.last_add_confirmed == 9


@on_virtual_time
async def test_failed_entries_call_back_with_the_error() -> None:
    """Every bookie refuses the adds and no bookie can replace them: each pending entry's
    callback gets the pipeline's error (none is left uncalled, and close ends)."""
    async with MemoryCluster(3) as cluster:
        bk = await cluster.client(FAST)
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        await wh.append(b"first")
        for index in range(3):
            cluster.fault(index, AddRequest, error=StatusCode.EIO)
        outcomes: list[tuple[int, BaseException | None]] = []
        for i in range(5):
            await wh.append_callback(b"%d" % i, lambda e, err: outcomes.append((e, err)))
        await wh.close()  # seals at entry 0, once every callback was called
        assert [e for e, _ in outcomes] == [1, 2, 3, 4, 5]
        assert all(isinstance(err, NotEnoughBookiesError) for _, err in outcomes), outcomes


@on_virtual_time
async def test_a_fenced_writer_calls_back_with_the_fence() -> None:
    async with MemoryCluster(3) as cluster:
        writer = await cluster.client()
        wh = await writer.create_ledger(3, 3, 2, password=b"pw")
        await wh.append(b"0")
        reader = await cluster.client()
        await reader.open_ledger(wh.ledger_id, b"pw")  # recovery: fences the writer
        outcomes: list[BaseException | None] = []
        await wh.append_callback(b"late", lambda e, err: outcomes.append(err))
        with pytest.raises(LedgerFencedError):
            await wh.close()
        assert len(outcomes) == 1 and isinstance(outcomes[0], LedgerFencedError)
