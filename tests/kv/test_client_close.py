"""``KvClient.aclose`` cancels the client's own batches without swallowing its caller's
cancellation (a Ctrl-C of ``bkeeper verify --workload kv`` went on to the next run)."""

from __future__ import annotations

import asyncio
import socket

import pytest

from bkeeper.common.errors import StateMachineError
from bkeeper.kv import KvClient
from bkeeper.testing.clock import FakeClock


async def test_a_cancelled_aclose_stays_cancelled() -> None:
    with socket.socket() as unused:  # a port nobody listens on: every attempt is refused
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    kv = KvClient([f"http://127.0.0.1:{port}"], timeout_s=60, pause_s=0.05)
    put = asyncio.create_task(kv.put("k", "v"))  # a coalesced batch, retrying
    while not kv._batches:
        await asyncio.sleep(0.01)
    closing = asyncio.create_task(kv.aclose())
    await asyncio.sleep(0)  # aclose is now waiting for the batch it cancelled
    closing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closing
    with pytest.raises(asyncio.CancelledError):
        await put
    await kv.aclose()


class Jumping(FakeClock):
    """A clock that moves 10 s each time it is read."""

    def monotonic(self) -> float:
        self.advance(10.0)
        return super().monotonic()


async def test_the_calls_deadline_is_on_the_clients_clock() -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    kv = KvClient([f"http://127.0.0.1:{port}"], timeout_s=60, pause_s=0.05, clock=Jumping())
    try:
        async with asyncio.timeout(10):  # 60 s on the client's clock, far less in real time
            with pytest.raises(StateMachineError, match="no answer within 60"):
                await kv.get("k")
    finally:
        await kv.aclose()
