"""Named logs take their time from a Clock: rolls by age and retention by age decided with a
fake clock, without waiting; consumers' waits measured on it."""

from __future__ import annotations

import asyncio

import pytest

from bkeeper.client.config import ClientConfig
from bkeeper.common.errors import SubscriptionBusyError
from bkeeper.namedlog import LogConfig, NamedLogs
from bkeeper.testing.clock import FakeClock
from bkeeper.testing.cluster import MemoryCluster
from bkeeper.testing.virtual_time import on_virtual_time

FAST = ClientConfig(add_timeout_ms=500, read_timeout_ms=500, long_poll_timeout_ms=200)


@on_virtual_time
async def test_rolls_and_retention_by_age_follow_the_clock():
    clock = FakeClock()
    config = LogConfig(roll_age_ms=60_000, retention_age_ms=600_000)
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST), config, clock=clock)
        named = await logs.create("a")
        writer = await named.open_writer()
        first = await writer.append(b"one")
        assert (await writer.append(b"two")).ledger_id == first.ledger_id
        clock.advance(59.999)
        assert (await writer.append(b"three")).ledger_id == first.ledger_id
        clock.advance(0.001)
        rolled = await writer.append(b"four")
        assert rolled.ledger_id > first.ledger_id, "a ledger 60 s old rolls"
        reader = await named.open_reader()
        records = [await reader.next(5) for _ in range(3)]
        await reader.close()
        assert [r.timestamp_ms for r in records] == [1_700_000_000_000] * 2 + [1_700_000_059_999]
        # Ten minutes on, the ledgers before the current one hold only records older than
        # the retention age: the next roll truncates the first ledger away.
        clock.advance(600)
        await writer.append(b"five")
        clock.advance(60)
        await writer.append(b"six")
        ids = [x.ledger_id for x in (await named.metadata()).ledgers]
        assert first.ledger_id not in ids and rolled.ledger_id in ids
        await writer.close()


class _LeapingClock(FakeClock):
    """A clock whose monotonic time leaps 1,000 s at each read: a wait measured on it is over
    at once, one measured on the event loop's clock is not."""

    def monotonic(self) -> float:
        self.advance(1000.0)
        return super().monotonic()


@on_virtual_time
async def test_consumers_waits_are_measured_on_the_logs_clock():
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST), clock=_LeapingClock())
        named = await logs.create("a")
        exclusive = await named.subscribe("one")
        shared = await named.subscribe("many", mode="shared")
        async with asyncio.timeout(10):
            assert await exclusive.receive(60.0) is None
            assert await shared.receive(60.0) is None
            with pytest.raises(SubscriptionBusyError):
                await named.subscribe("one", wait_s=60.0)
        await exclusive.close()
        await shared.close()
