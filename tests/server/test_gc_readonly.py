"""Deleting ledgers frees a full bookie within seconds: while its disk is full the garbage
collector watches the metadata of the ledgers it holds and runs a pass as soon as one is
deleted (it waited for its next period, ``gc_wait_ms``: 60 s +-25%), and the disk is checked
right after the pass, so the bookie turns writable at once."""

from __future__ import annotations

import asyncio
import uuid

from bkeeper.meta.cluster import ClusterMetadata
from bkeeper.meta.layout import ledger_path
from bkeeper.meta.ledger_metadata import LedgerMetadata
from bkeeper.server.gc_wake import LedgerDeletionWatch, nodes_to_watch
from bkeeper.storage import DiskState, MemoryFileSystem
from bkeeper.wire.codes import Protocol, StatusCode
from bkeeper.wire.digest import DigestManager, DigestType
from bkeeper.wire.messages import AddRequest
from tests.server.test_full_disk import KEY, fill, wait_registered

MIB = 1024 * 1024
PAYLOAD_BYTES = 16 * 1024
LEDGERS = tuple(range(1, 11))
KEPT = LEDGERS[:2]
STORAGE = {
    "disk_high_priority_free_bytes_min": 64 * 1024,
    "entry_log_bytes_max": MIB,
    "journal_file_bytes_max": MIB,
    "journal_checkpoint_roll_bytes": 256 * 1024,
    "write_cache_bytes_max": MIB,
}


def body(ledger: int, entry: int) -> bytes:
    manager = DigestManager(ledger, DigestType.CRC32C, b"pw")
    payload = bytes([ledger]) * PAYLOAD_BYTES
    return manager.encode_entry(entry, entry - 1, PAYLOAD_BYTES * (entry + 1), payload)


def test_the_nodes_watched_are_those_holding_the_most_local_ledgers() -> None:
    ids = [*range(5), *range(10_000, 10_003), 20_000]
    nodes = nodes_to_watch("/ledgers", ids, limit=2)
    assert nodes == {
        "/ledgers/00/0000": {f"L000{i}" for i in range(5)},
        "/ledgers/00/0001": {"L0000", "L0001", "L0002"},
    }
    assert ledger_path("/ledgers", 10_002) == "/ledgers/00/0001/L0002"


async def test_the_watch_returns_when_a_ledger_is_deleted_or_is_missing_already() -> None:
    uri = f"memory://{uuid.uuid4().hex[:8]}/ledgers"
    async with await ClusterMetadata.open(uri) as cluster:
        await cluster.format()
        meta = LedgerMetadata.new(["b:1"], 1, 1, DigestType.CRC32C, b"pw", ctime_ms=0)
        for ledger_id in (1, 2, 3):
            await cluster.ledgers.create(meta, ledger_id=ledger_id)
        watch = LedgerDeletionWatch(cluster.store, cluster.root)
        waiting = asyncio.ensure_future(watch.wait_change([1, 2]))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        await cluster.ledgers.delete(2)
        async with asyncio.timeout(5):
            await waiting
        async with asyncio.timeout(5):  # ledger 2 missing already: at once
            await watch.wait_change([1, 2])


async def test_deleting_ledgers_makes_a_full_bookie_writable_within_seconds(
    start_bookie, connect, tmp_path
) -> None:
    uri = f"memory://{uuid.uuid4().hex[:8]}/ledgers"
    async with await ClusterMetadata.open(uri) as cluster:
        await cluster.format()
        fs = MemoryFileSystem(capacity_bytes=8 * MIB)
        bookie = await start_bookie(
            fs=fs,
            storage=STORAGE,
            metadata_uri=uri,
            checkpoint_interval_ms=200,
            disk_check_interval_ms=100,
        )  # gc_wait_ms stays 60 s
        meta = LedgerMetadata.new([bookie.bookie_id], 1, 1, DigestType.CRC32C, b"pw", ctime_ms=0)
        for ledger_id in LEDGERS:
            await cluster.ledgers.create(meta, ledger_id=ledger_id)
        client = await connect(bookie, Protocol.V2)
        await wait_registered(cluster, bookie, read_only=False)
        for ledger_id in LEDGERS:  # one after the other: four ledgers an entry log
            for entry in range(16):
                request = AddRequest(ledger_id, entry, KEY, body(ledger_id, entry))
                response = await client.request(request)
                assert response.status is StatusCode.EOK
        storage = bookie.storage
        collector = bookie.garbage_collector
        assert storage is not None and collector is not None
        await asyncio.to_thread(storage.checkpoint)

        # Full, with room left for compaction's copies; the pass run at once on a full disk
        # frees what it can (old journal files) and the disk is filled again, until that
        # pass leaves it full.
        for _attempt in range(10):
            passes = collector.passes
            fill(fs, 0.96)
            assert bookie.check_disk() is True
            async with asyncio.timeout(10):
                while collector.passes == passes or collector.running:
                    await asyncio.sleep(0.01)
            await asyncio.sleep(0.5)  # checkpoints remove the journal's old files too
            if bookie.check_disk():
                break
        assert storage.disk_state is not DiskState.WRITABLE
        await wait_registered(cluster, bookie, read_only=True)

        for ledger_id in LEDGERS:
            if ledger_id not in KEPT:
                await cluster.ledgers.delete(ledger_id)
        async with asyncio.timeout(10):  # before: the next pass came after 45 to 75 s
            await wait_registered(cluster, bookie, read_only=False)
        assert storage.disk_state is DiskState.WRITABLE
        assert sorted(storage.ledger_ids()) == list(KEPT)
