"""A bookie on a full disk (the in-memory filesystem given a capacity): read-only at once,
reads served, recovery adds while there is room, EREADONLY (never EIO) when there is none,
registered under ``available/readonly`` and back to writable once space is freed; it starts
on a full disk too, with or without ``readonly``."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bkeeper.meta.cluster import ClusterMetadata
from bkeeper.meta.ledger_metadata import LedgerMetadata
from bkeeper.server import Bookie
from bkeeper.storage import DiskState, MemoryFileSystem
from bkeeper.wire.codes import Protocol, StatusCode
from bkeeper.wire.digest import DigestManager, DigestType, master_key
from bkeeper.wire.messages import AddRequest, ReadRequest

MIB = 1024 * 1024
KEY = master_key(b"pw")
STORAGE = {"disk_high_priority_free_bytes_min": 64 * 1024}


def body(ledger: int, entry: int) -> bytes:
    manager = DigestManager(ledger, DigestType.CRC32C, b"pw")
    return manager.encode_entry(entry, entry - 1, 1000 * (entry + 1), b"x" * 1000)


async def add(client, ledger: int, entry: int, *, recovery: bool = False) -> StatusCode:
    request = AddRequest(ledger, entry, KEY, body(ledger, entry), recovery=recovery)
    return (await client.request(request)).status


async def read(client, ledger: int, entry: int) -> bytes:
    response = await client.request(ReadRequest(ledger, entry))
    assert response.status is StatusCode.EOK, (ledger, entry, response.status)
    return bytes(response.body)


def fill(fs: MemoryFileSystem, fraction: float) -> None:
    """Grow ``/filler`` until ``fraction`` of the disk is in use."""
    total, free = fs.disk_usage("/")
    handle = fs.open_append("/filler")
    handle.write(b"\0" * (free - int(total * (1.0 - fraction))))
    handle.close()


@pytest.fixture
def uri() -> str:
    return f"memory://{uuid.uuid4().hex[:8]}/ledgers"


@pytest.fixture
async def cluster(uri: str) -> AsyncIterator[ClusterMetadata]:
    async with await ClusterMetadata.open(uri) as metadata:
        await metadata.format()
        yield metadata


async def with_metadata(cluster: ClusterMetadata, bookie: Bookie, ledger_id: int) -> None:
    """Give a ledger written here raw its metadata: without it, the bookie's garbage
    collector (which runs at once on a full disk) would rightly delete it."""
    meta = LedgerMetadata.new([bookie.bookie_id], 1, 1, DigestType.CRC32C, b"pw", ctime_ms=0)
    await cluster.ledgers.create(meta, ledger_id=ledger_id)


async def wait_registered(cluster: ClusterMetadata, bookie: Bookie, read_only: bool) -> None:
    async with asyncio.timeout(10), contextlib.aclosing(cluster.registry.watch()) as sets:
        async for bookies in sets:
            if bookie.bookie_id in (bookies.read_only if read_only else bookies.writable):
                return


async def test_full_disk_is_read_only_then_writable_again(start_bookie, connect, cluster, uri):
    fs = MemoryFileSystem(capacity_bytes=4 * MIB)
    bookie = await start_bookie(fs=fs, storage=STORAGE, metadata_uri=uri)
    await with_metadata(cluster, bookie, 1)
    client = await connect(bookie, Protocol.V2)
    await wait_registered(cluster, bookie, read_only=False)
    assert [await add(client, 1, e) for e in range(5)] == [StatusCode.EOK] * 5

    fill(fs, 0.97)  # over the threshold, with room left
    assert bookie.check_disk() is True
    await wait_registered(cluster, bookie, read_only=True)
    assert await add(client, 1, 5) is StatusCode.EREADONLY
    assert await add(client, 1, 5, recovery=True) is StatusCode.EOK  # room for recovery
    assert [await read(client, 1, e) for e in range(6)] == [body(1, e) for e in range(6)]

    fill(fs, 1.0)  # no room at all: recovery adds are refused too, never with EIO
    assert await add(client, 1, 6, recovery=True) is StatusCode.EREADONLY
    assert bookie.storage is not None and bookie.storage.disk_state is DiskState.NO_ROOM
    assert bookie.check_disk() is True
    assert await add(client, 1, 6, recovery=True) is StatusCode.EREADONLY
    assert [await read(client, 1, e) for e in range(6)] == [body(1, e) for e in range(6)]

    fs.remove("/filler")
    assert bookie.check_disk() is False
    await wait_registered(cluster, bookie, read_only=False)
    assert [await add(client, 1, e) for e in range(6, 10)] == [StatusCode.EOK] * 4
    assert [await read(client, 1, e) for e in range(10)] == [body(1, e) for e in range(10)]


@pytest.mark.parametrize("readonly", [False, True])
async def test_starts_read_only_on_a_full_disk(
    start_bookie, connect, cluster, uri, tmp_path: Path, readonly: bool
):
    fs = MemoryFileSystem(capacity_bytes=4 * MIB)
    data_dir = tmp_path / "full"
    bookie = await start_bookie(data_dir, fs=fs, storage=STORAGE, metadata_uri=uri)
    await with_metadata(cluster, bookie, 2)
    client = await connect(bookie, Protocol.V2)
    assert [await add(client, 2, e) for e in range(5)] == [StatusCode.EOK] * 5
    await client.aclose()
    await bookie.aclose()
    port = bookie.port
    fill(fs, 1.0)

    bookie = await start_bookie(
        data_dir, fs=fs, storage=STORAGE, metadata_uri=uri, readonly=readonly, port=port
    )
    assert bookie.state.readonly
    await wait_registered(cluster, bookie, read_only=True)
    client = await connect(bookie, Protocol.V2)
    assert [await read(client, 2, e) for e in range(5)] == [body(2, e) for e in range(5)]
    assert await add(client, 2, 5) is StatusCode.EREADONLY
    fs.remove("/filler")
    assert bookie.check_disk() is readonly  # --readonly keeps it read-only
    await wait_registered(cluster, bookie, read_only=readonly)
    expected = StatusCode.EREADONLY if readonly else StatusCode.EOK
    assert await add(client, 2, 5) is expected
