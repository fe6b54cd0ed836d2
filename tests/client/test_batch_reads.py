"""Batch reads (v2 BATCH_READ) on the in-memory cluster: coverage, order, segments, failover,
fallbacks to the per-entry path, LAC rules, short answers.

To prove which path served a read, tests either make every per-entry READ fail (then only
BATCH_READ can have served it) or count the requests the bookies received (the per-entry
path sends exactly one READ per entry when every first replica answers).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Awaitable
from typing import Any, TypeVar

import pytest

from bkeeper.client.batch_read import plan_spans
from bkeeper.client.config import ClientConfig
from bkeeper.client.entry import Entry
from bkeeper.client.read_handle import ReadHandle
from bkeeper.client.write_handle import WriteHandle
from bkeeper.common.errors import BookieUnavailableError, ConfigError, NoSuchEntryError
from bkeeper.meta.ledger_metadata import LedgerMetadata
from bkeeper.testing.cluster import MemoryCluster
from bkeeper.testing.virtual_time import on_virtual_time
from bkeeper.wire.codes import Protocol, StatusCode
from bkeeper.wire.digest import DigestType
from bkeeper.wire.messages import BatchReadRequest, ReadRequest

FAST = ClientConfig(add_timeout_ms=300, read_timeout_ms=300, speculative_read_timeout_ms=50)
LIMIT_S = 10.0

T = TypeVar("T")


async def bounded(awaitable: Awaitable[T], limit: float = LIMIT_S) -> T:
    return await asyncio.wait_for(awaitable, limit)


async def no_requests_in_flight(cluster: MemoryCluster) -> None:
    while cluster.requests_in_flight():
        await asyncio.sleep(0.01)


def payload(i: int) -> bytes:
    return b"entry-%05d-" % i + bytes([i % 251]) * 90


async def write(wh: WriteHandle, count: int, start: int = 0) -> None:
    futures = [await wh.append_async(payload(i)) for i in range(start, start + count)]
    assert await bounded(asyncio.gather(*futures)) == list(range(start, start + count))


async def closed_ledger(
    cluster: MemoryCluster, count: int, quorums: tuple[int, int, int] = (3, 3, 2)
) -> int:
    writer = await cluster.client(FAST)
    wh = await writer.create_ledger(*quorums, password=b"pw")
    await write(wh, count)
    await bounded(wh.close())
    return wh.ledger_id


async def batches_of(
    handle: ReadHandle, first: int = 0, last: int | None = None, **kwargs: Any
) -> list[list[Entry]]:
    async def collect() -> list[list[Entry]]:
        return [batch async for batch in handle.read_batches(first, last, **kwargs)]

    return await bounded(collect())


def check(batches: list[list[Entry]], first: int, last: int, size_max: int) -> None:
    """Every entry of first..last once, in order, in non-empty lists of at most size_max."""
    assert all(0 < len(batch) <= size_max for batch in batches)
    entries = [entry for batch in batches for entry in batch]
    assert [e.entry_id for e in entries] == list(range(first, last + 1))
    assert [e.data for e in entries] == [payload(i) for i in range(first, last + 1)]


def requests(cluster: MemoryCluster) -> list[int]:
    return [bookie.requests for bookie in cluster.bookies]


def fail_single_reads(cluster: MemoryCluster) -> None:
    """Every per-entry READ fails: whatever is read now came by BATCH_READ."""
    for index in range(len(cluster.bookies)):
        cluster.fault(index, ReadRequest, error=StatusCode.EIO)


async def open_for_reading(cluster: MemoryCluster, ledger_id: int, **config: Any) -> ReadHandle:
    reader = await cluster.client(dataclasses.replace(FAST, **config))
    return await bounded(reader.open_ledger(ledger_id, b"pw"))


# -- the batch path --------------------------------------------------------------------------


@on_virtual_time
async def test_batches_cover_the_range_in_order_spread_over_the_bookies():
    async with MemoryCluster(3) as cluster:
        ledger_id = await closed_ledger(cluster, 1000)
        rh = await open_for_reading(cluster, ledger_id, batch_read_entries_max=100)
        fail_single_reads(cluster)
        before = requests(cluster)
        batches = await batches_of(rh)
        check(batches, 0, 999, 100)
        sent = [after - b for after, b in zip(requests(cluster), before, strict=True)]
        assert sum(sent) == 10  # 1000 entries, 100 a request, nothing asked twice
        assert min(sent) >= 3  # round robin over the three replicas
        assert rh.last_add_confirmed == 999
        # read() and a sub-range go the same way.
        assert [e.data async for e in rh.read(250, 260)] == [payload(i) for i in range(250, 261)]


@on_virtual_time
async def test_batches_never_cross_an_ensemble_change():
    async with MemoryCluster(4) as cluster:
        writer = await cluster.client(FAST)
        wh = await writer.create_ledger(3, 3, 2, password=b"pw")
        await write(wh, 150)
        victim = cluster.bookies.index(cluster.bookie(wh.ensemble[1]))
        await cluster.stop_bookie(cluster.bookies[victim])
        await write(wh, 250, start=150)
        await bounded(wh.close())
        rh = await open_for_reading(cluster, wh.ledger_id, batch_read_entries_max=64)
        starts = sorted(rh.metadata.segments)
        assert len(starts) >= 2 and 0 < starts[1] <= 150
        fail_single_reads(cluster)
        batches = await batches_of(rh)
        check(batches, 0, 399, 64)
        for batch in batches:
            first, last = batch[0].entry_id, batch[-1].entry_id
            assert not any(first < start <= last for start in starts), (first, last, starts)


def test_plan_spans_cuts_at_segment_starts_and_picks_the_batchable_ones():
    a, b, c, d = "a:1", "b:1", "c:1", "d:1"
    meta = LedgerMetadata.new((a, b, c), 3, 2, DigestType.CRC32C, b"")
    meta = meta.with_new_segment(10, (a, d, c))
    spans = plan_spans(meta, 5, 20, Protocol.V2)
    assert [(s.first, s.last, s.bookies, s.batchable) for s in spans] == [
        (5, 9, (a, b, c), True),
        (10, 20, (a, d, c), True),
    ]
    assert [s.batchable for s in plan_spans(meta, 0, 3, Protocol.V3)] == [False]
    assert plan_spans(meta, 7, 6, Protocol.V2) == []
    striped = LedgerMetadata.new((a, b, c), 2, 2, DigestType.CRC32C, b"")
    assert [s.batchable for s in plan_spans(striped, 0, 9, Protocol.V2)] == [False]


# -- one bad bookie ----------------------------------------------------------------------------


@pytest.mark.parametrize("failure", ["error", "hang", "corrupt", "down"])
@on_virtual_time
async def test_a_failing_bookie_costs_a_retry_on_the_next_one(failure: str):
    async with MemoryCluster(3) as cluster:
        ledger_id = await closed_ledger(cluster, 600)
        rh = await open_for_reading(cluster, ledger_id, batch_read_entries_max=50)
        victim = cluster.bookies.index(cluster.bookie(rh.metadata.last_ensemble[0]))
        if failure == "error":
            cluster.fault(victim, BatchReadRequest, error=StatusCode.EIO)
        elif failure == "hang":
            cluster.fault(victim, BatchReadRequest, drop=True, serve_dropped=False)
        elif failure == "corrupt":
            cluster.fault(victim, BatchReadRequest, corrupt=True)
        else:
            await cluster.crash(victim, restart=False)
        fail_single_reads(cluster)  # so a retry is by batch, never the per-entry fallback
        before = cluster.bookies[victim].requests
        batches = await batches_of(rh)
        check(batches, 0, 599, 50)
        # Only the requests in flight when it failed went to the failed bookie (they time
        # out together): it is asked last for the rest of the read.
        assert cluster.bookies[victim].requests - before <= FAST.batch_reads_in_flight_max


@on_virtual_time
async def test_when_every_bookie_fails_the_batch_the_per_entry_path_reads_it():
    async with MemoryCluster(3) as cluster:
        ledger_id = await closed_ledger(cluster, 300)
        rh = await open_for_reading(cluster, ledger_id, batch_read_entries_max=100)
        for index in range(3):
            cluster.fault(index, BatchReadRequest, error=StatusCode.EIO)
        check(await batches_of(rh), 0, 299, 100)


@on_virtual_time
async def test_a_missing_entry_fails_after_the_entries_before_it():
    async with MemoryCluster(3) as cluster:
        ledger_id = await closed_ledger(cluster, 120)
        rh = await open_for_reading(cluster, ledger_id, batch_read_entries_max=50)
        seen: list[int] = []
        with pytest.raises(NoSuchEntryError):
            async for batch in rh.read_batches(0, 130, unconfirmed=True):
                seen.extend(e.entry_id for e in batch)
        assert seen == list(range(120))


@on_virtual_time
async def test_every_bookie_silent_is_bookie_unavailable():
    async with MemoryCluster(3) as cluster:
        ledger_id = await closed_ledger(cluster, 20)
        rh = await open_for_reading(cluster, ledger_id)
        for index in range(3):
            cluster.fault(index, None, drop=True, serve_dropped=False)
        with pytest.raises(BookieUnavailableError):
            await batches_of(rh)


# -- where the batch path does not apply -------------------------------------------------------


@pytest.mark.parametrize("case", ["striped", "v3"])
@on_virtual_time
async def test_striped_ledgers_and_v3_read_entry_by_entry_in_chunks(case: str):
    async with MemoryCluster(3) as cluster:
        quorums = (3, 2, 2) if case == "striped" else (3, 3, 2)
        ledger_id = await closed_ledger(cluster, 250, quorums)
        protocol = Protocol.V3 if case == "v3" else Protocol.V2
        rh = await open_for_reading(  # no speculative reads: the count below is exact
            cluster, ledger_id, protocol=protocol, batch_read_entries_max=40,
            speculative_read_timeout_ms=0,
        )  # fmt: skip
        before = sum(requests(cluster))
        check(await batches_of(rh), 0, 249, 40)
        assert sum(requests(cluster)) - before == 250  # one READ per entry, no BATCH_READ


# -- the LAC ---------------------------------------------------------------------------------


@on_virtual_time
async def test_beyond_the_lac_is_refused_unless_unconfirmed():
    async with MemoryCluster(3) as cluster:
        writer = await cluster.client(FAST)
        wh = await writer.create_ledger(3, 3, 2, password=b"pw")
        for i in range(30):  # one at a time: entry i carries the LAC i - 1
            await bounded(wh.append(payload(i)))
        reader = await cluster.client(FAST)
        rh = await bounded(reader.open_ledger(wh.ledger_id, b"pw", recovery=False))
        assert rh.last_add_confirmed == -1
        with pytest.raises(NoSuchEntryError):
            await batches_of(rh, 0, 29)
        with pytest.raises(NoSuchEntryError):
            await batches_of(rh, 0, 0)
        check(await batches_of(rh, 0, 29, unconfirmed=True), 0, 29, 1000)
        assert rh.last_add_confirmed == 28  # learnt from the bodies
        check(await batches_of(rh), 0, 28, 1000)
        with pytest.raises(NoSuchEntryError):
            await batches_of(rh, 5, 3)  # a bad range


# -- short answers -----------------------------------------------------------------------------


@pytest.mark.parametrize("limit", [{"batch_read_bytes_max": 1000}, {"batch_read_entries_max": 7}])
@on_virtual_time
async def test_short_answers_continue_where_the_bookie_stopped(limit: dict[str, int]):
    async with MemoryCluster(3, bookie_options=limit) as cluster:
        ledger_id = await closed_ledger(cluster, 500)
        rh = await open_for_reading(cluster, ledger_id)
        fail_single_reads(cluster)
        before = sum(requests(cluster))
        batches = await batches_of(rh)
        check(batches, 0, 499, 7)  # bodies are about 140 bytes: 7 fit in 1000
        assert sum(requests(cluster)) - before == len(batches)  # no request asked twice


@on_virtual_time
async def test_client_limits_bound_each_request():
    async with MemoryCluster(3) as cluster:
        ledger_id = await closed_ledger(cluster, 200)
        rh = await open_for_reading(cluster, ledger_id, batch_read_bytes_max=1400)
        fail_single_reads(cluster)
        check(await batches_of(rh), 0, 199, 10)


# -- lifecycle and configuration ----------------------------------------------------------------


@on_virtual_time
async def test_leaving_early_cancels_the_requests_in_flight():
    async with MemoryCluster(3) as cluster:
        ledger_id = await closed_ledger(cluster, 400)
        rh = await open_for_reading(cluster, ledger_id, batch_read_entries_max=20)
        for index in range(3):  # each bookie answers its first request at once, then late:
            cluster.fault(index, BatchReadRequest, delay_s=30, skip=1)  # the rest in flight
        tasks_before = asyncio.all_tasks()
        batches = rh.read_batches(0)
        async with contextlib.aclosing(batches):
            first = await bounded(anext(batches))
            assert cluster.requests_in_flight() > 0  # the next batches were asked for
        assert [e.entry_id for e in first] == list(range(20))
        left = {t for t in asyncio.all_tasks() - tasks_before if not t.done()}
        assert left  # the requests in flight, being cancelled
        await bounded(asyncio.gather(*left, return_exceptions=True))
        assert all(t.cancelled() for t in left)  # nothing left running on its own
        # leaving cancelled the requests that would have waited 30 s for their answers
        await bounded(no_requests_in_flight(cluster))


@pytest.mark.parametrize(
    "fields",
    [
        {"batch_read_entries_max": 0},
        {"batch_read_bytes_max": -1},
        {"batch_reads_in_flight_max": 0},
        {"batch_read_bytes_max": 5 * 1024 * 1024},
    ],
)
def test_batch_limits_are_validated(fields: dict[str, int]):
    with pytest.raises(ConfigError):
        ClientConfig(**fields)
