"""Socket back-pressure reaches writers: ``append_async`` waits while a bookie connection's
write buffer is full (over TCP, to a "bookie" that stops reading)."""

from __future__ import annotations

import asyncio
import contextlib

from bkeeper.client.bookkeeper import BookKeeper
from bkeeper.client.config import ClientConfig
from bkeeper.client.pool import TcpTransport
from bkeeper.meta.cluster import ClusterMetadata
from bkeeper.testing.cluster import MemoryCluster

LIMIT_S = 10.0
ENTRY = b"x" * 65_536


async def test_append_waits_while_the_socket_buffer_is_full() -> None:
    accepted: list[asyncio.StreamReader] = []

    async def stop_reading(reader: asyncio.StreamReader, _: asyncio.StreamWriter) -> None:
        accepted.append(reader)  # a bookie that reads nothing, until told to

    server = await asyncio.start_server(stop_reading, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]

    async def resolve(_: str) -> tuple[str, int]:
        return "127.0.0.1", port

    async with server, MemoryCluster(1) as cluster:  # its metadata, and a bookie id
        config = ClientConfig(add_timeout_ms=600_000, pending_adds_max=100_000)
        metadata = await ClusterMetadata.open(cluster.uri)
        bk = BookKeeper(config=config, cluster=metadata, transport=TcpTransport(resolve, 5.0))
        bk._owns_cluster = True
        await bk.start()
        futures: list[asyncio.Future[int]] = []
        reading: asyncio.Task[None] | None = None
        try:
            wh = await bk.create_ledger(1, 1, 1, password=b"pw")
            futures.append(await wh.append_async(ENTRY))
            conn = await bk._ctx.pool.connection(wh.ensemble[0])  # type: ignore[union-attr]
            while conn.writable:  # fill the kernel's buffers, then the transport's
                futures.append(await asyncio.wait_for(wh.append_async(ENTRY), LIMIT_S))
                await asyncio.sleep(0)  # the frames leave at the end of the iteration
            waiting = asyncio.ensure_future(wh.append_async(ENTRY))
            for _ in range(50):
                await asyncio.sleep(0)
            assert not waiting.done(), "append_async waits while the socket buffer is full"

            async def drain() -> None:
                while True:
                    await asyncio.gather(*(reader.read(1 << 20) for reader in accepted))

            reading = asyncio.ensure_future(drain())  # the bookie reads again
            futures.append(await asyncio.wait_for(waiting, LIMIT_S))
            assert wh.last_add_pushed == len(futures) - 1
        finally:
            if reading is not None:
                reading.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reading
            await bk.close()
            await asyncio.gather(*futures, return_exceptions=True)
