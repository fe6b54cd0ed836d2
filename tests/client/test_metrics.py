"""Client metrics on request: counted per batch, exposed as text and over HTTP."""

from __future__ import annotations

import asyncio
import urllib.request

import pytest

from bkeeper.client import ClientConfig
from bkeeper.common.errors import ConfigError
from bkeeper.testing.cluster import MemoryCluster
from tests.client.test_batch_reads import FAST, batches_of, bounded, payload, write
from tests.common.test_metrics import samples

ON = ClientConfig(
    add_timeout_ms=FAST.add_timeout_ms,
    read_timeout_ms=FAST.read_timeout_ms,
    batch_read_entries_max=10,
    metrics=True,
)


def op(name: str, op_name: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return (name, (("op", op_name),))


async def test_adds_and_batch_reads_are_counted():
    async with MemoryCluster(3) as cluster:
        bk = await cluster.client(ON)
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        await write(wh, 100)
        await bounded(wh.close())
        reader = await bk.open_ledger(wh.ledger_id, password=b"pw")
        batches = await batches_of(reader)
        assert [e.data for b in batches for e in b] == [payload(i) for i in range(100)]
        got = samples(bk.metrics_text())
        assert got[op("bkeeper_client_requests_total", "add")] == 100
        assert got[op("bkeeper_client_request_errors_total", "add")] == 0
        assert got[op("bkeeper_client_request_latency_seconds_count", "add")] == 100
        assert got[op("bkeeper_client_requests_total", "batch_read")] == 10
        assert got[op("bkeeper_client_request_latency_seconds_count", "batch_read")] == 10
        assert got[("bkeeper_client_read_entries_total", ())] == 100


async def test_metrics_server_serves_the_text():
    async with MemoryCluster(3) as cluster:
        bk = await cluster.client(ON)
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        await write(wh, 7)
        port = bk.start_metrics_server(0)

        def fetch() -> tuple[str, bytes]:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                return r.headers["Content-Type"], r.read()

        content_type, text = await asyncio.to_thread(fetch)
        assert content_type.startswith("text/plain; version=0.0.4")
        assert samples(text)[op("bkeeper_client_requests_total", "add")] == 7
        await bk.close()
        with pytest.raises(OSError):
            await asyncio.to_thread(fetch)  # closed with the client


async def test_metrics_off_by_default():
    async with MemoryCluster(1) as cluster:
        bk = await cluster.client(FAST)
        assert bk.metrics is None
        with pytest.raises(ConfigError, match="metrics"):
            bk.metrics_text()
