"""The bookie's garbage collector over real storage engines and ``memory://`` metadata.

run_now forgets exactly the deleted ledgers and frees their entry logs; a run_now during a
pass waits for the next pass (callers share it); a metadata outage deletes nothing but the
pass still collects, and says why in one line; passes come every ``gc_wait_ms`` by
themselves; compaction follows its intervals, suspension and forcing (fake clock); a stop
ends a pass under way; a bookie whose disk fills collects at once and turns writable again.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bkeeper.common.clock import Clock
from bkeeper.common.errors import BookieIOError, StorageError
from bkeeper.common.ids import LedgerId
from bkeeper.meta.cluster import ClusterMetadata
from bkeeper.meta.ledger_metadata import LedgerMetadata
from bkeeper.meta.ledgers import LedgerMetadataStore
from bkeeper.meta.memory import MemoryNodeStore
from bkeeper.server import Bookie, BookieConfig
from bkeeper.server.garbage import GarbageCollector, GcReport
from bkeeper.server.gc_scan import LedgerMetadataReader
from bkeeper.storage import DiskState, MemoryFileSystem, Storage
from bkeeper.storage.garbage import GcResult
from bkeeper.testing.clock import FakeClock
from bkeeper.testing.cluster import MemoryCluster
from bkeeper.wire.codes import Protocol, StatusCode
from bkeeper.wire.digest import DigestManager, DigestType, master_key
from bkeeper.wire.messages import AddRequest, ReadRequest

from .test_full_disk import cluster, fill, uri
from .test_gc_scan import NetworkPaced, race, read_back, write_ledger

__all__ = ["cluster", "uri"]  # fixtures

KIB = 1024
MIB = 1024 * KIB
#: Small logs, so that a ledger fills logs of its own, which GC can remove.
STORAGE: dict[str, Any] = {
    "entry_log_bytes_max": 32 * KIB,
    "write_cache_bytes_max": 64 * KIB,
    "write_cache_flush_bytes": 16 * KIB,
    "journal_file_bytes_max": 64 * KIB,
    "compaction_rate_bytes_per_s": 0,
}
STATUS_KEYS = {
    "running",
    "suspended_major",
    "suspended_minor",
    "passes",
    "last_pass",
    "ledgers_deleted_total",
    "logs_removed_total",
    "logs_compacted_total",
    "bytes_freed_total",
    "entry_logs",
    "entry_log_bytes",
    "live_bytes",
    "gc_wait_ms",
    "disk_state",
}


def storage_of(cluster: MemoryCluster, index: int) -> Storage:
    storage = cluster.bookies[index].storage
    assert storage is not None
    return storage


@contextlib.asynccontextmanager
async def running(
    cluster: MemoryCluster,
    metadata: LedgerMetadataReader | None,
    clock: Clock | None = None,
    **options: Any,
) -> AsyncIterator[list[GarbageCollector]]:
    """A running collector for each bookie of ``cluster``, stopped at the end."""
    options.setdefault("gc_wait_ms", 600_000)  # no pass but those a test asks for
    collectors = [
        GarbageCollector(
            BookieConfig(data_dir=bookie.data_dir, **options),
            storage_of(cluster, index),
            metadata,
            clock=clock,
        )
        for index, bookie in enumerate(cluster.bookies)
    ]
    tasks = [asyncio.create_task(collector.run()) for collector in collectors]
    try:
        yield collectors
    finally:
        for collector in collectors:
            collector.request_stop()
        await asyncio.gather(*tasks)


@contextlib.asynccontextmanager
async def memory_cluster(bookies: int = 3) -> AsyncIterator[tuple[MemoryCluster, ClusterMetadata]]:
    """A cluster, and the collectors' own metadata session (as a bookie has its own)."""
    async with (
        MemoryCluster(bookies, storage_options=STORAGE) as cluster,
        await ClusterMetadata.open(cluster.uri) as metadata,
    ):
        yield cluster, metadata


async def test_run_now_forgets_exactly_the_deleted_ledgers_and_frees_their_logs() -> None:
    async with memory_cluster() as (cluster, metadata), running(cluster, metadata.ledgers) as gcs:
        bk = await cluster.client()
        written = [await write_ledger(bk, 60, 1000) for _ in range(6)]
        for ledger_id, _ in written[:4]:
            await bk.delete_ledger(ledger_id)
        kept = [ledger_id for ledger_id, _ in written[4:]]
        before = [gc.status() for gc in gcs]
        reports = [await gc.run_now() for gc in gcs]
        for index, (gc, report) in enumerate(zip(gcs, reports, strict=True)):
            assert (report.ledgers_deleted, report.metadata_reads, report.scan_error) == (4, 4, "")
            assert storage_of(cluster, index).ledger_ids() == kept
            assert report.logs_removed >= 1 and report.bytes_freed > 0
            assert not report.stopped and report.error == ""
            status = gc.status()
            assert set(status) == STATUS_KEYS
            assert json.loads(json.dumps(status)) == status
            assert status["last_pass"] == report.as_dict()
            assert (status["passes"], status["running"], status["disk_state"]) == (
                1,
                False,
                "writable",
            )
            assert status["ledgers_deleted_total"] == 4
            assert status["logs_removed_total"] == report.logs_removed
            assert status["bytes_freed_total"] == report.bytes_freed
            assert status["entry_log_bytes"] < before[index]["entry_log_bytes"]
            assert status["gc_wait_ms"] == 600_000
            again = await gc.run_now()
            assert (again.ledgers_deleted, again.metadata_reads) == (0, 0)
        for ledger_id, bodies in written[4:]:
            assert await read_back(bk, ledger_id) == bodies


async def test_ledger_creations_raced_against_whole_passes_lose_nothing() -> None:
    """Back-to-back passes (scan, then removal and compaction of entry logs, major and minor
    in turn) on every bookie while writers create, fill and delete ledgers."""
    async with memory_cluster() as (cluster, metadata):
        bk = await cluster.client()
        async with running(cluster, NetworkPaced(metadata.ledgers)) as gcs:
            reports = []

            async def one_pass(index: int) -> tuple[int, ...]:
                before = set(storage_of(cluster, index).ledger_ids())
                report = await gcs[index].run_now(major=len(reports) % 2 == 0, minor=True)
                assert report.scan_error == "" and report.error == ""
                reports.append(report)
                # Only GC deletes ledgers from a bookie: those gone since are its.
                return tuple(before - set(storage_of(cluster, index).ledger_ids()))

            seen = await race(cluster, bk, one_pass, size=500)
        assert sum(r.logs_compacted for r in reports) >= 1  # copies raced the writers
        assert sum(r.ledgers_deleted for r in reports) == 3 * len(seen.deleted)


class Gated:
    """The metadata, with each listing held at its start until ``release`` is set."""

    def __init__(self, inner: LedgerMetadataStore) -> None:
        self._inner = inner
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.listings = 0

    async def ledger_ids(self) -> AsyncIterator[LedgerId]:
        self.listings += 1
        self.entered.set()
        await self.release.wait()
        async for ledger_id in self._inner.ledger_ids():
            yield ledger_id

    async def read(self, ledger_id: int) -> object:
        return await self._inner.read(ledger_id)


def test_a_report_holds_every_field_of_the_storage_result() -> None:
    names = {f.name for f in dataclasses.fields(GcReport)}
    assert {f.name for f in dataclasses.fields(GcResult)} <= names
    assert names - {f.name for f in dataclasses.fields(GcResult)} == {
        "ledgers_deleted",
        "metadata_reads",
        "scan_error",
        "started_wall_ms",
    }


async def test_a_run_now_during_a_pass_waits_for_the_next_pass() -> None:
    async with memory_cluster(1) as (cluster, metadata):
        bk = await cluster.client()
        gone, _ = await write_ledger(bk, 10, ensemble=1)
        await bk.delete_ledger(gone)
        gated = Gated(metadata.ledgers)
        async with running(cluster, gated) as (gc,):
            first = asyncio.ensure_future(gc.run_now())
            await gated.entered.wait()
            assert gc.status()["running"] is True
            second = asyncio.ensure_future(gc.run_now(major=True))
            third = asyncio.ensure_future(gc.run_now(minor=True))
            await asyncio.sleep(0)  # both now wait (run_now registers before it awaits)
            gated.release.set()
            report = await first
            assert (report.ledgers_deleted, report.major, report.minor) == (
                1,
                False,
                False,
            )
            later = await second
            assert await third is later  # one pass for both callers, forcing what each asked
            assert (later.ledgers_deleted, later.major) == (0, True)
            assert later is not report and gc.status()["passes"] == 2
            assert storage_of(cluster, 0).ledger_ids() == []


def memory_store(metadata: ClusterMetadata) -> MemoryNodeStore:
    assert isinstance(metadata.store, MemoryNodeStore)
    return metadata.store


async def test_a_metadata_outage_deletes_nothing_but_the_pass_still_collects(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with (
        memory_cluster(1) as (cluster, metadata),
        running(cluster, metadata.ledgers) as (gc,),
    ):
        bk = await cluster.client()
        earlier, _ = await write_ledger(bk, 60, 1000, ensemble=1)
        gone, _ = await write_ledger(bk, 60, 1000, ensemble=1)
        kept, bodies = await write_ledger(bk, 60, 1000, ensemble=1)
        for ledger_id in (earlier, gone):
            await bk.delete_ledger(ledger_id)
        storage = storage_of(cluster, 0)
        storage.delete_ledger(earlier)  # as an earlier pass did; its logs are not collected yet
        memory_store(metadata).suspend()
        with caplog.at_level(logging.WARNING, logger="bkeeper.server.garbage"):
            report = await gc.run_now()
        assert report.ledgers_deleted == 0 and report.metadata_reads == 0
        assert report.scan_error.startswith("listing the ledgers failed: ConnectionLossError")
        assert storage.ledger_ids() == [gone, kept]
        assert report.logs_removed >= 1  # the earlier deletion's logs
        lines = [r.getMessage() for r in caplog.records if r.name == "bkeeper.server.garbage"]
        assert len(lines) == 1 and "\n" not in lines[0]
        assert lines[0].startswith("garbage collection: listing the ledgers failed: ")
        assert lines[0].endswith("(0 ledgers deleted before that); tried again in 600000 ms")

        memory_store(metadata).resume()
        report = await gc.run_now()
        assert (report.ledgers_deleted, report.scan_error) == (1, "")
        assert storage.ledger_ids() == [kept]
        assert await read_back(bk, kept) == bodies


async def test_passes_come_every_gc_wait_ms_by_themselves() -> None:
    async with memory_cluster(1) as (cluster, metadata):
        bk = await cluster.client()
        gone, _ = await write_ledger(bk, 10, ensemble=1)
        kept, bodies = await write_ledger(bk, 10, ensemble=1)
        await bk.delete_ledger(gone)
        async with running(cluster, metadata.ledgers, gc_wait_ms=20) as (gc,):
            async with asyncio.timeout(30):
                while gc.passes < 3:  # no run_now: the period alone
                    await asyncio.sleep(0.01)
            assert gc.ledgers_deleted_total == 1
        assert storage_of(cluster, 0).ledger_ids() == [kept]
        assert await read_back(bk, kept) == bodies


async def test_compaction_follows_its_intervals_suspension_and_forcing() -> None:
    clock = FakeClock()
    intervals = {"minor_compaction_interval_ms": 60_000, "major_compaction_interval_ms": 600_000}
    async with (
        memory_cluster(1) as (cluster, _),
        running(cluster, None, clock, **intervals) as (gc,),
    ):

        async def kinds(**force: bool) -> tuple[bool, bool]:
            report = await gc.run_now(**force)
            return report.minor, report.major

        assert await kinds() == (False, False)  # a fresh bookie waits one interval
        clock.advance(60)
        assert await kinds() == (True, False)
        assert await kinds() == (False, False)
        gc.suspend(major=False, minor=True)
        clock.advance(60)
        assert await kinds() == (False, False)
        assert await kinds(minor=True) == (True, False)  # forced: runs while suspended
        status = gc.status()
        assert (status["suspended_minor"], status["suspended_major"]) == (True, False)
        gc.resume(major=False, minor=True)
        clock.advance(60)
        assert await kinds() == (True, False)
        clock.advance(600)
        assert await kinds() == (False, True)  # a major one counts as a minor one too
        assert await kinds() == (False, False)
        assert await kinds(major=True) == (False, True)
        assert gc.status()["last_pass"]["started_wall_ms"] == clock.wall_ms()  # type: ignore[index]


async def test_a_stop_ends_the_pass_under_way_and_fails_its_callers() -> None:
    async with memory_cluster(1) as (cluster, metadata):
        bk = await cluster.client()
        gone, _ = await write_ledger(bk, 10, ensemble=1)
        await bk.delete_ledger(gone)
        gated = Gated(metadata.ledgers)
        gc = GarbageCollector(
            BookieConfig(data_dir="/data", gc_wait_ms=600_000), storage_of(cluster, 0), gated
        )
        loop = asyncio.create_task(gc.run())
        caller = asyncio.ensure_future(gc.run_now())
        await gated.entered.wait()
        gc.request_stop()
        gated.release.set()
        await loop
        with pytest.raises(StorageError, match="stopped during the pass"):
            await caller
        with pytest.raises(StorageError, match="is stopped"):
            await gc.run_now()
        assert storage_of(cluster, 0).ledger_ids() == [gone]  # the scan ended before deleting
        assert gc.status()["passes"] == 0


class FailingOnce:
    """A storage whose next collection fails (an entry-log directory gone, say)."""

    def __init__(self, storage: Storage) -> None:
        self._storage = storage
        self.fail_next = True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._storage, name)

    @property
    def disk_state(self) -> DiskState:
        return self._storage.disk_state

    def collect_garbage(self, **kinds: Any) -> Any:
        if self.fail_next:
            self.fail_next = False
            raise BookieIOError("entry log directory is gone")
        return self._storage.collect_garbage(**kinds)


async def test_a_failed_collection_fails_its_callers_and_the_next_pass_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with memory_cluster(1) as (cluster, metadata):
        storage = FailingOnce(storage_of(cluster, 0))
        gc = GarbageCollector(BookieConfig(data_dir="/data"), storage, metadata.ledgers)  # type: ignore[arg-type]
        loop = asyncio.create_task(gc.run())
        try:
            with (
                caplog.at_level(logging.ERROR, logger="bkeeper.server.garbage"),
                pytest.raises(BookieIOError, match="entry log directory is gone"),
            ):
                await gc.run_now()
            assert [r.getMessage() for r in caplog.records] == [
                "garbage collection failed: BookieIOError: entry log directory is gone"
            ]
            assert (gc.failures, gc.passes, gc.status()["running"]) == (1, 0, False)
            report = await gc.run_now()
            assert not report.stopped and (gc.failures, gc.passes) == (1, 1)
        finally:
            gc.request_stop()
            await loop


# -- a bookie whose disk fills -------------------------------------------------------------
KEY = master_key(b"pw")
FULL_DISK_STORAGE = {
    **STORAGE,
    "write_cache_bytes_max": 512 * KIB,
    "write_cache_flush_bytes": 64 * KIB,
    "disk_high_priority_free_bytes_min": 64 * KIB,
}


#: The answer to an add while the write cache is full: back-pressure, the add is retried.
BUSY = StatusCode.ETOOMANYREQUESTS


def body(ledger: int, entry: int) -> bytes:
    manager = DigestManager(ledger, DigestType.CRC32C, b"pw")
    return manager.encode_entry(entry, entry - 1, 1000 * (entry + 1), b"x" * 1000)


async def write_directly(
    start_bookie: Any, connect: Any, cluster: ClusterMetadata, uri: str, **storage: Any
) -> tuple[Bookie, MemoryFileSystem, Any]:
    """A bookie on a 4 MiB disk holding ledger 1 (no metadata: garbage, 1.5 MiB of entries)
    and ledger 2 (with metadata), checkpointed: only removing ledger 1's entry logs can free
    much space now."""
    fs = MemoryFileSystem(capacity_bytes=4 * MIB)
    bookie: Bookie = await start_bookie(
        fs=fs, storage={**FULL_DISK_STORAGE, **storage}, metadata_uri=uri, gc_wait_ms=600_000
    )
    meta = LedgerMetadata.new([bookie.bookie_id], 1, 1, DigestType.CRC32C, b"pw", ctime_ms=0)
    await cluster.ledgers.create(meta, ledger_id=2)
    client = await connect(bookie, Protocol.V2)
    for ledger, entries in ((2, 20), (1, 1500)):
        for batch in range(0, entries, 50):
            adds = list(range(batch, min(entries, batch + 50)))
            for _attempt in range(100):  # the small write cache pushes back while it flushes
                responses = await asyncio.gather(
                    *(client.request(AddRequest(ledger, e, KEY, body(ledger, e))) for e in adds)
                )
                assert {r.status for r in responses} <= {StatusCode.EOK, BUSY}
                adds = [e for e, r in zip(adds, responses, strict=True) if r.status is BUSY]
                if not adds:
                    break
                await asyncio.sleep(0.05)
            assert not adds, f"ledger {ledger}: entries {adds} refused for 5 s"
    assert bookie.storage is not None
    await asyncio.to_thread(bookie.storage.checkpoint)  # the journal's copy goes
    return bookie, fs, client


async def test_a_full_disk_is_collected_at_once_and_the_bookie_writable_again(
    start_bookie, connect, cluster, uri
) -> None:
    bookie, fs, client = await write_directly(start_bookie, connect, cluster, uri)
    gc = bookie.garbage_collector
    assert gc is not None and gc.passes == 0
    writable = asyncio.Event()
    bookie.add_readonly_listener(lambda readonly: None if readonly else writable.set())
    fill(fs, 0.97)
    assert bookie.check_disk() is True  # read-only: the GC pass starts now, not in 600 s
    async with asyncio.timeout(30):
        while bookie.check_disk():
            await asyncio.sleep(0.01)
        await writable.wait()
        while gc.passes == 0:  # the pass frees the space before it ends and is counted
            await asyncio.sleep(0.01)
    assert gc.passes == 1
    last = gc.status()["last_pass"]
    assert isinstance(last, dict) and last["major"] is True  # forced by the full disk
    assert bookie.storage is not None and bookie.storage.ledger_ids() == [2]
    assert gc.ledgers_deleted_total == 1 and gc.logs_removed_total >= 1
    response = await client.request(AddRequest(2, 20, KEY, body(2, 20)))
    assert response.status is StatusCode.EOK
    for entry in range(21):
        read = await client.request(ReadRequest(2, entry))
        assert read.status is StatusCode.EOK and bytes(read.body) == body(2, entry)
    assert (await client.request(ReadRequest(1, 0))).status is StatusCode.ENOLEDGER


async def test_no_compaction_on_a_full_disk_when_it_is_not_allowed(
    start_bookie, connect, cluster, uri
) -> None:
    bookie, fs, _client = await write_directly(
        start_bookie, connect, cluster, uri, gc_allowed_on_full_disk=False
    )
    gc = bookie.garbage_collector
    assert gc is not None
    fill(fs, 0.97)
    assert bookie.check_disk() is True
    assert bookie.storage is not None and bookie.storage.disk_state is DiskState.FULL
    report = await gc.run_now(major=True, minor=True)
    assert (report.major, report.minor) == (False, False)
    assert report.ledgers_deleted == 1  # deleting ledgers and dead logs writes nothing


async def test_closing_the_bookie_stops_a_compaction_under_way(start_bookie, connect) -> None:
    """A compaction throttled to 1 KiB/s would take minutes; the bookie's shutdown ends it
    between two records, the caller gets the report of a pass cut short, and the bookie
    started again serves every entry of the ledger kept."""
    fs = MemoryFileSystem()
    storage = {**FULL_DISK_STORAGE, "compaction_rate_bytes_per_s": 1024}
    bookie: Bookie = await start_bookie(fs=fs, storage=storage, gc_wait_ms=600_000)
    client = await connect(bookie, Protocol.V2)
    for batch in range(0, 300, 50):  # ledgers 1 and 2 interleaved: every log holds both
        adds = [(ledger, e) for e in range(batch, batch + 50) for ledger in (1, 2)]
        responses = await asyncio.gather(
            *(client.request(AddRequest(i, e, KEY, body(i, e))) for i, e in adds)
        )
        assert {r.status for r in responses} == {StatusCode.EOK}
    assert bookie.storage is not None and bookie.garbage_collector is not None
    bookie.storage.delete_ledger(1)  # no metadata here: as if a scan had found it deleted
    gc = bookie.garbage_collector
    caller = asyncio.ensure_future(gc.run_now(major=True))
    ledgers_dir = f"{bookie.config.data_dir}/current/ledgers"
    async with asyncio.timeout(30):
        while not any(name.endswith(".compacting") for name in fs.list_dir(ledgers_dir)):
            await asyncio.sleep(0.01)  # until the copy of a log has begun
        await bookie.aclose()
        report = await caller
    assert report.major and report.stopped
    assert gc.status()["running"] is False
    with pytest.raises(StorageError, match="is stopped"):
        await gc.run_now()
    data_dir = Path(bookie.config.data_dir)
    again: Bookie = await start_bookie(data_dir, fs=fs, storage=storage, port=bookie.port)
    client = await connect(again, Protocol.V2)
    for entry in range(300):
        read = await client.request(ReadRequest(2, entry))
        assert read.status is StatusCode.EOK and bytes(read.body) == body(2, entry), entry
    assert (await client.request(ReadRequest(1, 0))).status is StatusCode.ENOLEDGER
