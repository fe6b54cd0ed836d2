"""``kill -USR1`` a running program: it logs where each asyncio task waits, deep in its
await chain, and goes on."""

from __future__ import annotations

import asyncio
import logging
import os

import pytest

from bkeeper.common.loop import TASK_DUMP_SIGNAL, dump_tasks, run_event_loop


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


async def _inner_records(event: asyncio.Event):
    await _innermost_wait(event)
    yield 1


async def _outer_records(event: asyncio.Event):
    async for item in _inner_records(event):
        yield item


def test_the_chain_goes_on_through_async_generators() -> None:
    """A task that runs an async generator's ``__anext__`` (a named log reader's read) has
    an ``async_generator_asend`` at the top of its chain, with no frame of its own: the dump
    showed nothing of where such a task waited (a kv follower that stopped applying: the
    one thing its dump was for)."""

    async def program() -> str:
        event = asyncio.Event()
        records = _outer_records(event)
        task = asyncio.ensure_future(records.__anext__())
        await asyncio.sleep(0.05)
        text = dump_tasks()
        event.set()
        assert await task == 1
        await records.aclose()
        return text

    dump = asyncio.run(program())
    assert "in _outer_records" in dump, dump
    assert dump.index("in _outer_records") < dump.index("in _inner_records")
    assert dump.index("in _inner_records") < dump.index("in _innermost_wait")
