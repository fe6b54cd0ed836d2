"""TaskOwner.wait_idle: an owner can let its background work finish before it closes."""

from __future__ import annotations

import asyncio

from bkeeper.common.tasks import TaskOwner


async def test_wait_idle_waits_for_every_task_and_cancels_none():
    owner = TaskOwner("test")
    release = asyncio.Event()
    finished: list[str] = []

    async def work(name: str, then: str | None = None) -> None:
        await release.wait()
        if then is not None:  # spawned while the owner waits: waited for too
            owner.spawn(work(then), then)
        finished.append(name)

    owner.spawn(work("a", then="c"), "a")
    owner.spawn(work("b"), "b")
    waiting = asyncio.ensure_future(owner.wait_idle())
    await asyncio.sleep(0)
    assert not waiting.done()
    release.set()
    await asyncio.wait_for(waiting, 10)
    assert sorted(finished) == ["a", "b", "c"] and len(owner) == 0
    await owner.aclose()
    assert owner.closed


async def test_cancel_closes_and_cancels_without_waiting():
    owner = TaskOwner("test")
    started = asyncio.Event()

    async def forever() -> None:
        started.set()
        await asyncio.Event().wait()

    task = owner.spawn(forever(), "forever")
    await started.wait()
    owner.cancel()  # synchronous: for an owner stopped from a finalizer
    assert owner.closed and not task.done()
    await asyncio.wait({task})
    await asyncio.sleep(0)  # the owner forgets it in the task's done callback
    assert task.cancelled() and len(owner) == 0
    coro = forever()
    try:
        owner.spawn(coro, "late")
    except Exception as exc:
        assert "closed" in str(exc)
    else:
        raise AssertionError("spawn after cancel() must fail")
