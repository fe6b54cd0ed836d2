"""Read leases (``RsmConfig.read_lease_s``): an acknowledged append lets the leader answer
reads without a barrier for a while; a fenced or deposed leader has none; a new leader waits
the lease out after fencing before it takes commands (so an old leader's lease never
overlaps a write acknowledged by another)."""

from __future__ import annotations

import asyncio
import time

import pytest

from bkeeper.common.errors import ConfigError, NotLeaderError
from bkeeper.namedlog import LogConfig, NamedLogs
from bkeeper.statemachine import ReplicatedStateMachine, RsmConfig
from bkeeper.testing.clock import FakeClock
from bkeeper.testing.cluster import MemoryCluster
from tests.statemachine.test_machine import CLIENT, Journal, member, wait_for

LEASE_S = 1.0


def test_the_lease_is_bounded() -> None:
    with pytest.raises(ConfigError, match=r"read_lease_s: must be 0\.\.10"):
        RsmConfig("log", b"me", read_lease_s=11.0)
    with pytest.raises(ConfigError, match="read_lease_s"):
        RsmConfig("log", b"me", read_lease_s=-1.0)


async def test_without_a_lease_every_read_needs_a_barrier() -> None:
    async with MemoryCluster(3) as cluster:
        a, _, stop, task, _ = await member(cluster, "a")
        await a.wait_leading(20)
        await a.submit(b"x")
        assert not a.lease_read()
        assert (a.lease_reads, a.lease_renewals) == (0, 0)
        stop.set()
        await asyncio.wait_for(task, 20)


async def test_an_acknowledged_append_gives_a_lease_that_a_fence_takes_away() -> None:
    async with MemoryCluster(3) as cluster:
        a, _, stop, task, logs = await member(cluster, "a", read_lease_s=LEASE_S)
        await a.wait_leading(20)
        await a.submit(b"x")
        assert [a.lease_read() for _ in range(5)] == [True] * 5
        assert (a.lease_reads, a.lease_renewals) == (5, 0)
        # Another writer fences the log: the leader does not know until it appends, and
        # its lease still holds (that is why a new leader waits the lease out). Its next
        # append fails, it steps down, and the lease is gone with the leadership.
        rogue = await logs.log("journal").open_writer()
        await rogue.append(b"rogue")
        with pytest.raises(NotLeaderError):
            await a.submit(b"y")
        assert not a.lease_read()
        await rogue.close()
        stop.set()
        await asyncio.wait_for(task, 20)


async def test_reads_past_half_the_lease_renew_it_with_a_barrier() -> None:
    async with MemoryCluster(3) as cluster:
        a, _, stop, task, _ = await member(cluster, "a", read_lease_s=LEASE_S)
        await a.wait_leading(20)
        await a.submit(b"x")
        applied = a.applied

        def renewing() -> bool:
            a.lease_read()
            return a.lease_renewals >= 1

        # Past half of the lease, a read starts a barrier (one at a time), which renews it.
        await wait_for(renewing)
        await wait_for(lambda: a.applied != applied)
        assert a.lease_read()
        stop.set()
        await asyncio.wait_for(task, 20)


async def test_a_new_leader_waits_the_lease_out_after_fencing() -> None:
    async with MemoryCluster(3) as cluster:
        a, _, stop_a, task_a, _ = await member(cluster, "a", read_lease_s=LEASE_S)
        await a.wait_leading(20)
        await a.submit(b"x")
        opening: list[float] = []

        async def before_open_writer() -> None:
            opening.append(time.monotonic())

        bk = await cluster.client(CLIENT)
        config = RsmConfig("journal", b"b", read_lease_s=LEASE_S)
        logs = NamedLogs(bk, LogConfig(tail_poll_ms=50))
        b = ReplicatedStateMachine(
            logs, bk.cluster.store, Journal(), config, before_open_writer=before_open_writer
        )
        stop_b = asyncio.Event()
        task_b = asyncio.create_task(b.run(stop_b))
        stop_a.set()  # a resigns: b is elected, fences a's ledger, then waits
        await asyncio.wait_for(task_a, 20)
        await b.wait_leading(20)
        led = time.monotonic()
        assert len(opening) == 1
        assert led - opening[0] >= LEASE_S
        stop_b.set()
        await asyncio.wait_for(task_b, 20)


async def test_the_lease_runs_on_the_members_clock() -> None:
    clock = FakeClock()
    async with MemoryCluster(3) as cluster:
        bk = await cluster.client(CLIENT)
        config = RsmConfig("journal", b"a", read_lease_s=LEASE_S)
        logs = NamedLogs(bk, LogConfig(tail_poll_ms=50))
        a = ReplicatedStateMachine(logs, bk.cluster.store, Journal(), config, clock=clock)
        stop = asyncio.Event()
        task = asyncio.create_task(a.run(stop))
        while not a.leading:  # the wait after fencing ends when the member's clock says so
            clock.advance(0.05)
            await asyncio.sleep(0.01)
        await a.submit(b"x")
        applied = a.applied
        assert a.lease_read()
        clock.advance(LEASE_S / 2)  # past half of it: still held, and a barrier renews it
        assert a.lease_read()
        assert a.lease_renewals == 1
        await wait_for(lambda: a.applied != applied)  # the renewal, acknowledged
        clock.advance(LEASE_S)  # past the renewed lease too: no real time passed
        assert not a.lease_read()
        await wait_for(a.lease_read)  # a barrier sent at the clock's now renews it
        stop.set()
        await asyncio.wait_for(task, 20)
