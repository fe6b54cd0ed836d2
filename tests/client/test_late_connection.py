"""A bookie whose connection takes longer to set up (a TLS handshake and an AUTH exchange on a
busy machine) than ``pending_adds_max`` entries take to write is not replaced for it: with
Qa < Qw the others keep the pipeline moving, its entries wait (up to the bytes its socket
buffer could hold) and are all sent once it is up. Past that bound it is replaced."""

from __future__ import annotations

import asyncio

from bkeeper.client.config import ClientConfig
from bkeeper.testing.cluster import MemoryCluster
from bkeeper.testing.virtual_time import on_virtual_time

CONFIG = dict(add_timeout_ms=5_000, pending_adds_max=10)


@on_virtual_time
async def test_slow_connection_keeps_its_bookie_and_gets_every_entry() -> None:
    async with MemoryCluster(4) as cluster:
        bk = await cluster.client(ClientConfig(**CONFIG))  # type: ignore[arg-type]
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        ensemble = wh.ensemble
        late = cluster.bookie(ensemble[2])
        late.connect_delay_s = 0.3
        # 10 x pending_adds_max entries written on the two others' acks while it connects
        ids = [await wh.append(b"e%d" % i) for i in range(100)]
        assert ids == list(range(100))
        for _ in range(500):
            if late.requests >= 100:
                break
            await asyncio.sleep(0.01)
        await wh.close()
        meta = await bk.ledger_metadata(wh.ledger_id)
        assert list(meta.segments.values()) == [ensemble]  # no ensemble change
        assert late.storage is not None
        for i in range(100):
            assert bytes(late.storage.read_entry(wh.ledger_id, i)).endswith(b"e%d" % i)


@on_virtual_time
async def test_past_its_socket_allowance_a_connecting_bookie_is_replaced() -> None:
    async with MemoryCluster(4) as cluster:
        config = ClientConfig(connection_write_buffer_bytes_max=2_000, **CONFIG)  # type: ignore[arg-type]
        bk = await cluster.client(config)
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        late_id = wh.ensemble[2]
        cluster.bookie(late_id).connect_delay_s = 2.0
        for i in range(100):
            await wh.append(b"%0100d" % i)  # ~140 bytes a frame: the bound at ~14 entries
        await wh.close()
        meta = await bk.ledger_metadata(wh.ledger_id)
        assert len(meta.segments) == 2
        assert late_id not in list(meta.segments.values())[-1]


@on_virtual_time
async def test_a_burst_while_every_bookie_connects_waits_for_them_instead_of_failing_them() -> None:
    # A new client's first appends: no bookie is up, so nothing can be acknowledged without
    # them; appends past the bytes a connecting bookie may hold wait for the connects (a
    # large record's chunks go out as one append_many of megabytes).
    async with MemoryCluster(4) as cluster:
        config = ClientConfig(connection_write_buffer_bytes_max=2_000, **CONFIG)  # type: ignore[arg-type]
        bk = await cluster.client(config)
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        ensemble = wh.ensemble
        for bookie in ensemble:
            cluster.bookie(bookie).connect_delay_s = 0.3
        first = await wh.append_async(b"first")  # staged: sent with the burst below
        burst = await wh.append_many_async([b"%01000d" % i for i in range(5)])  # 5 KB at once
        futures = [await wh.append_async(b"%0100d" % i) for i in range(30)]
        assert (await first, await burst) == (0, 5)
        assert [await f for f in futures] == list(range(6, 36))
        await wh.close()
        meta = await bk.ledger_metadata(wh.ledger_id)
        assert list(meta.segments.values()) == [ensemble]  # no bookie counted as failed
