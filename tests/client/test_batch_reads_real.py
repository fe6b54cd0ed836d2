"""Batch reads against real bookie processes over TCP: the asyncio and blocking clients, and
a bookie stopped (SIGSTOP) during the read."""

from __future__ import annotations

import asyncio
import signal

import pytest

from bkeeper.client import BookKeeper, ClientConfig
from bkeeper.client import sync as bk_sync

#: The library's timeouts (issue 41): reads go round the stopped bookie however long it takes.
CONFIG = ClientConfig(batch_read_entries_max=256)


def payload(i: int) -> bytes:
    return b"record-%06d-" % i + bytes([i % 251]) * 88


@pytest.mark.parametrize("real_cluster", [4], indirect=True)
async def test_batch_reads_over_tcp_with_a_stopped_bookie(real_cluster) -> None:
    """Its own cluster: it stops a bookie. Four: E3 with a spare (issue 41)."""
    count = 5_000
    async with BookKeeper(real_cluster.uri, CONFIG) as bk:
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        futures = [await wh.append_async(payload(i)) for i in range(count)]
        await asyncio.wait_for(asyncio.gather(*futures), 60)
        await wh.close()
        rh = await bk.open_ledger(wh.ledger_id, b"pw")
        batches = [batch async for batch in rh.read_batches(0)]
        assert all(0 < len(batch) <= 256 for batch in batches)
        assert len(batches) < count // 100  # batches, not entries one by one
        entries = [e for batch in batches for e in batch]
        assert [e.entry_id for e in entries] == list(range(count))
        assert [e.data for e in entries] == [payload(i) for i in range(count)]

        stopped = real_cluster.index_of(rh.metadata.last_ensemble[0])
        real_cluster.signal(stopped, signal.SIGSTOP)
        try:
            async with BookKeeper(real_cluster.uri, CONFIG) as reader:
                rh2 = await reader.open_ledger(wh.ledger_id, b"pw", recovery=False)
                data = await asyncio.wait_for(_read_all(rh2), 30)
                assert data == [payload(i) for i in range(count)]
        finally:
            real_cluster.signal(stopped, signal.SIGCONT)

    def read_blocking() -> tuple[list[int], list[bytes]]:
        with bk_sync.BookKeeper(real_cluster.uri, CONFIG) as client:
            handle = client.open_ledger(wh.ledger_id, b"pw")
            sizes = [len(batch) for batch in handle.read_batches(100, 999)]
            return sizes, [e.data for e in handle.read()]

    sizes, data = await asyncio.to_thread(read_blocking)
    assert sum(sizes) == 900 and max(sizes) <= 256
    assert data == [payload(i) for i in range(count)]


async def _read_all(handle) -> list[bytes]:
    return [e.data async for e in handle.read()]
