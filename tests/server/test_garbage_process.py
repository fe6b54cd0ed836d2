"""A ``bkeeper bookie`` process with real ZooKeeper forgets exactly the ledgers deleted.

A client creates ledgers on the bookie and deletes some while GC passes run every 200 ms; the
bookie then answers "no such ledger" for each deleted one and still serves every entry of
the others, and its log says how many ledgers its passes deleted.
"""

from __future__ import annotations

import asyncio
import re

import pytest

from bkeeper.client import BookKeeper
from bkeeper.client.bookie_client import BookieClient
from bkeeper.wire.codes import Protocol, StatusCode
from bkeeper.wire.messages import ReadRequest
from tests.client.conftest import RealCluster, real_cluster

__all__ = ["real_cluster"]


ENTRIES = 30
DELETED_LINE = re.compile(rb"garbage collection: (\d+) ledgers deleted")


def payload(ledger_id: int, entry: int) -> bytes:
    return b"ledger %d entry %d " % (ledger_id, entry) + bytes([entry % 251]) * 300


@pytest.mark.parametrize("real_cluster", [(1, ("-o", "gc_wait_ms=200"))], indirect=True)
async def test_the_bookie_forgets_exactly_the_deleted_ledgers(real_cluster: RealCluster) -> None:
    async with BookKeeper(real_cluster.uri) as bk:
        ledgers = []
        for _ in range(6):
            handle = await bk.create_ledger(1, 1, 1, password=b"pw")
            for entry in range(ENTRIES):
                await handle.append(payload(handle.ledger_id, entry))
            await handle.close()
            ledgers.append(handle.ledger_id)
        deleted, kept = ledgers[::2], ledgers[1::2]
        for ledger_id in deleted:
            await bk.delete_ledger(ledger_id)

        client = await BookieClient.connect("127.0.0.1", real_cluster.ports[0], Protocol.V3)
        try:
            async with asyncio.timeout(60):
                while True:  # a pass every 200 ms: soon, each deleted ledger is forgotten
                    responses = [await client.request(ReadRequest(i, 0)) for i in deleted]
                    if all(r.status is StatusCode.ENOLEDGER for r in responses):
                        break
                    assert {r.status for r in responses} <= {StatusCode.EOK, StatusCode.ENOLEDGER}
                    await asyncio.sleep(0.05)
            for ledger_id in kept:
                for entry in range(ENTRIES):
                    response = await client.request(ReadRequest(ledger_id, entry))
                    assert response.status is StatusCode.EOK, (ledger_id, entry)
                    assert bytes(response.body).endswith(payload(ledger_id, entry))
        finally:
            await client.aclose()
        for ledger_id in kept:
            handle = await bk.open_ledger(ledger_id, b"pw")
            assert [e.data async for e in handle.read()] == [
                payload(ledger_id, entry) for entry in range(ENTRIES)
            ]
    log = (real_cluster.data_dir / "bookie-0.log").read_bytes()
    assert sum(int(count) for count in DELETED_LINE.findall(log)) == len(deleted)
