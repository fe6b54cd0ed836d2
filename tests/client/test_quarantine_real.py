"""Quarantine on real processes: a bookie killed, replaced, restarted, is taken back when the
next bookie is lost and no other is left (docs/client.md, "Quarantine").

Before quarantine a writer excluded every bookie that ever failed it: the second kill failed
the writer with ``NotEnoughBookiesError`` although the first bookie was back.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable

import pytest

from bkeeper.client import BookKeeper, ClientConfig, WriteHandle

pytestmark = pytest.mark.integration

CONFIG = ClientConfig(add_timeout_ms=2_000, read_timeout_ms=2_000)
LIMIT_S = 90.0


def payload(i: int) -> bytes:
    return b"entry-%06d-" % i + bytes([i % 251]) * 100


async def until(condition: Callable[[], Awaitable[bool]], what: str) -> None:
    """Poll ``condition`` until true; fail naming ``what`` after ``LIMIT_S``."""

    async def wait() -> None:
        while not await condition():
            await asyncio.sleep(0.05)

    try:
        await asyncio.wait_for(wait(), LIMIT_S)
    except TimeoutError:
        raise AssertionError(f"{what} within {LIMIT_S} s") from None


class Appender:
    """Appends to ``wh`` until stopped; what was acknowledged, and the first error."""

    def __init__(self, wh: WriteHandle) -> None:
        self.wh = wh
        self.acknowledged: dict[int, bytes] = {}
        self.errors: list[BaseException] = []
        self.stopping = False
        self.futures: list[asyncio.Future[int]] = []

    async def run(self) -> None:
        i = 0
        while not self.stopping and not self.errors:
            data = payload(i)
            future = await self.wh.append_async(data)
            future.add_done_callback(lambda f, data=data: self._done(f, data))
            self.futures.append(future)
            i += 1
            await asyncio.sleep(0.002)  # a steady stream, not a flood
        await asyncio.wait_for(asyncio.gather(*self.futures, return_exceptions=True), LIMIT_S)

    def _done(self, future: asyncio.Future[int], data: bytes) -> None:
        if future.exception() is not None:
            self.errors.append(future.exception())  # type: ignore[arg-type]
        else:
            self.acknowledged[future.result()] = data

    async def more(self, count: int, what: str) -> None:
        target = len(self.acknowledged) + count

        async def grown() -> bool:
            assert not self.errors, f"{what}: an append failed: {self.errors[0]!r}"
            return len(self.acknowledged) >= target

        await until(grown, f"{count} more appends acknowledged {what}")


@pytest.mark.parametrize("real_cluster", [4], indirect=True)
async def test_a_restarted_bookie_replaces_the_next_one_killed(real_cluster) -> None:
    async with BookKeeper(real_cluster.uri, CONFIG) as writer:
        registry = writer.cluster.registry
        wh = await writer.create_ledger(3, 3, 2, password=b"pw")
        a_id, b_id = wh.ensemble[0], wh.ensemble[1]
        a, b = real_cluster.index_of(a_id), real_cluster.index_of(b_id)
        appender = Appender(wh)
        appending = asyncio.create_task(appender.run())
        try:
            await appender.more(100, "before any kill")
            real_cluster.signal(a, signal.SIGKILL)

            async def a_replaced() -> bool:
                return a_id not in wh.ensemble

            await until(a_replaced, "the writer replaced the killed bookie")
            await appender.more(100, "after the first kill")
            await asyncio.to_thread(real_cluster.start, a)

            async def a_writable() -> bool:
                return a_id in (await registry.bookies()).writable

            await until(a_writable, "the restarted bookie registered writable")
            assert b_id in wh.ensemble
            real_cluster.signal(b, signal.SIGKILL)

            async def b_replaced() -> bool:
                assert not appender.errors, f"an append failed: {appender.errors[0]!r}"
                return b_id not in wh.ensemble

            await until(b_replaced, "the writer replaced the second killed bookie")
            await appender.more(200, "after the second kill")
        finally:
            appender.stopping = True
            await asyncio.wait_for(appending, LIMIT_S)
        assert not appender.errors, f"an append failed: {appender.errors[0]!r}"
        assert a_id in wh.ensemble, "the quarantined bookie was the only one left"
        await asyncio.wait_for(wh.close(), LIMIT_S)
        last = wh.metadata.last_entry_id
        assert set(appender.acknowledged) == set(range(last + 1))

    async with BookKeeper(real_cluster.uri, CONFIG) as reader:
        rh = await reader.open_ledger(wh.ledger_id, b"pw")

        async def read_all() -> dict[int, bytes]:
            return {e.entry_id: e.data async for e in rh.read()}

        entries = await asyncio.wait_for(read_all(), LIMIT_S)
    assert entries == appender.acknowledged
