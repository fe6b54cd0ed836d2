"""Both wire protocols and every digest through real sockets (issue 20, item 5).

The in-memory cluster hands message objects over, so only TCP proves that the client's v3
frames (adds, reads, fencing, FORCE_LEDGER, WRITE_LAC/READ_LAC, long polls) and its v2 frames
meet the bookie's codecs with each digest. One writer, a tailing reader and a recovering
reader per combination, on three bookie processes shared by the module.
"""

from __future__ import annotations

import asyncio

import pytest

from bkeeper.client import BookKeeper, ClientConfig
from bkeeper.common.errors import LedgerFencedError, NoSuchEntryError, UnauthorizedAccessError
from bkeeper.meta.ledger_metadata import LedgerState
from bkeeper.wire.codes import Protocol
from bkeeper.wire.digest import DigestType

DIGESTS = ["crc32", "crc32c", "hmac", "dummy"]


def payload(i: int) -> bytes:
    return b"entry-%04d-" % i + bytes([i % 251]) * (i * 37 % 500)


async def _until(condition, what: str, timeout_s: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(timeout_s):
        while not await condition():
            await asyncio.sleep(0.02)


@pytest.mark.parametrize("digest", DIGESTS)
@pytest.mark.parametrize("protocol", [Protocol.V2, Protocol.V3], ids=["v2", "v3"])
async def test_write_tail_fence_recover(shared_cluster, protocol: Protocol, digest: str) -> None:
    config = ClientConfig(protocol=protocol, explicit_lac_interval_ms=20)
    uri = shared_cluster.uri
    async with BookKeeper(uri, config) as writer, BookKeeper(uri, config) as reader:
        wh = await writer.create_ledger(3, 3, 2, digest=digest, password=b"pw")
        assert wh.metadata.digest_type == DigestType.parse(digest)
        assert [await wh.append(payload(i)) for i in range(10)] == list(range(10))
        futures = [await wh.append_async(payload(i)) for i in range(10, 30)]
        assert await asyncio.gather(*futures) == list(range(10, 30))
        assert await wh.force() == 29

        tail = await reader.open_ledger(wh.ledger_id, b"pw", recovery=False)
        # Entry 29 was sent with its predecessors in flight: its piggybacked LAC is lower.
        assert await tail.read_last_add_confirmed() < 29

        async def explicit_lac_is_29() -> bool:
            return await tail.read_explicit_last_add_confirmed() == 29

        await _until(explicit_lac_is_29, "the writer's explicit LAC")
        assert tail.last_add_confirmed == 29
        assert [e.data async for e in tail.read()] == [payload(i) for i in range(30)]
        assert await tail.wait_last_add_confirmed(29, timeout_ms=100) == 29  # times out
        polled = asyncio.ensure_future(tail.wait_last_add_confirmed(29, timeout_ms=30_000))
        assert await wh.append(payload(30)) == 30
        assert await asyncio.wait_for(polled, 60) == 30
        assert await wh.append(payload(31)) == 31
        with pytest.raises(NoSuchEntryError, match="beyond the LAC 30"):
            [e async for e in tail.read(31, 31)]
        assert [e.data async for e in tail.read_unconfirmed(31, 31)] == [payload(31)]

        with pytest.raises(UnauthorizedAccessError):
            await reader.open_ledger(wh.ledger_id, b"not the password")
        recovered = await reader.open_ledger(wh.ledger_id, b"pw")
        assert recovered.metadata.state is LedgerState.CLOSED
        assert recovered.metadata.last_entry_id == 31
        assert recovered.length == sum(len(payload(i)) for i in range(32))
        with pytest.raises(LedgerFencedError):
            await wh.append(b"after the recovery")
        assert [e.data async for e in recovered.read()] == [payload(i) for i in range(32)]
        assert (await recovered.read_entry(17)).data == payload(17)


@pytest.mark.parametrize("digest", ["crc32c", "hmac"])
@pytest.mark.parametrize("protocol", [Protocol.V2, Protocol.V3], ids=["v2", "v3"])
async def test_append_many_and_staged_appends(
    shared_cluster, protocol: Protocol, digest: str
) -> None:
    """Batches (``append_many``) and single appends made in one loop iteration (sent together)
    through real sockets: v2 answers come back as runs (``bkeeper.wire.runs``)."""
    config = ClientConfig(protocol=protocol, pending_adds_max=600)
    async with BookKeeper(shared_cluster.uri, config) as bk:
        wh = await bk.create_ledger(3, 3, 2, digest=digest, password=b"pw")
        assert await wh.append_many([payload(i) for i in range(500)]) == range(500)
        singles = [await wh.append_async(payload(i)) for i in range(500, 550)]
        batch = await wh.append_many_async([payload(i) for i in range(550, 1000)])
        more = await wh.append_async(payload(1000))
        assert await asyncio.gather(*singles) == list(range(500, 550))
        assert await batch == 999 and await more == 1000
        assert wh.last_add_confirmed == 1000
        assert wh.length == sum(len(payload(i)) for i in range(1001))
        await wh.close()
        rh = await bk.open_ledger(wh.ledger_id, b"pw")
        assert rh.metadata.last_entry_id == 1000
        entries = [e async for e in rh.read()]
        assert [e.data for e in entries] == [payload(i) for i in range(1001)]
        assert entries[-1].length == wh.length
