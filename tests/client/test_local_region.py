"""Region-aware reads: a client with ``local_region`` asks the replicas of its region first
(in-memory cluster; every request counted per bookie)."""

from __future__ import annotations

import pytest

from bkeeper.client.config import ClientConfig
from bkeeper.common.errors import ConfigError
from bkeeper.testing.cluster import MemoryCluster
from bkeeper.testing.virtual_time import on_virtual_time

REGIONS = ("/east/r1", "/west/r1", "/north/r1")


@pytest.mark.parametrize("batched", [True, False])
@on_virtual_time
async def test_reads_go_to_the_local_region_first(batched: bool) -> None:
    async with MemoryCluster(3) as cluster:
        assert cluster.metadata is not None
        for bookie, location in zip(cluster.bookies, REGIONS, strict=True):
            await cluster.metadata.racks.set(bookie.bookie_id, location)
        writer = await (await cluster.client()).create_ledger(3, 3, 2, password=b"p")
        for entry_id in range(30):
            await writer.append(b"e%d" % entry_id)
        await writer.close()
        counts = [cluster.fault(i) for i in range(3)]  # serves as usual, counts
        reader_bk = await cluster.client(
            ClientConfig(local_region="/west", placement="regionaware")
        )
        handle = await reader_bk.open_ledger(writer.ledger_id, b"p", recovery=False)
        if batched:
            got = [bytes(e.payload) async for e in handle.read(0, 29)]
        else:
            await reader_bk._context().refresh_local()
            got = [bytes((await handle.read_entry(e)).payload) for e in range(30)]
        assert got == [b"e%d" % e for e in range(30)]
        west = counts[1].applied
        assert west > 0 and counts[0].applied + counts[2].applied == 0, [c.applied for c in counts]


def test_local_region_is_a_region() -> None:
    with pytest.raises(ConfigError, match="local_region: '/west/r1' is a region"):
        ClientConfig(local_region="/west/r1")
    with pytest.raises(ConfigError, match="expected /rack or /region/rack"):
        ClientConfig(local_region="west")
