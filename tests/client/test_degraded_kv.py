"""The key-value store keeps taking writes with one of its three bookies lost and no spare
(docs/client.md, "No spare: degraded writes"). Before, the leader's log writer failed at the
loss, and the member taking over could not create a ledger ("could not take over the log:
need 3 bookies, 2 available"): the store stopped taking writes."""

from __future__ import annotations

import asyncio

from bkeeper.kv import KvClient
from bkeeper.namedlog import LogConfig
from bkeeper.testing.cluster import MemoryCluster
from tests.kv.test_kv_memory import Members, wait_for


async def test_the_kv_store_takes_writes_with_a_bookie_lost_and_no_spare() -> None:
    async with MemoryCluster(3) as cluster:
        members = Members(cluster, LogConfig(tail_poll_ms=50, roll_bytes=2_000))
        try:
            for _ in range(2):
                await members.start()
            await wait_for(lambda: members.leader() is not None)
            async with KvClient(members.urls) as kv:
                for i in range(20):
                    await kv.put(f"k{i}", f"before-{i}")
                await cluster.stop_bookie(cluster.bookies[1])
                for i in range(200):  # past roll_bytes: rolls put off, writes go on
                    assert await asyncio.wait_for(kv.put(f"k{i % 50}", f"after-{i}"), 30) > 0
                for i in range(150, 200):
                    assert (await kv.get(f"k{i % 50}")).value == f"after-{i}"
        finally:
            await members.stop_all()
