"""``store_password_in_metadata=False``: the metadata holds no password (absent from the
serialized form, not empty), readers and writers still work with the password, a wrong one is
still refused by the bookies, and auto-recovery says why it cannot re-replicate the ledger."""

from __future__ import annotations

import pytest

from bkeeper.autorecovery.config import AutoRecoveryConfig
from bkeeper.autorecovery.worker import replicate_ledger
from bkeeper.client.config import ClientConfig
from bkeeper.common.errors import UnauthorizedAccessError
from bkeeper.meta.metadata_format import decode_ledger_metadata, encode_ledger_metadata, to_proto
from bkeeper.testing.cluster import MemoryCluster


async def test_ledger_created_without_password_in_metadata() -> None:
    async with MemoryCluster(3) as cluster:
        bk = await cluster.client(ClientConfig(store_password_in_metadata=False))
        handle = await bk.create_ledger(3, 2, 2, password=b"secret")
        for i in range(5):
            await handle.append(b"e%d" % i)
        meta = await bk.ledger_metadata(handle.ledger_id)
        assert (meta.has_password, meta.password) == (False, b"")
        assert not to_proto(meta).HasField("password")
        assert b"secret" not in encode_ledger_metadata(meta)
        assert decode_ledger_metadata(encode_ledger_metadata(meta)).has_password is False
        # No password in the metadata to compare with: the bookies refuse the wrong key as
        # soon as it is used (the recovery's fencing reads carry it), and fence nothing.
        reader = await cluster.client()
        other = await bk.create_ledger(3, 2, 2, password=b"secret")
        await other.append(b"x")
        with pytest.raises(UnauthorizedAccessError):
            await reader.open_ledger(other.ledger_id, b"wrong", recovery=True)
        await handle.append(b"e5")
        await handle.close()  # metadata changes keep it absent
        closed = await bk.ledger_metadata(handle.ledger_id)
        assert (closed.has_password, closed.is_closed) == (False, True)

        opened = await reader.open_ledger(handle.ledger_id, b"secret")
        assert [e.data async for e in opened.read(0, 5)] == [b"e%d" % i for i in range(6)]

        await cluster.stop_bookie(cluster.bookie(closed.segments[0][0]))
        outcome = await replicate_ledger(bk, handle.ledger_id, None, AutoRecoveryConfig())
        assert not outcome.done
        assert outcome.reason == (
            f"ledger {handle.ledger_id}: no password in its metadata (created with "
            "store_password_in_metadata off): cannot re-replicate it"
        )


async def test_default_still_stores_the_password() -> None:
    async with MemoryCluster(1) as cluster:
        bk = await cluster.client()
        handle = await bk.create_ledger(1, 1, 1, password=b"")
        meta = await bk.ledger_metadata(handle.ledger_id)
        assert meta.has_password and to_proto(meta).HasField("password")
        with pytest.raises(UnauthorizedAccessError, match="wrong password"):
            await bk.open_ledger(handle.ledger_id, b"other", recovery=False)
