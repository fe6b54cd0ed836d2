"""Running a program's main coroutine: on uvloop where it is installed, else asyncio's loop.

While it runs, ``kill -USR1 <pid>`` logs the stack of every asyncio task (WARNING, logger
``bkeeper.common.loop``): what a process that seems stuck is waiting for, without stopping
it (a bookie, a kv member, a verify run's processes).
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import logging
import signal
from collections.abc import Coroutine
from types import FrameType
from typing import Any, TypeVar

__all__ = ["TASK_DUMP_SIGNAL", "await_chain", "dump_tasks", "run_event_loop"]

T = TypeVar("T")

log = logging.getLogger(__name__)

#: The signal that makes a running program log its tasks' stacks.
TASK_DUMP_SIGNAL = signal.SIGUSR1
#: Frames shown per task (the innermost).
_FRAMES_MAX = 30
#: What ``__anext__`` / ``asend`` / ``athrow`` of an async generator return.
_ASEND_TYPES = frozenset({"async_generator_asend", "async_generator_athrow"})


def run_event_loop(main: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine on uvloop when it is installed, else on asyncio's loop."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        return asyncio.run(_dumping_tasks(main))
    result: T = uvloop.run(_dumping_tasks(main))
    return result


async def _dumping_tasks(main: Coroutine[Any, Any, T]) -> T:
    loop = asyncio.get_running_loop()
    try:
        loop.add_signal_handler(TASK_DUMP_SIGNAL, dump_tasks)
    except (NotImplementedError, RuntimeError, ValueError):  # not the main thread, or Windows
        return await main
    try:
        return await main
    finally:
        loop.remove_signal_handler(TASK_DUMP_SIGNAL)


def dump_tasks() -> str:
    """Log (and return) where every task of the running loop waits: its await chain, the
    outermost coroutine first (``Task.print_stack`` shows one frame of a suspended task)."""
    tasks = sorted(asyncio.all_tasks(), key=lambda t: t.get_name())
    lines = [f"{len(tasks)} asyncio tasks (signal {TASK_DUMP_SIGNAL.name}):"]
    for task in tasks:
        lines.append(f"task {task.get_name()}:")
        lines += (f"  {where}" for where in await_chain(task))
    text = "\n".join(lines)
    log.warning("%s", text)
    return text


def await_chain(task: asyncio.Future[Any]) -> list[str]:
    """Where ``task`` waits: ``file:line in function`` for each frame of its await chain,
    the outermost first (the innermost ``_FRAMES_MAX``); empty once it is done."""
    if task.done() or not isinstance(task, asyncio.Task):
        return []
    return [
        f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"
        for frame in _await_chain(task.get_coro())[-_FRAMES_MAX:]
    ]


def _await_chain(awaitable: object) -> list[FrameType]:
    """The frames of a coroutine and of what it awaits, down to the first non-coroutine.
    An async generator's ``__anext__`` (an ``async_generator_asend``, what ``async for``
    awaits) has no frame and does not name its generator; the generator is found among
    the objects it refers to, and the chain goes on through it."""
    frames: list[FrameType] = []
    while awaitable is not None and len(frames) < 1000:
        if type(awaitable).__name__ in _ASEND_TYPES:
            referents = gc.get_referents(awaitable)
            awaitable = next((g for g in referents if inspect.isasyncgen(g)), None)
            continue
        frame = next(
            (f for a in ("cr_frame", "gi_frame", "ag_frame") if (f := getattr(awaitable, a, None))),
            None,
        )
        if frame is not None:
            frames.append(frame)
        awaitable = next(
            (
                n
                for a in ("cr_await", "gi_yieldfrom", "ag_await")
                if (n := getattr(awaitable, a, None))
            ),
            None,
        )
    return frames
