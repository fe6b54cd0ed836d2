"""``kill -USR1`` a running program: it logs where each asyncio task waits, deep in its
await chain, and goes on."""

from __future__ import annotations

import asyncio
import logging
import os

import pytest

from bkeeper.common.loop import TASK_DUMP_SIGNAL, run_event_loop


async def _innermost_wait(event: asyncio.Event) -> None:
    await event.wait()


async def _middle(event: asyncio.Event) -> None:
    await _innermost_wait(event)


async def _program() -> str:
    event = asyncio.Event()
    task = asyncio.create_task(_middle(event), name="stuck-here")
    await asyncio.sleep(0.05)
    os.kill(os.getpid(), TASK_DUMP_SIGNAL)
    await asyncio.sleep(0.1)  # the handler runs on the loop
    event.set()
    await task
    return "went on"


def test_sigusr1_logs_every_task_await_chain(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="bkeeper.common.loop"):
        assert run_event_loop(_program()) == "went on"
    (dump,) = [r.getMessage() for r in caplog.records if r.name == "bkeeper.common.loop"]
    assert "task stuck-here:" in dump
    chain = dump.split("task stuck-here:")[1].split("task ")[0]
    assert chain.index("in _middle") < chain.index("in _innermost_wait")
    assert "in wait" in chain  # asyncio.Event.wait, where it is suspended
