"""Scan and compare on the in-memory cluster: real client, real storage, ``memory://`` metadata.

GC never deletes a ledger that exists or is being created (creations raced against passes
run back to back, a lagging metadata view, a stale listing), deletes exactly the ledgers
whose metadata is gone, deletes nothing while the metadata store is down, and confirms at
most ``reads_per_s`` candidates a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from bkeeper.client.bookkeeper import BookKeeper
from bkeeper.common.clock import SystemClock
from bkeeper.common.errors import LedgerNotFoundError
from bkeeper.common.ids import LedgerId
from bkeeper.meta.cluster import ClusterMetadata
from bkeeper.meta.ledgers import LedgerMetadataStore
from bkeeper.meta.memory import MemoryNodeStore
from bkeeper.server.gc_scan import (
    LedgerMetadataReader,
    ReadLimiter,
    ScanOutcome,
    scan_and_compare,
)
from bkeeper.storage import Storage
from bkeeper.testing.clock import FakeClock
from bkeeper.testing.cluster import MemoryCluster

ENTRIES = 20


def payload(ledger_id: int, entry: int, size: int = 64) -> bytes:
    return b"%d:%d:" % (ledger_id, entry) + random.randbytes(size)


async def scan(
    storage: Storage | None,
    metadata: LedgerMetadataReader,
    reads_per_s: float = 10_000,
    stopping: asyncio.Event | None = None,
) -> ScanOutcome:
    assert storage is not None
    limiter = ReadLimiter(reads_per_s, SystemClock(), asyncio.sleep)
    return await scan_and_compare(storage, metadata, limiter, stopping or asyncio.Event())


def storages(cluster: MemoryCluster) -> list[Storage]:
    return [bookie.storage for bookie in cluster.bookies if bookie.storage is not None]


async def write_ledger(
    bk: BookKeeper, entries: int = ENTRIES, size: int = 64, ensemble: int = 3
) -> tuple[int, list[bytes]]:
    handle = await bk.create_ledger(ensemble, min(ensemble, 2), min(ensemble, 2), password=b"pw")
    bodies = []
    for entry in range(entries):
        body = payload(handle.ledger_id, entry, size)
        await handle.append(body)
        bodies.append(body)
    await handle.close()
    return handle.ledger_id, bodies


async def read_back(bk: BookKeeper, ledger_id: int) -> list[bytes]:
    handle = await bk.open_ledger(ledger_id, b"pw")
    return [entry.data async for entry in handle.read()]


@contextlib.asynccontextmanager
async def gc_session(cluster: MemoryCluster) -> AsyncIterator[ClusterMetadata]:
    """The garbage collector's own metadata session, as a bookie has its own."""
    async with await ClusterMetadata.open(cluster.uri) as metadata:
        yield metadata


class NetworkPaced:
    """The metadata at a network's pace: other tasks run between the ids of the listing and
    while a read is under way (the memory driver alone answers without ever yielding, so
    nothing could happen during its listing)."""

    def __init__(self, inner: LedgerMetadataStore) -> None:
        self._inner = inner

    async def ledger_ids(self) -> AsyncIterator[LedgerId]:
        async for ledger_id in self._inner.ledger_ids():
            await asyncio.sleep(0)
            yield ledger_id
        await asyncio.sleep(0)

    async def read(self, ledger_id: int) -> object:
        await asyncio.sleep(0)
        return await self._inner.read(ledger_id)


@dataclass
class Race:
    """What :func:`race` saw: ledgers kept (with their entries), ledgers deleted by the
    writers, and the ledgers each GC pass deleted."""

    written: dict[int, list[bytes]] = field(default_factory=dict)
    deleted: set[int] = field(default_factory=set)
    passes: list[tuple[int, ...]] = field(default_factory=list)


async def race(
    cluster: MemoryCluster,
    bk: BookKeeper,
    one_pass: Callable[[int], Awaitable[tuple[int, ...]]],
    entries: int = ENTRIES,
    size: int = 64,
) -> Race:
    """Six writers each create 12 ledgers and add to them (every add awaited), deleting one
    in three, while every bookie runs GC passes back to back (``one_pass(index)``: the
    ledgers it deleted); then a last pass on each bookie. Checks that no pass deleted a
    ledger that was kept, that every kept ledger reads back whole and that no bookie keeps
    a deleted one.

    However slow the passes, they overlap the writes: halfway through each ledger its
    writer waits for 4 more passes to end (of 3 bookies, one then ran a whole pass while
    the ledger was open, after the writer's previous deletion)."""
    seen = Race()
    done = asyncio.Event()
    pass_ended = asyncio.Condition()

    async def passes_end(count: int) -> None:
        target = len(seen.passes) + count
        async with pass_ended:
            await pass_ended.wait_for(lambda: len(seen.passes) >= target)

    async def writer(index: int) -> None:
        for round_ in range(12):
            handle = await bk.create_ledger(3, 2, 2, password=b"pw")
            bodies = []
            for entry in range(entries):  # each add awaited: passes run in between
                if entry == entries // 2:
                    await passes_end(4)
                body = payload(handle.ledger_id, entry, size)
                await handle.append(body)
                bodies.append(body)
            await handle.close()
            if (index + round_) % 3 == 0:
                await bk.delete_ledger(handle.ledger_id)
                seen.deleted.add(handle.ledger_id)
            else:
                seen.written[handle.ledger_id] = bodies

    async def collector(index: int) -> None:
        while not done.is_set():
            deleted = await one_pass(index)
            assert not set(deleted) & set(seen.written), "deleted a live ledger"
            seen.passes.append(deleted)
            async with pass_ended:
                pass_ended.notify_all()
            await asyncio.sleep(0)

    async def writers() -> None:
        try:
            await asyncio.gather(*(writer(i) for i in range(6)))
        finally:
            done.set()

    # A failed check in a collector cancels the writers (which may be waiting for passes).
    async with asyncio.timeout(120), asyncio.TaskGroup() as group:
        for index in range(len(cluster.bookies)):
            group.create_task(collector(index))
        group.create_task(writers())
    assert len(seen.written) == 48 and len(seen.deleted) == 24
    assert len(seen.passes) >= 4 * 12
    assert any(seen.passes), "no pass deleted anything during the race"
    for index, storage in enumerate(storages(cluster)):
        await one_pass(index)
        assert set(storage.ledger_ids()) <= set(seen.written)
    for ledger_id, bodies in seen.written.items():
        assert await read_back(bk, ledger_id) == bodies
    return seen


async def test_creations_raced_against_back_to_back_scans_lose_nothing() -> None:
    async with MemoryCluster(3) as cluster, gc_session(cluster) as metadata:
        bk = await cluster.client()

        async def one_pass(index: int) -> tuple[int, ...]:
            outcome = await scan(storages(cluster)[index], NetworkPaced(metadata.ledgers))
            assert outcome.error == ""
            return outcome.deleted

        await race(cluster, bk, one_pass)


class LaggingMetadata:
    """A metadata view frozen when the listing starts, as a ZooKeeper server lagging behind
    the one clients write to: ledgers created later are neither listed nor readable. Once
    the listing is over, ``after_listing`` runs (it creates a ledger and writes to it)."""

    def __init__(
        self, inner: LedgerMetadataStore, after_listing: Callable[[], Awaitable[None]]
    ) -> None:
        self._inner = inner
        self._after_listing = after_listing
        self._view: set[int] = set()

    async def ledger_ids(self) -> AsyncIterator[LedgerId]:
        self._view = {ledger_id async for ledger_id in self._inner.ledger_ids()}
        for ledger_id in sorted(self._view):
            yield LedgerId(ledger_id)
        await self._after_listing()

    async def read(self, ledger_id: int) -> object:
        if ledger_id not in self._view:
            raise LedgerNotFoundError(f"ledger {ledger_id}: not in this lagging view")
        return await self._inner.read(ledger_id)


async def test_a_ledger_created_during_the_listing_is_never_a_candidate() -> None:
    async with MemoryCluster(3) as cluster, gc_session(cluster) as metadata:
        bk = await cluster.client()
        kept, kept_bodies = await write_ledger(bk)
        late: list[tuple[int, list[bytes]]] = []

        async def create_late() -> None:
            late.append(await write_ledger(bk))

        outcomes = [
            await scan(storage, LaggingMetadata(metadata.ledgers, create_late))
            for storage in storages(cluster)
        ]
        assert [o.deleted for o in outcomes] == [(), (), ()]
        assert [o.candidates for o in outcomes] == [0, 0, 0]
        assert len(late) == 3
        for ledger_id, bodies in [(kept, kept_bodies), *late]:
            assert all(s.ledger_exists(ledger_id) for s in storages(cluster))
            assert await read_back(bk, ledger_id) == bodies


class StaleListing:
    """A listing that misses ``hidden`` (which still has metadata)."""

    def __init__(self, inner: LedgerMetadataStore, hidden: int) -> None:
        self._inner = inner
        self._hidden = hidden

    async def ledger_ids(self) -> AsyncIterator[LedgerId]:
        async for ledger_id in self._inner.ledger_ids():
            if ledger_id != self._hidden:
                yield ledger_id

    async def read(self, ledger_id: int) -> object:
        return await self._inner.read(ledger_id)


async def test_a_stale_listing_is_confirmed_by_reading_the_metadata() -> None:
    async with MemoryCluster(3) as cluster, gc_session(cluster) as metadata:
        bk = await cluster.client()
        hidden, bodies = await write_ledger(bk)
        gone, _ = await write_ledger(bk)
        await bk.delete_ledger(gone)
        for storage in storages(cluster):
            outcome = await scan(storage, StaleListing(metadata.ledgers, hidden))
            assert (outcome.candidates, outcome.deleted, outcome.metadata_reads) == (
                2,
                (gone,),
                2,
            )
            assert storage.ledger_ids() == [hidden]
        assert await read_back(bk, hidden) == bodies


def memory_store(metadata: ClusterMetadata) -> MemoryNodeStore:
    assert isinstance(metadata.store, MemoryNodeStore)
    return metadata.store


async def test_a_metadata_store_down_deletes_nothing_and_the_next_scan_does() -> None:
    async with MemoryCluster(3) as cluster, gc_session(cluster) as metadata:
        bk = await cluster.client()
        kept, bodies = await write_ledger(bk)
        gone, _ = await write_ledger(bk)
        await bk.delete_ledger(gone)
        memory_store(metadata).suspend()
        for storage in storages(cluster):
            outcome = await scan(storage, metadata.ledgers)
            assert outcome.deleted == () and outcome.metadata_reads == 0
            assert outcome.error.startswith("listing the ledgers failed: ConnectionLossError")
            assert storage.ledger_ids() == sorted([kept, gone])
        memory_store(metadata).resume()
        for storage in storages(cluster):
            assert (await scan(storage, metadata.ledgers)).deleted == (gone,)
            assert storage.ledger_ids() == [kept]
        assert await read_back(bk, kept) == bodies


class DownAfterListing:
    """The store goes down once the listing is over: every confirming read fails."""

    def __init__(self, metadata: ClusterMetadata) -> None:
        self._metadata = metadata

    async def ledger_ids(self) -> AsyncIterator[LedgerId]:
        async for ledger_id in self._metadata.ledgers.ledger_ids():
            yield ledger_id
        memory_store(self._metadata).suspend()

    async def read(self, ledger_id: int) -> object:
        return await self._metadata.ledgers.read(ledger_id)


async def test_a_failed_confirming_read_is_not_absent() -> None:
    async with MemoryCluster(3) as cluster, gc_session(cluster) as metadata:
        bk = await cluster.client()
        gone = [(await write_ledger(bk, 2))[0] for _ in range(2)]
        for ledger_id in gone:
            await bk.delete_ledger(ledger_id)
        storage = storages(cluster)[0]
        outcome = await scan(storage, DownAfterListing(metadata))
        assert (outcome.candidates, outcome.deleted, outcome.metadata_reads) == (2, (), 1)
        assert outcome.error.startswith(
            f"reading the metadata of ledger {gone[0]} failed: ConnectionLossError"
        )
        assert storage.ledger_ids() == gone


async def test_confirming_reads_are_rate_limited() -> None:
    async with MemoryCluster(1) as cluster, gc_session(cluster) as metadata:
        storage = storages(cluster)[0]
        for ledger_id in range(1, 251):  # local ledgers that never had metadata
            storage.fence(ledger_id, b"k")
        clock = FakeClock()
        started = clock.monotonic()
        read_times: list[float] = []

        class Timed:
            def ledger_ids(self) -> AsyncIterator[LedgerId]:
                return metadata.ledgers.ledger_ids()

            async def read(self, ledger_id: int) -> object:
                read_times.append(clock.monotonic())
                return await metadata.ledgers.read(ledger_id)

        async def sleep(seconds: float) -> None:
            clock.advance(seconds)

        limiter = ReadLimiter(100, clock, sleep)
        outcome = await scan_and_compare(storage, Timed(), limiter, asyncio.Event())
        assert (outcome.candidates, len(outcome.deleted), outcome.metadata_reads) == (250, 250, 250)
        assert storage.ledger_ids() == []
        for second in range(3):
            window = [t for t in read_times if started + second <= t < started + second + 1]
            assert len(window) <= 101, (second, len(window))
        assert read_times[-1] - started >= 2.48


async def test_a_stop_ends_the_scan_between_reads() -> None:
    async with MemoryCluster(1) as cluster, gc_session(cluster) as metadata:
        storage = storages(cluster)[0]
        for ledger_id in range(1, 11):
            storage.fence(ledger_id, b"k")
        stopping = asyncio.Event()
        clock = FakeClock()

        async def sleep(seconds: float) -> None:
            clock.advance(seconds)
            stopping.set()  # the bookie is asked to stop while the scan waits for a token

        limiter = ReadLimiter(1, clock, sleep)
        outcome = await scan_and_compare(storage, metadata.ledgers, limiter, stopping)
        assert outcome.stopped and outcome.metadata_reads == 1 and len(outcome.deleted) == 1
        assert len(storage.ledger_ids()) == 9
