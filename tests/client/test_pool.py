"""The connection pool: one connection attempt at a time per bookie, and callers that waited
while it failed share that failure instead of each trying again."""

from __future__ import annotations

import asyncio

import pytest

from bkeeper.client.pool import BookiePool, Connection
from bkeeper.common.errors import BookieUnavailableError
from bkeeper.wire.codes import Protocol


class RefusingTransport:
    """Every connection attempt waits for ``release``, then is refused; counts attempts."""

    def __init__(self) -> None:
        self.attempts = 0
        self.release = asyncio.Event()

    async def connect(self, bookie_id: str, protocol: Protocol) -> Connection:
        self.attempts += 1
        await self.release.wait()
        raise ConnectionRefusedError(f"{bookie_id} refused")


async def test_callers_waiting_on_a_failed_attempt_share_its_failure() -> None:
    transport = RefusingTransport()
    pool = BookiePool(transport, Protocol.V2)
    waiters = [asyncio.ensure_future(pool.connection("dead:3181")) for _ in range(50)]
    while transport.attempts == 0:
        await asyncio.sleep(0)
    transport.release.set()
    results = await asyncio.gather(*waiters, return_exceptions=True)
    assert transport.attempts == 1
    assert all(isinstance(r, BookieUnavailableError) for r in results)
    assert {str(r) for r in results} == {"bookie dead:3181: dead:3181 refused"}
    # a caller arriving after the failure tries again
    with pytest.raises(BookieUnavailableError, match="refused"):
        await pool.connection("dead:3181")
    assert transport.attempts == 2
    # another protocol, another bookie: their own attempts
    with pytest.raises(BookieUnavailableError):
        await pool.connection("dead:3181", Protocol.V3)
    with pytest.raises(BookieUnavailableError):
        await pool.connection("other:3181")
    assert transport.attempts == 4
