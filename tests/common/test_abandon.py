"""Abandoned requests: a task cancelled just as it failed ends with its error, not cancelled
(``asyncio.wait_for`` returns the inner result when both happen at once); nobody awaits it,
so asyncio logged "Task exception was never retrieved" (seen in ``bkeeper verify`` runs, from
a long poll's connect to a bookie that had just died). ``abandon`` takes that error."""

from __future__ import annotations

import asyncio
import gc

import pytest

from bkeeper.common.tasks import abandon


async def fails_as_it_is_cancelled(started: asyncio.Event) -> None:
    try:
        started.set()
        await asyncio.sleep(10)
    except asyncio.CancelledError:
        raise ConnectionRefusedError("refused") from None  # as wait_for's race does


async def test_an_abandoned_task_that_fails_anyway_is_not_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    started = asyncio.Event()
    task = asyncio.ensure_future(fails_as_it_is_cancelled(started))
    await started.wait()
    abandon([task])
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert task.done() and not task.cancelled()
    del task
    gc.collect()
    assert "never retrieved" not in caplog.text


async def test_abandon_cancels_what_still_runs_and_leaves_results_alone() -> None:
    done = asyncio.get_running_loop().create_future()
    done.set_result(3)
    slow = asyncio.ensure_future(asyncio.sleep(10))
    abandon([done, slow])
    await asyncio.sleep(0)
    assert slow.cancelled() and done.result() == 3
