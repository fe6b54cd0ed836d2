"""The bookie's checkpoint loop: a checkpoint at its interval, or at once when the storage has
journaled enough (told from the journal's thread), and few wake-ups in between."""

from __future__ import annotations

import asyncio

from bkeeper.server.bookie_loops import CHECKPOINT_DUE_POLL_S, CheckpointDue, run_checkpoints
from bkeeper.testing.virtual_time import LoopClock, run_virtual


class _Storage:
    """What the loop uses of a storage: ``checkpoint_due`` (counted) and ``checkpoint``."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop  # the checkpoint runs on a worker thread: no running loop there
        self.due = False
        self.looks = 0
        self.checkpoints: list[float] = []

    @property
    def checkpoint_due(self) -> bool:
        self.looks += 1
        return self.due

    def checkpoint(self) -> None:
        self.checkpoints.append(self._loop.time())
        self.due = False


def _checkpoint_loop() -> tuple[_Storage, asyncio.Event, CheckpointDue, asyncio.Future[None]]:
    """A checkpoint loop of an hour's interval over a :class:`_Storage`, running."""
    storage = _Storage(asyncio.get_running_loop())
    stopping = asyncio.Event()
    due = CheckpointDue(asyncio.get_running_loop())
    loop = asyncio.ensure_future(
        run_checkpoints(storage, 3600.0, LoopClock(), stopping, due)  # type: ignore[arg-type]
    )
    return storage, stopping, due, loop


def test_an_idle_bookie_looks_once_a_poll_interval_not_ten_times_a_second() -> None:
    async def main() -> _Storage:
        storage, stopping, _due, loop = _checkpoint_loop()
        await asyncio.sleep(60)
        stopping.set()
        await loop
        return storage

    storage = run_virtual(main())
    assert storage.checkpoints == []
    # 60 s at one look per poll interval (it was 600: a look every 0.1 s)
    assert storage.looks <= 60 / CHECKPOINT_DUE_POLL_S + 2


def test_a_checkpoint_due_by_size_starts_at_once_when_told() -> None:
    async def main() -> tuple[_Storage, float]:
        storage, stopping, due, loop = _checkpoint_loop()
        await asyncio.sleep(10.25)
        told_at = asyncio.get_running_loop().time()
        storage.due = True
        due.journaled(storage)  # type: ignore[arg-type]  # as the journal thread does
        async with asyncio.timeout(5):
            while not storage.checkpoints:
                await asyncio.sleep(0.001)
        stopping.set()
        await loop
        return storage, storage.checkpoints[0] - told_at

    storage, after_s = run_virtual(main())
    assert len(storage.checkpoints) == 1
    assert after_s < 0.01  # not at the next look, a poll interval later
