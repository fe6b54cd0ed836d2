"""Degraded writes on the in-memory cluster (docs/client.md, "No spare: degraded writes").

Three bookies, E3/Qw3/Qa2: one lost, no spare. Before, the writer failed with
``NotEnoughBookiesError`` although the two left make the ack quorum; now it goes on, and
moves to a fourth bookie once one registers. Closing, recovery by another client, reads,
the explicit LAC and force work with the bookie down; a second loss still fails the writer.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging

import pytest

from bkeeper.autorecovery.config import AutoRecoveryConfig
from bkeeper.autorecovery.repair import replicate_ledger
from bkeeper.autorecovery.replicate import BlockKind
from bkeeper.client.config import ClientConfig
from bkeeper.client.write_handle import WriteHandle
from bkeeper.common.errors import LedgerFencedError, NotEnoughBookiesError
from bkeeper.meta.ledger_metadata import LedgerState
from bkeeper.storage import MemoryFileSystem
from bkeeper.testing.cluster import MemoryBookie, MemoryCluster
from bkeeper.testing.virtual_time import on_virtual_time
from bkeeper.wire.codes import Protocol
from tests.client.test_quarantine import vanish_keeping_registration
from tests.client.test_scenarios_more import bounded, read_all

FAST = ClientConfig(
    add_timeout_ms=300,
    read_timeout_ms=300,
    speculative_read_timeout_ms=50,
    timeout_check_interval_ms=20,
    degraded_retry_interval_ms=100,
)


def payload(i: int) -> bytes:
    return b"entry-%d" % i


async def append_range(wh: WriteHandle, first: int, last: int) -> None:
    for i in range(first, last):
        assert await bounded(wh.append(payload(i))) == i


async def until(condition, what: str, limit_s: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    async def wait() -> None:
        while not condition():
            await asyncio.sleep(0.01)

    try:
        await asyncio.wait_for(wait(), limit_s)
    except TimeoutError:
        raise AssertionError(f"{what} within {limit_s} s") from None


async def add_bookie(cluster: MemoryCluster) -> MemoryBookie:
    bookie = MemoryBookie(f"bookie-{len(cluster.bookies)}:3181", MemoryFileSystem())
    cluster.bookies.append(bookie)
    await cluster.start_bookie(bookie)
    return bookie


@pytest.mark.parametrize("protocol", [Protocol.V2, Protocol.V3], ids=["v2", "v3"])
@on_virtual_time
async def test_a_lost_bookie_with_no_spare_does_not_stop_the_writer(
    protocol: Protocol, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "bkeeper.client.write_handle")
    async with MemoryCluster(3) as cluster:
        bk = await cluster.client(dataclasses.replace(FAST, protocol=protocol, metrics=True))
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        first = wh.ensemble
        await append_range(wh, 0, 10)
        lost = cluster.bookie(first[1])
        await cluster.stop_bookie(lost)
        await append_range(wh, 10, 60)  # before: NotEnoughBookiesError
        assert wh.degraded == {lost.bookie_id}
        assert wh.metadata.segments == {0: first}, "no segment written while degraded"
        await asyncio.sleep(0.5)  # searches for a replacement find none: nothing changes
        await append_range(wh, 60, 70)
        assert wh.metadata.segments == {0: first}
        spare = await add_bookie(cluster)
        await until(lambda: not wh.degraded, "the writer replaced the bookie down")
        await append_range(wh, 70, 80)
        assert wh.ensemble == (first[0], spare.bookie_id, first[2])
        assert lost.bookie_id not in wh.metadata.last_ensemble
        await bounded(wh.close())
        assert wh.metadata.last_entry_id == 79
        warnings = [r for r in caplog.records if "writing degraded" in r.getMessage()]
        assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
        assert lost.bookie_id in warnings[0].getMessage()
        assert sum("degraded writes ended" in r.getMessage() for r in caplog.records) == 1
        text = bk.metrics_text().decode()
        assert "bkeeper_client_writers_degraded_total 1.0" in text
        assert "bkeeper_client_writers_degraded_healed_total 1.0" in text
    # (the cluster closed: read back on one of its own below)


@on_virtual_time
async def test_everything_acknowledged_reads_back_after_the_move() -> None:
    async with MemoryCluster(3) as cluster:
        bk = await cluster.client(FAST)
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        await append_range(wh, 0, 5)
        vanish_keeping_registration(cluster.bookie(wh.ensemble[2]))  # killed, still registered
        await append_range(wh, 5, 20)
        assert wh.degraded == {wh.ensemble[2]}
        await add_bookie(cluster)
        await until(lambda: not wh.degraded, "the writer replaced the bookie down")
        await append_range(wh, 20, 25)
        await bounded(wh.close())
        assert len(wh.metadata.segments) == 2
        reader = await cluster.client(FAST)
        rh = await bounded(reader.open_ledger(wh.ledger_id, b"pw"))
        assert await read_all(rh) == [payload(i) for i in range(25)]


@on_virtual_time
async def test_close_recovery_reads_explicit_lac_and_force_with_a_bookie_down() -> None:
    config = dataclasses.replace(FAST, protocol=Protocol.V3, explicit_lac_interval_ms=20)
    async with MemoryCluster(3) as cluster:
        bk = await cluster.client(config)
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        await append_range(wh, 0, 3)
        vanish_keeping_registration(cluster.bookie(wh.ensemble[0]))
        await append_range(wh, 3, 10)
        assert wh.degraded
        assert await bounded(wh.force()) == 9
        reader = await cluster.client(config)
        tail = await bounded(reader.open_ledger(wh.ledger_id, b"pw", recovery=False))
        await until_async(tail.read_explicit_last_add_confirmed, 9)
        assert await read_all(tail, 0, 9) == [payload(i) for i in range(10)]
        # Another client recovers the degraded ledger: fencing reads from the two up.
        recovered = await bounded(reader.open_ledger(wh.ledger_id, b"pw"))
        assert recovered.metadata.state is LedgerState.CLOSED
        assert recovered.metadata.last_entry_id == 9
        assert await read_all(recovered) == [payload(i) for i in range(10)]
        with pytest.raises(LedgerFencedError):
            await bounded(wh.append(b"after the recovery"))


async def until_async(read, expected: int) -> None:  # type: ignore[no-untyped-def]
    async def wait() -> None:
        while await read() != expected:
            await asyncio.sleep(0.02)

    await bounded(wait())


@on_virtual_time
async def test_a_degraded_ledger_closes_at_its_last_entry() -> None:
    async with MemoryCluster(3) as cluster:
        bk = await cluster.client(FAST)
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        await cluster.stop_bookie(cluster.bookie(wh.ensemble[1]))
        await append_range(wh, 0, 10)
        await bounded(wh.close())
        assert (wh.metadata.state, wh.metadata.last_entry_id) == (LedgerState.CLOSED, 9)
        rh = await bounded(bk.open_ledger(wh.ledger_id, b"pw"))
        assert await read_all(rh) == [payload(i) for i in range(10)]


@on_virtual_time
async def test_a_second_loss_fails_the_writer() -> None:
    async with MemoryCluster(3) as cluster:
        bk = await cluster.client(FAST)
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        await cluster.stop_bookie(cluster.bookie(wh.ensemble[0]))
        await append_range(wh, 0, 5)
        await cluster.stop_bookie(cluster.bookie(wh.ensemble[1]))
        with pytest.raises(NotEnoughBookiesError, match="cannot write degraded either"):
            await append_range(wh, 5, 10)
        assert wh.last_add_confirmed == 4


@on_virtual_time
async def test_off_a_lost_bookie_with_no_spare_fails_the_writer() -> None:
    async with MemoryCluster(3) as cluster:
        bk = await cluster.client(dataclasses.replace(FAST, degraded_writes=False))
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        await append_range(wh, 0, 1)
        await cluster.stop_bookie(cluster.bookie(wh.ensemble[0]))
        with pytest.raises(NotEnoughBookiesError, match="no bookie can replace"):
            await append_range(wh, 1, 5)


@on_virtual_time
async def test_re_replication_leaves_a_degraded_writer_alone_then_copies_without_fencing() -> None:
    """Auto-recovery with no candidate leaves the open ledger as it is (its writer goes on);
    once the writer moved to a new segment, the old segment's copy needs no fencing."""
    async with MemoryCluster(3) as cluster:
        bk = await cluster.client(FAST)
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        await append_range(wh, 0, 10)
        dead = wh.ensemble[1]
        await cluster.stop_bookie(cluster.bookie(dead))
        await append_range(wh, 10, 20)
        recovery = await cluster.client(FAST)
        config = AutoRecoveryConfig()
        outcome = await bounded(replicate_ledger(recovery, wh.ledger_id, [dead], config))
        assert not outcome.done and outcome.kind is BlockKind.NO_CANDIDATE
        await append_range(wh, 20, 30)  # not fenced
        spare = await add_bookie(cluster)
        await until(lambda: not wh.degraded, "the writer replaced the bookie down")
        outcome = await bounded(replicate_ledger(recovery, wh.ledger_id, [dead], config))
        assert outcome.done and outcome.replaced == {0: {dead: spare.bookie_id}}
        assert outcome.entries_copied > 0
        await append_range(wh, 30, 40)  # still not fenced
        assert wh.writable
        await bounded(wh.close())
        assert dead not in {b for ensemble in wh.metadata.segments.values() for b in ensemble}
        rh = await bounded(recovery.open_ledger(wh.ledger_id, b"pw"))
        assert await read_all(rh) == [payload(i) for i in range(40)]


@on_virtual_time
async def test_a_restarted_bookie_is_taken_back_in_its_place() -> None:
    """No spare, the lost bookie restarts: the writer takes it back (no new segment), and
    the entries written from then on are on it too."""
    async with MemoryCluster(3) as cluster:
        bk = await cluster.client(FAST)
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        first = wh.ensemble
        await append_range(wh, 0, 10)
        lost = cluster.bookie(first[1])
        await cluster.crash(cluster.bookies.index(lost), restart=False)
        await append_range(wh, 10, 20)
        assert wh.degraded == {lost.bookie_id}
        await cluster.start_bookie(lost)
        await until(lambda: not wh.degraded, "the writer took the restarted bookie back")
        await append_range(wh, 20, 30)
        assert wh.metadata.segments == {0: first}
        await bounded(wh.close())
        storage = lost.storage
        assert storage is not None
        on_it = set(storage.list_entries(wh.ledger_id))
        assert set(range(20, 30)) <= on_it, "written to it again"
        assert not set(range(10, 20)) & on_it, "what was written while it was down: not"
        # ... so the ledger is queued for auto-recovery with it missing: never a silent gap
        for _ in range(500):
            marked = await bk.cluster.underreplication.get(wh.ledger_id)
            if marked is not None:
                break
            await asyncio.sleep(0.01)
        assert marked is not None and marked.missing_replicas == (lost.bookie_id,)
        reader = await cluster.client(FAST)
        rh = await bounded(reader.open_ledger(wh.ledger_id, b"pw"))
        assert await read_all(rh) == [payload(i) for i in range(30)]
