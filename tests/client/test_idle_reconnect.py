"""A writer whose idle connections the bookies close reconnects on its next add, with no
ensemble change (real bookie processes with a short idle timeout, shared by the module: the
test kills nothing; 4 of them, E3 with a spare)."""

from __future__ import annotations

import asyncio
import time

import pytest

from bkeeper.client import BookKeeper, ClientConfig
from bkeeper.wire.codes import Protocol

IDLE_MS = 300


@pytest.mark.parametrize(
    "shared_cluster", [(4, ("--connection-idle-timeout-ms", str(IDLE_MS)))], indirect=True
)
@pytest.mark.parametrize("protocol", [Protocol.V2, Protocol.V3])
async def test_writer_reconnects_after_idle_close_without_ensemble_change(
    shared_cluster, protocol: Protocol
) -> None:
    async with BookKeeper(shared_cluster.uri, ClientConfig(protocol=protocol)) as client:
        wh = await client.create_ledger(3, 3, 2, password=b"pw")
        ensemble = wh.ensemble
        for i in range(10):
            await wh.append(b"before %d" % i)
        pool = client._context().pool  # observed only: has every bookie closed its connection?
        deadline = time.monotonic() + 30
        while any(pool.connection_nowait(b) is not None for b in ensemble):
            assert time.monotonic() < deadline, "the bookies closed the idle connections"
            await asyncio.sleep(0.02)
        for i in range(10):
            await wh.append(b"after %d" % i)
        assert wh.ensemble == ensemble
        await wh.close()
        metadata = await client.ledger_metadata(wh.ledger_id)
        assert dict(metadata.segments) == {0: ensemble}
        rh = await client.open_ledger(wh.ledger_id, b"pw")
        entries = [entry.data async for entry in rh.read()]
    assert entries == [b"before %d" % i for i in range(10)] + [b"after %d" % i for i in range(10)]
