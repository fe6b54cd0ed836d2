"""Reading one bookie's copy of a ledger (``read_replica``, ``readledger --bookie``) and
creating a ledger on chosen bookies (``create_ledger(bookies=...)``, ``bookiesanity``), on
the in-memory cluster (real handlers and storage, no TCP)."""

from __future__ import annotations

import dataclasses

import pytest

from bkeeper.client.replica import entries_on, read_replica
from bkeeper.common.errors import ConfigError, DigestMismatchError, NoSuchEntryError
from bkeeper.meta.ledger_metadata import LedgerMetadata
from bkeeper.testing.cluster import MemoryCluster
from bkeeper.testing.virtual_time import on_virtual_time
from bkeeper.wire.codes import StatusCode
from bkeeper.wire.digest import DigestType
from bkeeper.wire.messages import ReadRequest


def test_entries_on_follows_each_segment_write_sets() -> None:
    meta = LedgerMetadata.new(("a", "b", "c"), 2, 2, DigestType.CRC32C, b"")
    assert entries_on(meta, "a", 0, 8) == [0, 2, 3, 5, 6, 8]  # (e % 3) in {0, 2}
    assert entries_on(meta, "b", 0, 8) == [0, 1, 3, 4, 6, 7]
    assert entries_on(meta, "d", 0, 8) == []
    assert entries_on(meta, "c", 4, 5) == [4, 5]
    # From entry 6 on, d replaces a: a holds nothing past 5, d nothing before 6.
    changed = dataclasses.replace(meta, segments={0: ("a", "b", "c"), 6: ("d", "b", "c")})
    assert entries_on(changed, "a", 0, 8) == [0, 2, 3, 5]
    assert entries_on(changed, "d", 0, 8) == [6, 8]


@on_virtual_time
async def test_create_ledger_on_chosen_bookies_and_read_one_replica() -> None:
    async with MemoryCluster(4) as cluster:
        bk = await cluster.client()
        chosen = ["bookie-3:3181", "bookie-1:3181", "bookie-0:3181"]
        handle = await bk.create_ledger(3, 2, 2, password=b"pw", bookies=chosen)
        assert handle.ensemble == tuple(chosen)
        for i in range(12):
            await handle.append(b"e%d" % i)
        await handle.close()
        meta = await bk.ledger_metadata(handle.ledger_id)
        wanted = entries_on(meta, "bookie-1:3181", 0, 11)
        assert wanted == [0, 1, 3, 4, 6, 7, 9, 10]
        got = [
            r
            async for r in read_replica(
                bk.pool,
                meta,
                handle.ledger_id,
                b"pw",
                "bookie-1:3181",
                wanted,
                timeout_s=5,
                window=3,
            )
        ]
        assert [(r.entry_id, r.entry.data if r.entry else None, r.error) for r in got] == [
            (e, b"e%d" % e, None) for e in wanted
        ]

        # A bookie that answers with damaged bodies, and one that lost the entries.
        cluster.fault(1, ReadRequest, corrupt=True)
        damaged = [
            r
            async for r in read_replica(
                bk.pool, meta, handle.ledger_id, b"pw", "bookie-1:3181", wanted[:2], timeout_s=5
            )
        ]
        assert [type(r.error) for r in damaged] == [DigestMismatchError] * 2
        cluster.heal(1)
        cluster.fault(0, ReadRequest, error=StatusCode.ENOENTRY)
        lost = [
            r
            async for r in read_replica(
                bk.pool, meta, handle.ledger_id, b"pw", "bookie-0:3181", [0, 2], timeout_s=5
            )
        ]
        assert [(r.entry, type(r.error)) for r in lost] == [(None, NoSuchEntryError)] * 2


@on_virtual_time
async def test_create_ledger_refuses_bookies_that_are_not_the_ensemble() -> None:
    async with MemoryCluster(3) as cluster:
        bk = await cluster.client()
        with pytest.raises(ConfigError, match=r"bookies: \['bookie-0:3181'\] is not 2 different"):
            await bk.create_ledger(2, 2, 2, bookies=["bookie-0:3181"])
        with pytest.raises(ConfigError, match="is not 2 different bookies"):
            await bk.create_ledger(2, 2, 2, bookies=["bookie-0:3181", "bookie-0:3181"])
