"""Further BookKeeper client scenarios (§3 of the reference) on the in-memory cluster.

Rows covered: 5 (LedgerCloseTest / LedgerClose2Test), 8 (add quorum timeout), 12-14 and
acceptance (f) (piggybacked, long-polled and explicit LAC), 16 (reads with failed bookies,
missing entries), 3 (LedgerRecovery2Test edge cases) and 22 (BookieFailureTest: opens and
readLastConfirmed with a bookie down). Every await that could hang is bounded, so a bug shows
up as a failure rather than a hung test run.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable
from typing import Any, TypeVar

import pytest

from bkeeper.client.bookkeeper import BookKeeper
from bkeeper.client.config import ClientConfig
from bkeeper.client.read_handle import ReadHandle
from bkeeper.client.write_handle import WriteHandle
from bkeeper.common.errors import (
    BKeeperError,
    BookieUnavailableError,
    LedgerClosedError,
    LedgerFencedError,
    NoSuchEntryError,
    NotEnoughBookiesError,
)
from bkeeper.meta.ledger_metadata import LedgerState
from bkeeper.testing.cluster import MemoryCluster
from bkeeper.testing.virtual_time import on_virtual_time
from bkeeper.wire.codes import Protocol, StatusCode
from bkeeper.wire.messages import AddRequest, ForceLedgerRequest, ReadRequest, WriteLacRequest

FAST = ClientConfig(add_timeout_ms=300, read_timeout_ms=300, speculative_read_timeout_ms=50)
LIMIT_S = 10.0  # no single step of a scenario may take longer than this

T = TypeVar("T")


async def bounded(awaitable: Awaitable[T], limit: float = LIMIT_S) -> T:
    return await asyncio.wait_for(awaitable, limit)


def now() -> float:
    return asyncio.get_running_loop().time()


async def read_all(handle: ReadHandle, first: int = 0, last: int | None = None) -> list[bytes]:
    async def collect() -> list[bytes]:
        return [e.data async for e in handle.read(first, last)]

    return await bounded(collect())


def index_of(cluster: MemoryCluster, bookie_id: str) -> int:
    return cluster.bookies.index(cluster.bookie(bookie_id))


async def new_ledger(cluster: MemoryCluster) -> tuple[BookKeeper, WriteHandle]:
    """A client (FAST) and a new E3/Qw3/Qa2 ledger written with password ``pw``."""
    bk = await cluster.client(FAST)
    return bk, await bk.create_ledger(3, 3, 2, password=b"pw")


async def write_entries(wh: WriteHandle, count: int, start: int = 0) -> None:
    for i in range(start, start + count):
        assert await bounded(wh.append(b"entry-%d" % i)) == i


def payloads(count: int, start: int = 0) -> list[bytes]:
    return [b"entry-%d" % i for i in range(start, start + count)]


async def metadata_of(bk: BookKeeper, ledger_id: int) -> Any:
    return await bounded(bk.ledger_metadata(ledger_id))


# -- row 5: close ----------------------------------------------------------------------------


@on_virtual_time
async def test_close_records_consistent_length_and_last_entry():  # row 5
    async with MemoryCluster(3) as cluster:
        bk, wh = await new_ledger(cluster)
        sizes = [(i * 7) % 23 + 1 for i in range(40)]
        futures = [await wh.append_async(b"x" * size) for size in sizes]
        assert await bounded(asyncio.gather(*futures)) == list(range(40))
        await bounded(wh.close())
        meta = await metadata_of(bk, wh.ledger_id)
        assert meta.state is LedgerState.CLOSED
        assert (meta.last_entry_id, meta.length) == (39, sum(sizes))
        assert wh.metadata.state is LedgerState.CLOSED and wh.metadata.length == sum(sizes)

        reader = await cluster.client(FAST)
        rh = await bounded(reader.open_ledger(wh.ledger_id, b"pw"))
        assert (rh.metadata.last_entry_id, rh.length) == (39, sum(sizes))
        entries = await bounded(_entries(rh))
        assert [len(e.data) for e in entries] == sizes
        # The cumulative length in each entry's header agrees with the closed length.
        assert entries[-1].length == sum(sizes)
        assert [e.length for e in entries] == [sum(sizes[: i + 1]) for i in range(40)]


async def _entries(rh: ReadHandle) -> list[Any]:
    return [e async for e in rh.read()]


@on_virtual_time
async def test_close_waits_for_pending_adds_on_slow_bookies():  # row 5
    async with MemoryCluster(3) as cluster:
        bk, wh = await new_ledger(cluster)
        await write_entries(wh, 2)
        # Two of three bookies are slow: every add needs one of them for Qa = 2.
        cluster.fault(1, AddRequest, delay_s=0.1)
        cluster.fault(2, AddRequest, delay_s=0.1)
        futures = [await wh.append_async(b"p%d" % i) for i in range(20)]
        assert not any(f.done() for f in futures)
        await bounded(wh.close())
        assert all(f.done() for f in futures), "close returned before its pending adds"
        assert [f.result() for f in futures] == list(range(2, 22))
        meta = await metadata_of(bk, wh.ledger_id)
        assert meta.state is LedgerState.CLOSED and meta.last_entry_id == 21
        assert meta.length == len(b"entry-0") * 2 + sum(len(b"p%d" % i) for i in range(20))


@on_virtual_time
async def test_close_during_an_ensemble_change_waits_for_the_resent_adds():  # rows 5, 6
    async with MemoryCluster(4) as cluster:
        bk, wh = await new_ledger(cluster)
        await write_entries(wh, 3)
        victim = index_of(cluster, wh.ensemble[1])
        await cluster.stop_bookie(cluster.bookies[victim])
        futures = [await wh.append_async(b"entry-%d" % i) for i in range(3, 13)]
        await bounded(wh.close())
        assert all(f.done() for f in futures)
        assert [f.result() for f in futures] == list(range(3, 13))
        meta = await metadata_of(bk, wh.ledger_id)
        assert meta.state is LedgerState.CLOSED and meta.last_entry_id == 12
        assert cluster.bookies[victim].bookie_id not in meta.last_ensemble
        rh = await bounded((await cluster.client(FAST)).open_ledger(wh.ledger_id, b"pw"))
        assert await read_all(rh) == payloads(13)


@on_virtual_time
async def test_close_during_unrecoverable_write_errors():  # row 5
    async with MemoryCluster(3) as cluster:
        bk, wh = await new_ledger(cluster)
        await write_entries(wh, 5)
        # No spare bookie: the failures cannot be repaired, the pending adds must fail.
        cluster.fault(1, AddRequest, error=StatusCode.EIO)
        cluster.fault(2, AddRequest, error=StatusCode.EIO)
        futures = [await wh.append_async(b"doomed-%d" % i) for i in range(10)]
        await bounded(wh.close())
        assert all(f.done() for f in futures)
        for future in futures:
            assert isinstance(future.exception(), NotEnoughBookiesError)
        meta = await metadata_of(bk, wh.ledger_id)
        assert meta.state is LedgerState.CLOSED
        assert (meta.last_entry_id, meta.length) == (4, len(b"".join(payloads(5))))
        cluster.heal(1)
        cluster.heal(2)
        rh = await bounded((await cluster.client(FAST)).open_ledger(wh.ledger_id, b"pw"))
        assert rh.metadata.last_entry_id == 4
        assert await read_all(rh) == payloads(5)


@on_virtual_time
async def test_adds_after_close_fail_and_double_close_is_safe():  # row 5
    async with MemoryCluster(3) as cluster:
        bk, wh = await new_ledger(cluster)
        await write_entries(wh, 3)
        await bounded(wh.close())
        closed_meta = await metadata_of(bk, wh.ledger_id)
        await bounded(wh.close())
        await bounded(wh.close())
        assert await metadata_of(bk, wh.ledger_id) == closed_meta
        with pytest.raises(LedgerClosedError):
            await bounded(wh.append(b"late"))
        with pytest.raises(LedgerClosedError):
            await bounded(wh.append_async(b"late"))
        assert wh.last_add_confirmed == 2
        meta = await metadata_of(bk, wh.ledger_id)
        assert (meta.state, meta.last_entry_id) == (LedgerState.CLOSED, 2)


@on_virtual_time
async def test_close_after_a_recovering_reader_closed_it_at_the_same_end():  # row 5
    async with MemoryCluster(3) as cluster:
        bk, wh = await new_ledger(cluster)
        await write_entries(wh, 5)
        reader = await cluster.client(FAST)
        rh = await bounded(reader.open_ledger(wh.ledger_id, b"pw"))
        assert rh.metadata.last_entry_id == 4
        # The writer never tried to add after the fencing: its close finds the ledger
        # CLOSED at its own LAC, which is success.
        await bounded(wh.close())
        assert wh.metadata.state is LedgerState.CLOSED
        meta = await metadata_of(bk, wh.ledger_id)
        assert (meta.state, meta.last_entry_id) == (LedgerState.CLOSED, 4)
        assert meta.length == rh.length
        with pytest.raises(LedgerClosedError):
            await bounded(wh.append(b"late"))


@on_virtual_time
async def test_close_after_someone_closed_it_at_a_different_end_raises():  # row 5
    async with MemoryCluster(3) as cluster:
        bk, wh = await new_ledger(cluster)
        await write_entries(wh, 5)
        store = (await cluster.client(FAST)).cluster.ledgers
        current = await store.read(wh.ledger_id)
        await store.write(wh.ledger_id, current.value.closed(2, 21), current.version)
        with pytest.raises(LedgerClosedError):
            await bounded(wh.close())
        meta = await metadata_of(bk, wh.ledger_id)  # the other close stands
        assert (meta.state, meta.last_entry_id, meta.length) == (LedgerState.CLOSED, 2, 21)


@on_virtual_time
async def test_close_while_in_recovery_raises_fenced():  # row 5
    async with MemoryCluster(3) as cluster:
        bk, wh = await new_ledger(cluster)
        await write_entries(wh, 5)
        store = (await cluster.client(FAST)).cluster.ledgers
        current = await store.read(wh.ledger_id)
        await store.write(wh.ledger_id, current.value.in_recovery(), current.version)
        with pytest.raises(LedgerFencedError):
            await bounded(wh.close())
        meta = await metadata_of(bk, wh.ledger_id)  # the writer must not close it
        assert meta.state is LedgerState.IN_RECOVERY
        # The recovering side finishes: the ledger ends at the writer's last entry.
        rh = await bounded((await cluster.client(FAST)).open_ledger(wh.ledger_id, b"pw"))
        assert rh.metadata.last_entry_id == 4
        assert await read_all(rh) == payloads(5)


# -- row 8: adds that cannot reach the ack quorum ---------------------------------------------


@pytest.mark.parametrize("protocol", [Protocol.V2, Protocol.V3])
@pytest.mark.parametrize(("bookies", "hung"), [(3, (1, 2)), (4, (0, 1, 2, 3))])
@on_virtual_time
async def test_add_that_cannot_reach_ack_quorum_fails_in_bounded_time(
    bookies: int, hung: tuple[int, ...], protocol: Protocol
):  # row 8
    async with MemoryCluster(bookies) as cluster:
        bk = await cluster.client(dataclasses.replace(FAST, protocol=protocol))
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        assert await bounded(wh.append(b"ok")) == 0
        for index in hung:
            cluster.fault(index, AddRequest, drop=True, serve_dropped=False)
        futures = [await wh.append_async(b"stuck-%d" % i) for i in range(5)]
        # they fail (bounded() bounds the wait generously), not hang
        results = await bounded(asyncio.gather(*futures, return_exceptions=True))
        assert all(isinstance(r, NotEnoughBookiesError) for r in results), results
        assert wh.last_add_confirmed == 0
        # Later adds fail at once with the same error.
        started = now()
        with pytest.raises(NotEnoughBookiesError):
            await bounded(wh.append(b"later"))
        assert now() - started < 0.5
        # The ledger can still be sealed at the last acknowledged entry.
        await bounded(wh.close())
        meta = await metadata_of(bk, wh.ledger_id)
        assert (meta.state, meta.last_entry_id, meta.length) == (LedgerState.CLOSED, 0, 2)


# -- rows 12-14, (f): LAC ---------------------------------------------------------------------


@on_virtual_time
async def test_without_explicit_lac_reader_sees_last_minus_one():  # row 12
    async with MemoryCluster(3) as cluster:
        wh = await (await cluster.client(FAST)).create_ledger(3, 3, 2, password=b"pw")
        await write_entries(wh, 10)
        rh = await bounded(
            (await cluster.client(FAST)).open_ledger(wh.ledger_id, b"pw", recovery=False)
        )
        assert rh.last_add_confirmed == -1
        assert await bounded(rh.read_last_add_confirmed()) == 8
        await asyncio.sleep(0.2)  # nothing pushes the LAC of the last entry
        assert await bounded(rh.read_explicit_last_add_confirmed()) == 8
        assert await bounded(rh.read_last_add_confirmed()) == 8
        assert await read_all(rh) == payloads(9)
        with pytest.raises(NoSuchEntryError):
            await read_all(rh, 0, 9)


@on_virtual_time
async def test_explicit_lac_lets_the_reader_reach_the_last_entry():  # row 12, (f)
    async with MemoryCluster(3) as cluster:
        config = ClientConfig(
            add_timeout_ms=300,
            read_timeout_ms=300,
            speculative_read_timeout_ms=50,
            explicit_lac_interval_ms=20,
        )
        wh = await (await cluster.client(config)).create_ledger(3, 3, 2, password=b"pw")
        await write_entries(wh, 10)
        rh = await bounded(
            (await cluster.client(FAST)).open_ledger(wh.ledger_id, b"pw", recovery=False)
        )
        deadline = now() + 5
        while (lac := await bounded(rh.read_explicit_last_add_confirmed())) < 9:
            assert lac == 8 and now() < deadline, f"explicit LAC stuck at {lac}"
            await asyncio.sleep(0.02)
        assert lac == 9 and rh.last_add_confirmed == 9
        assert await read_all(rh) == payloads(10)
        # A fresh reader sees it too, also through the plain LAC read.
        other = await bounded(
            (await cluster.client(FAST)).open_ledger(wh.ledger_id, b"pw", recovery=False)
        )
        assert await bounded(other.read_explicit_last_add_confirmed()) == 9
        # More entries: the explicit LAC follows.
        await write_entries(wh, 5, start=10)
        deadline = now() + 5
        while await bounded(rh.read_explicit_last_add_confirmed()) < 14:
            assert now() < deadline, "explicit LAC did not follow new entries"
            await asyncio.sleep(0.02)
        assert await read_all(rh, 10) == payloads(5, start=10)


@on_virtual_time
async def test_explicit_lac_goes_out_as_the_writer_goes_idle():  # row 12, (f)
    """The interval bounds how often, not how late: the LAC of a writer that goes idle
    reaches a tailing reader at once, not an interval later (here the first time it goes
    idle: the next LAC would wait out the minute)."""
    async with MemoryCluster(3) as cluster:
        config = ClientConfig(
            add_timeout_ms=300, read_timeout_ms=300, explicit_lac_interval_ms=60_000
        )
        wh = await (await cluster.client(config)).create_ledger(3, 3, 2, password=b"pw")
        assert await bounded(wh.append_many(payloads(3))) == range(3)  # idle once, at 2
        rh = await bounded(
            (await cluster.client(FAST)).open_ledger(wh.ledger_id, b"pw", recovery=False)
        )
        assert await bounded(rh.wait_last_add_confirmed(1, timeout_ms=5_000)) == 2
        assert (await bounded(rh.read_entry(2))).data == payloads(3)[2]
        await wh.close()


@on_virtual_time
async def test_explicit_lac_survives_bookie_restarts():  # row 12
    async with MemoryCluster(3) as cluster:
        config = ClientConfig(add_timeout_ms=300, read_timeout_ms=300, explicit_lac_interval_ms=20)
        wh = await (await cluster.client(config)).create_ledger(3, 3, 2, password=b"pw")
        await write_entries(wh, 6)
        rh = await bounded(
            (await cluster.client(FAST)).open_ledger(wh.ledger_id, b"pw", recovery=False)
        )
        deadline = now() + 5
        while await bounded(rh.read_explicit_last_add_confirmed()) < 5:
            assert now() < deadline, "explicit LAC never arrived"
            await asyncio.sleep(0.02)
        for index in range(3):
            await cluster.crash(index, restart=True)
        fresh = await bounded(
            (await cluster.client(FAST)).open_ledger(wh.ledger_id, b"pw", recovery=False)
        )
        assert await bounded(fresh.read_explicit_last_add_confirmed()) == 5


@pytest.mark.parametrize("status", [StatusCode.EIO, StatusCode.EUA])
@on_virtual_time
async def test_an_explicit_lac_a_bookie_refused_is_sent_again(status: StatusCode):  # row 12
    """A bookie that answers the writer's explicit LAC with an error status did not take
    it: the writer sends it again (it counted the answer as sent, and an idle writer's last
    entry stayed out of every tailing reader's reach until its next append)."""
    async with MemoryCluster(3) as cluster:
        config = ClientConfig(add_timeout_ms=300, read_timeout_ms=300, explicit_lac_interval_ms=20)
        faults = [cluster.fault(index, WriteLacRequest, error=status) for index in range(3)]
        wh = await (await cluster.client(config)).create_ledger(3, 3, 2, password=b"pw")
        await write_entries(wh, 6)
        refused = sum(f.applied for f in faults)
        deadline = now() + 5
        while sum(f.applied for f in faults) < refused + 6:  # two more rounds, idle at 5
            assert now() < deadline, "the writer did not send its explicit LAC again"
            await asyncio.sleep(0.01)
        for index in range(3):
            cluster.heal(index)
        rh = await bounded(
            (await cluster.client(FAST)).open_ledger(wh.ledger_id, b"pw", recovery=False)
        )
        deadline = now() + 5
        while (lac := await bounded(rh.read_explicit_last_add_confirmed())) < 5:
            assert now() < deadline, f"explicit LAC stuck at {lac}"
            await asyncio.sleep(0.02)
        assert lac == 5
        await wh.close()


@on_virtual_time
async def test_an_explicit_lac_a_bookie_never_answers_does_not_stop_the_next_ones():  # row 12
    """A WriteLac request a bookie never answers (lost on a connection that stays up) is
    given up after ``add_timeout_ms`` and sent again: the writer waited for the answer for
    ever, and sent no explicit LAC again for the rest of the ledger's life, so once it went
    idle its last entry stayed out of every tailing reader's reach."""
    async with MemoryCluster(3) as cluster:
        config = ClientConfig(add_timeout_ms=300, read_timeout_ms=300, explicit_lac_interval_ms=20)
        lost = cluster.fault(0, WriteLacRequest, drop=True, serve_dropped=False)
        wh = await (await cluster.client(config)).create_ledger(3, 3, 2, password=b"pw")
        await write_entries(wh, 6)
        deadline = now() + 5
        while not lost.applied:
            assert now() < deadline, "the writer sent no explicit LAC"
            await asyncio.sleep(0.01)
        cluster.heal(0)
        await write_entries(wh, 4, start=6)
        rh = await bounded(
            (await cluster.client(FAST)).open_ledger(wh.ledger_id, b"pw", recovery=False)
        )
        deadline = now() + 5
        while (lac := await bounded(rh.read_explicit_last_add_confirmed())) < 9:
            assert now() < deadline, f"explicit LAC stuck at {lac}"
            await asyncio.sleep(0.02)
        assert lac == 9
        await wh.close()


@on_virtual_time
async def test_a_force_a_bookie_never_answers_fails_after_the_add_timeout():
    """``force`` waited for ever on a FORCE_LEDGER request a bookie never answered."""
    async with MemoryCluster(3) as cluster:
        config = ClientConfig(add_timeout_ms=300, read_timeout_ms=300)
        wh = await (await cluster.client(config)).create_ledger(3, 3, 2, password=b"pw")
        await write_entries(wh, 3)
        assert await bounded(wh.force()) == 2
        cluster.fault(1, ForceLedgerRequest, drop=True, serve_dropped=False)
        with pytest.raises(BookieUnavailableError, match="force: a bookie did not answer"):
            await bounded(wh.force())


@on_virtual_time
async def test_long_poll_returns_promptly_on_append_and_current_value_on_timeout():  # row 13
    async with MemoryCluster(3) as cluster:
        wh = await (await cluster.client(FAST)).create_ledger(3, 3, 2, password=b"pw")
        await write_entries(wh, 10)
        rh = await bounded(
            (await cluster.client(FAST)).open_ledger(wh.ledger_id, b"pw", recovery=False)
        )
        assert await bounded(rh.read_last_add_confirmed()) == 8
        # Already past the previous value: no waiting at all.
        started = now()
        assert await bounded(rh.wait_last_add_confirmed(5, 5_000)) == 8
        assert now() - started < 0.5

        async def append_later() -> None:
            await asyncio.sleep(0.1)
            await wh.append(b"entry-10")

        appending = asyncio.create_task(append_later())
        started = now()
        assert await bounded(rh.wait_last_add_confirmed(8, 5_000)) == 9
        assert 0.05 <= now() - started < 2.0
        await bounded(appending)

        # Nothing new: the poll runs to its timeout and returns the value it had.
        started = now()
        assert await bounded(rh.wait_last_add_confirmed(9, 300)) == 9
        assert 0.25 <= now() - started < 2.0
        assert rh.last_add_confirmed == 9
        assert await read_all(rh) == payloads(10)


@on_virtual_time
async def test_long_poll_with_a_bookie_down():  # row 13
    async with MemoryCluster(4) as cluster:
        wh = await (await cluster.client(FAST)).create_ledger(3, 3, 2, password=b"pw")
        await write_entries(wh, 5)
        rh = await bounded(
            (await cluster.client(FAST)).open_ledger(wh.ledger_id, b"pw", recovery=False)
        )
        assert await bounded(rh.read_last_add_confirmed()) == 3
        await cluster.crash(index_of(cluster, wh.ensemble[0]), restart=False)
        waiting = asyncio.create_task(rh.wait_last_add_confirmed(3, 5_000))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        started = now()
        await bounded(wh.append(b"entry-5"))  # carries LAC 4 to the surviving bookies
        assert await bounded(waiting) == 4
        assert now() - started < 2.0
        # And a poll with nothing new still ends at its timeout with a bookie down.
        started = now()
        assert await bounded(rh.wait_last_add_confirmed(4, 300)) == 4
        assert now() - started < 2.0


@on_virtual_time
async def test_piggybacked_lac_advances_as_the_reader_reads():  # row 14, (f)
    async with MemoryCluster(3) as cluster:
        wh = await (await cluster.client(FAST)).create_ledger(3, 3, 2, password=b"pw")
        await write_entries(wh, 20)
        rh = await bounded(
            (await cluster.client(FAST)).open_ledger(wh.ledger_id, b"pw", recovery=False)
        )
        assert rh.last_add_confirmed == -1
        with pytest.raises(NoSuchEntryError):  # nothing is known to be confirmed yet
            await read_all(rh, 0, 0)
        seen: list[int] = []

        async def walk(first: int, last: int) -> None:
            async for entry in rh.read_unconfirmed(first, last):
                assert entry.lac == entry.entry_id - 1
                seen.append(rh.last_add_confirmed)

        await bounded(walk(0, 9))
        assert seen == [max(-1, e - 1) for e in range(10)]
        assert rh.last_add_confirmed == 8
        assert await read_all(rh, 0, 8) == payloads(9)
        await bounded(walk(10, 19))
        assert rh.last_add_confirmed == 18
        assert await read_all(rh) == payloads(19)
        with pytest.raises(NoSuchEntryError):
            await read_all(rh, 0, 19)


# -- row 16: reads with failed bookies, missing entries --------------------------------------


@pytest.mark.parametrize("failure", ["crash", "hang"])
@on_virtual_time
async def test_reads_with_a_failed_bookie_return_every_entry(failure: str):  # row 16
    async with MemoryCluster(3) as cluster:
        _, wh = await new_ledger(cluster)
        futures = [await wh.append_async(b"entry-%d" % i) for i in range(60)]
        await bounded(asyncio.gather(*futures))
        await bounded(wh.close())
        rh = await bounded((await cluster.client(FAST)).open_ledger(wh.ledger_id, b"pw"))
        # Fail the first replica of every read of entry 0 (and of a third of the others).
        victim = index_of(cluster, rh.metadata.last_ensemble[0])
        if failure == "crash":
            await cluster.crash(victim, restart=False)
        else:
            cluster.fault(victim, ReadRequest, drop=True, serve_dropped=False)
        started = now()
        assert await read_all(rh) == payloads(60)
        assert (await bounded(rh.read_entry(0))).data == b"entry-0"
        assert now() - started < 5.0


@on_virtual_time
async def test_read_of_a_missing_entry_fails_fast():  # row 16
    async with MemoryCluster(3) as cluster:
        _, wh = await new_ledger(cluster)
        await write_entries(wh, 5)
        await bounded(wh.close())
        rh = await bounded((await cluster.client(FAST)).open_ledger(wh.ledger_id, b"pw"))
        started = now()
        with pytest.raises(NoSuchEntryError):
            await bounded(rh.read_entry(7))
        with pytest.raises(NoSuchEntryError):  # beyond the last entry of a closed ledger
            await read_all(rh, 0, 7)
        assert now() - started < 1.0


@on_virtual_time
async def test_read_of_a_missing_entry_with_a_crashed_bookie_says_no_such_entry():  # row 16
    async with MemoryCluster(3) as cluster:
        _, wh = await new_ledger(cluster)
        await write_entries(wh, 5)
        await bounded(wh.close())
        rh = await bounded((await cluster.client(FAST)).open_ledger(wh.ledger_id, b"pw"))
        # Entry 7's write set starts at ensemble position 7 % 3 = 1: that replica is down.
        await cluster.crash(index_of(cluster, rh.metadata.last_ensemble[1]), restart=False)
        started = now()
        # Two of three replicas (more than Qw - Qa) say they do not have it: it was never
        # acknowledged, so the answer is "no such entry", not "bookie unavailable".
        with pytest.raises(NoSuchEntryError):
            await bounded(rh.read_entry(7))
        assert now() - started < 1.0
        assert (await bounded(rh.read_entry(4))).data == b"entry-4"


@on_virtual_time
async def test_read_with_every_replica_silent_fails_with_a_bkeeper_error():  # row 16
    async with MemoryCluster(3) as cluster:
        _, wh = await new_ledger(cluster)
        await write_entries(wh, 3)
        await bounded(wh.close())
        rh = await bounded((await cluster.client(FAST)).open_ledger(wh.ledger_id, b"pw"))
        for index in range(3):
            cluster.fault(index, ReadRequest, drop=True, serve_dropped=False)
        started = now()
        with pytest.raises(BookieUnavailableError):
            await bounded(rh.read_entry(1))
        assert now() - started < 2.0


# -- row 3: recovery edge cases ---------------------------------------------------------------


@on_virtual_time
async def test_recovery_with_every_bookie_down_fails_cleanly_then_succeeds():  # row 3
    async with MemoryCluster(3) as cluster:
        _, wh = await new_ledger(cluster)
        await write_entries(wh, 5)
        for bookie in cluster.bookies:
            await cluster.stop_bookie(bookie)
        reader = await cluster.client(FAST)
        started = now()
        with pytest.raises(BookieUnavailableError):
            await bounded(reader.open_ledger(wh.ledger_id, b"pw"))
        assert now() - started < 3.0
        meta = await metadata_of(reader, wh.ledger_id)
        assert meta.state is LedgerState.IN_RECOVERY  # never CLOSED at a guessed end
        # Once the bookies are back a recovery finishes the job.
        for bookie in cluster.bookies:
            await cluster.start_bookie(bookie)
        rh = await bounded(reader.open_ledger(wh.ledger_id, b"pw"))
        assert rh.metadata.state is LedgerState.CLOSED and rh.metadata.last_entry_id == 4
        assert await read_all(rh) == payloads(5)
        with pytest.raises(LedgerFencedError):
            await bounded(wh.append(b"late"))


@on_virtual_time
async def test_recovery_with_every_bookie_hung_fails_in_bounded_time():  # row 3
    async with MemoryCluster(3) as cluster:
        _, wh = await new_ledger(cluster)
        await write_entries(wh, 5)
        for index in range(3):
            cluster.fault(index, None, drop=True, serve_dropped=False)
        reader = await cluster.client(FAST)
        started = now()
        with pytest.raises(BookieUnavailableError):
            await bounded(reader.open_ledger(wh.ledger_id, b"pw"))
        assert now() - started < 3.0


@on_virtual_time
async def test_metadata_closed_by_someone_else_during_recovery():  # row 3
    async with MemoryCluster(3) as cluster:
        bk, wh = await new_ledger(cluster)
        await write_entries(wh, 10)
        # Slow reads keep the recovery busy long enough for another client to close first.
        for index in range(3):
            cluster.fault(index, ReadRequest, delay_s=0.2)
        recoverer = await cluster.client(ClientConfig(read_timeout_ms=2_000))
        opening = asyncio.create_task(recoverer.open_ledger(wh.ledger_id, b"pw"))
        store = (await cluster.client(FAST)).cluster.ledgers
        deadline = now() + 5
        while (current := await store.read(wh.ledger_id)).value.state is LedgerState.OPEN:
            assert now() < deadline, "recovery never set IN_RECOVERY"
            await asyncio.sleep(0.01)
        assert current.value.state is LedgerState.IN_RECOVERY
        length_7 = len(b"".join(payloads(8)))
        await store.write(wh.ledger_id, current.value.closed(7, length_7), current.version)
        rh = await bounded(opening)
        assert not opening.cancelled()
        # The recovery keeps the other client's close as it is.
        assert (rh.metadata.state, rh.metadata.last_entry_id) == (LedgerState.CLOSED, 7)
        assert rh.length == length_7 and rh.last_add_confirmed == 7
        meta = await metadata_of(bk, wh.ledger_id)
        assert (meta.last_entry_id, meta.length) == (7, length_7)
        for index in range(3):
            cluster.heal(index)
        assert await read_all(rh) == payloads(8)


@on_virtual_time
async def test_recovery_of_an_empty_ledger():  # rows 2, 3
    async with MemoryCluster(3) as cluster:
        bk, wh = await new_ledger(cluster)
        rh = await bounded((await cluster.client(FAST)).open_ledger(wh.ledger_id, b"pw"))
        assert rh.metadata.state is LedgerState.CLOSED
        assert (rh.metadata.last_entry_id, rh.length, rh.last_add_confirmed) == (-1, 0, -1)
        assert await read_all(rh) == []
        meta = await metadata_of(bk, wh.ledger_id)
        assert (meta.state, meta.last_entry_id, meta.length) == (LedgerState.CLOSED, -1, 0)
        # The bookies were fenced although they had never seen the ledger.
        with pytest.raises(LedgerFencedError):
            await bounded(wh.append(b"late"))
        meta = await metadata_of(bk, wh.ledger_id)
        assert (meta.last_entry_id, meta.length) == (-1, 0)


@on_virtual_time
async def test_recovery_of_a_ledger_with_exactly_one_entry():  # rows 2, 3
    async with MemoryCluster(3) as cluster:
        _, wh = await new_ledger(cluster)
        assert await bounded(wh.append(b"only")) == 0
        patient = ClientConfig(read_timeout_ms=5_000)  # under load 300 ms was a flake
        rh = await bounded((await cluster.client(patient)).open_ledger(wh.ledger_id, b"pw"))
        assert (rh.metadata.last_entry_id, rh.length) == (0, 4)
        assert await read_all(rh) == [b"only"]
        with pytest.raises(LedgerFencedError):
            await bounded(wh.append(b"late"))


@on_virtual_time
async def test_recovery_of_one_entry_with_an_unacknowledged_second():  # rows 2, 3
    async with MemoryCluster(3) as cluster:
        _, wh = await new_ledger(cluster)
        assert await bounded(wh.append(b"only")) == 0
        for index in range(3):  # entry 1 reaches no bookie at all
            cluster.fault(index, AddRequest, drop=True, serve_dropped=False)
        pending = await wh.append_async(b"lost")
        await asyncio.sleep(0.02)
        for index in range(3):
            cluster.heal(index)
        patient = ClientConfig(read_timeout_ms=5_000)  # under load 300 ms was a flake
        rh = await bounded((await cluster.client(patient)).open_ledger(wh.ledger_id, b"pw"))
        assert (rh.metadata.last_entry_id, rh.length) == (0, 4)
        assert await read_all(rh) == [b"only"]
        with pytest.raises(BKeeperError):
            await bounded(pending)


# -- row 22: bookie failures during writes, opens, readLastConfirmed -------------------------


@pytest.mark.parametrize("spare", [True, False])
@on_virtual_time
async def test_open_with_and_without_recovery_after_a_crash_during_writes(spare: bool):  # row 22
    async with MemoryCluster(4 if spare else 3) as cluster:
        _, wh = await new_ledger(cluster)
        futures = [await wh.append_async(b"entry-%d" % i) for i in range(100)]
        await bounded(asyncio.gather(*futures[:40]))
        await cluster.crash(index_of(cluster, wh.ensemble[2]), restart=False)
        results = await bounded(asyncio.gather(*futures, return_exceptions=True))
        acked = [r for r in results if not isinstance(r, BaseException)]
        assert acked == list(range(len(acked))) and len(acked) >= 40
        if spare:  # the writer replaced the crashed bookie and lost nothing
            assert len(acked) == 100
            assert await bounded(wh.append(b"entry-100")) == 100  # carries LAC 99
            last_acked = 100
        else:  # no replacement: the writer went on degraded, and lost nothing either
            assert len(acked) == 100
            last_acked = 99

        plain = await bounded(
            (await cluster.client(FAST)).open_ledger(wh.ledger_id, b"pw", recovery=False)
        )
        assert plain.metadata.state is LedgerState.OPEN
        lac = await bounded(plain.read_last_add_confirmed())
        assert lac <= last_acked
        if spare:
            assert lac == 99
        assert await read_all(plain) == payloads(lac + 1)

        recovered = await bounded((await cluster.client(FAST)).open_ledger(wh.ledger_id, b"pw"))
        last = recovered.metadata.last_entry_id
        assert last >= last_acked  # never fewer than what was acknowledged
        assert last < 101
        assert await read_all(recovered) == payloads(last + 1)
        with pytest.raises(BKeeperError):
            await bounded(wh.append(b"late"))


@pytest.mark.parametrize("failure", ["stop", "hang"])
@on_virtual_time
async def test_read_last_confirmed_does_not_deadlock_with_a_bookie_down(failure: str):  # row 22
    async with MemoryCluster(3) as cluster:
        wh = await (await cluster.client(FAST)).create_ledger(3, 3, 2, password=b"pw")
        await write_entries(wh, 10)
        rh = await bounded(
            (await cluster.client(FAST)).open_ledger(wh.ledger_id, b"pw", recovery=False)
        )
        assert await bounded(rh.read_last_add_confirmed()) == 8
        victim = index_of(cluster, wh.ensemble[0])
        if failure == "stop":
            await cluster.stop_bookie(cluster.bookies[victim])
        else:
            cluster.fault(victim, None, drop=True, serve_dropped=False)
        started = now()
        lacs = await bounded(asyncio.gather(*(rh.read_last_add_confirmed() for _ in range(10))))
        assert lacs == [8] * 10
        for _ in range(3):
            assert await bounded(rh.read_last_add_confirmed()) == 8
        assert now() - started < 5.0
        # Back again (a restart means new connections): still no deadlock.
        if failure == "stop":
            await cluster.start_bookie(cluster.bookies[victim])
        else:
            cluster.heal(victim)
        assert await bounded(rh.read_last_add_confirmed()) == 8
        # With two of three down the LAC cannot be known: an error, not a hang.
        for index in range(3):
            if index != victim:
                cluster.fault(index, None, drop=True, serve_dropped=False)
                break
        await cluster.stop_bookie(cluster.bookies[victim])
        started = now()
        with pytest.raises(BookieUnavailableError):
            await bounded(rh.read_last_add_confirmed())
        assert now() - started < 2.0


@on_virtual_time
async def test_a_long_poll_on_a_ledger_no_bookie_holds_yet_waits_out_its_time() -> None:
    """A new ledger with no entry yet: its bookies answer a long poll at once (no such
    ledger). The poll took that for "held, and timed out" and returned at once, so a tailing
    reader (a state machine's follower of an idle leader) polled again at once, without
    end: a spin, which on virtual time never let the clock move."""
    async with MemoryCluster(3) as cluster:
        writer = await cluster.client(FAST)
        wh = await writer.create_ledger(3, 3, 2, password=b"pw")
        rh = await (await cluster.client(FAST)).open_ledger(wh.ledger_id, b"pw", recovery=False)
        loop = asyncio.get_running_loop()
        requests = sum(b.requests for b in cluster.bookies)
        started = loop.time()
        assert await rh.wait_last_add_confirmed(-1, timeout_ms=2_000) == -1
        assert loop.time() - started >= 2.0
        assert sum(b.requests for b in cluster.bookies) - requests <= 6  # one poll, one retry
