"""A steady stream of appends to a writer on real processes while bookies are killed, and the
checks after: everything acknowledged is in the closed ledger, and reads back."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from types import TracebackType

from bkeeper.client import BookKeeper, ClientConfig, WriteHandle

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
    """Appends to ``wh`` while in its ``async with``; what was acknowledged, and the errors."""

    def __init__(self, wh: WriteHandle) -> None:
        self.wh = wh
        self.acknowledged: dict[int, bytes] = {}
        self.errors: list[BaseException] = []
        self.stopping = False
        self.futures: list[asyncio.Future[int]] = []
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Appender:
        self._task = asyncio.create_task(self.run())
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop appending and wait for every append sent to complete."""
        assert self._task is not None
        self.stopping = True
        await asyncio.wait_for(self._task, LIMIT_S)

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

    def check(self, what: str = "") -> None:
        """Fail if an append failed."""
        assert not self.errors, f"{what}{': ' if what else ''}an append failed: {self.errors[0]!r}"

    async def more(self, count: int, what: str) -> None:
        target = len(self.acknowledged) + count

        async def grown() -> bool:
            self.check(what)
            return len(self.acknowledged) >= target

        await until(grown, f"{count} more appends acknowledged {what}")

    async def close_and_check(self) -> None:
        """Close the writer: its ledger ends with exactly the entries acknowledged."""
        await asyncio.wait_for(self.wh.close(), LIMIT_S)
        last = self.wh.metadata.last_entry_id
        assert set(self.acknowledged) == set(range(last + 1))


async def read_back(uri: str, config: ClientConfig, ledger_id: int) -> dict[int, bytes]:
    """Every entry of the closed ledger ``ledger_id``, read by a new client."""
    async with BookKeeper(uri, config) as reader:
        rh = await reader.open_ledger(ledger_id, b"pw")

        async def read_all() -> dict[int, bytes]:
            return {e.entry_id: e.data async for e in rh.read()}

        return await asyncio.wait_for(read_all(), LIMIT_S)
