"""Abandoned requests: a task cancelled just as it failed ends with its error, not cancelled
(``asyncio.wait_for`` returns the inner result when both happen at once); nobody awaits it,
so asyncio logged "Task exception was never retrieved" (seen in ``bkeeper verify`` runs, from
a long poll's connect to a bookie that had just died). ``abandon`` takes that error."""

from __future__ import annotations

import asyncio
import gc

import pytest

from bkeeper.common.tasks import abandon, within


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
    assert "ConnectionRefusedError" not in caplog.text  # (other tests' leftovers may show)


async def test_abandon_cancels_what_still_runs_and_leaves_results_alone() -> None:
    done = asyncio.get_running_loop().create_future()
    done.set_result(3)
    slow = asyncio.ensure_future(asyncio.sleep(10))
    abandon([done, slow])
    await asyncio.sleep(0)
    assert slow.cancelled() and done.result() == 3


async def _caller(wait: object, started: asyncio.Event) -> None:
    assert callable(wait)
    await wait(fails_as_it_is_cancelled(started), 30.0)


@pytest.mark.parametrize("leaks", [False, True], ids=["within", "asyncio.wait_for"])
async def test_a_request_timed_by_within_leaves_no_task_whose_error_nobody_takes(
    caplog: pytest.LogCaptureFixture, leaks: bool
) -> None:
    """A reader abandons the task that is sending a request: the request, timed by
    ``within``, runs in that task, so its error is the task's (``abandon`` takes it). Timed
    by ``asyncio.wait_for`` it ran in a task of its own, whose error nobody took."""
    started = asyncio.Event()
    task = asyncio.ensure_future(_caller(asyncio.wait_for if leaks else within, started))
    await started.wait()
    abandon([task])
    for _ in range(5):
        await asyncio.sleep(0)
    assert task.done()
    del task
    gc.collect()
    assert ("Task exception was never retrieved" in caplog.text) is leaks
