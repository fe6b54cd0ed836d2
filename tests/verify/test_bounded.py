"""The workloads bound their calls with ``bounded``, not ``asyncio.wait_for``: on Python 3.11
``wait_for`` loses a cancellation that arrives as its work completes, and a campaign told to
stop (its cluster's processes stopped first) had its writers go on to wait out their
timeouts on the stopped cluster: a stop took 20 to 40 s instead of 3."""

from __future__ import annotations

import asyncio

import pytest

from bkeeper.verify.workload import bounded


async def test_a_cancellation_arriving_as_the_work_completes_is_kept() -> None:
    done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    task = asyncio.ensure_future(bounded(done, 10.0))
    await asyncio.sleep(0)  # waiting on the work
    done.set_result(1)
    task.cancel()  # in the same iteration: both reach the task at once
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_the_work_s_result_or_a_timeout() -> None:
    assert await bounded(asyncio.sleep(0, result=7), 1.0) == 7
    with pytest.raises(TimeoutError):
        await bounded(asyncio.sleep(5), 0.05)
