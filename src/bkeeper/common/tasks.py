"""Owned background tasks: how an object runs work in the background (work that lives only
within one coroutine runs in an ``asyncio.TaskGroup`` scope there instead).

A :class:`TaskOwner` belongs to one object (a write handle, a log writer, a metadata driver,
a bookie). Every task it spawns is tracked; :meth:`TaskOwner.aclose` cancels them all and waits
for each to end, so nothing outlives its owner. At most ``tasks_max`` run at once: a spawn past
that bound raises instead of growing without limit. A task that ends with an exception has it
logged with its traceback when it ends (never swallowed); a caller that needs the outcome
awaits the task it got back from :meth:`TaskOwner.spawn`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Coroutine, Iterable
from typing import Any, TypeVar

from bkeeper.common.errors import BKeeperError

__all__ = ["TASKS_MAX", "TaskOwner", "abandon", "end_if_cancelled", "within"]

_log = logging.getLogger(__name__)

T = TypeVar("T")

#: Default bound of the background tasks one object may own at once.
TASKS_MAX = 1024


class TaskOwner:
    """Owns background tasks: spawns them, logs their failures, cancels them on close.

    ``error`` is the exception class raised by :meth:`spawn` once closed or at the bound, so
    each layer reports in its own terms (``MetadataError`` for metadata drivers, say).
    """

    def __init__(
        self,
        name: str,
        *,
        tasks_max: int = TASKS_MAX,
        error: type[BKeeperError] = BKeeperError,
    ) -> None:
        self._name = name
        #: insertion-ordered (a dict, not a set): closing cancels in the order the tasks
        #: started, the same in every run (a set's order follows memory addresses)
        self._tasks: dict[asyncio.Task[Any], None] = {}
        self._tasks_max = tasks_max
        self._error = error
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def __len__(self) -> int:
        return len(self._tasks)

    def spawn(self, coro: Coroutine[Any, Any, T], name: str) -> asyncio.Task[T]:
        """Run ``coro`` as a task owned by this object."""
        if self._closed:
            coro.close()
            raise self._error(f"{self._name}: closed, cannot start {name}")
        if len(self._tasks) >= self._tasks_max:
            coro.close()
            raise self._error(f"{self._name}: {self._tasks_max} tasks running (tasks_max)")
        task = asyncio.get_running_loop().create_task(coro, name=f"{self._name}: {name}")
        self._tasks[task] = None
        task.add_done_callback(self._finished)
        return task

    async def wait_idle(self) -> None:
        """Wait until every owned task has ended, those spawned meanwhile too, cancelling
        none (an owner that must let its work finish calls this before :meth:`aclose`).

        Called from inside one of its own tasks, that task is not waited for.
        """
        current = asyncio.current_task()
        while tasks := [task for task in self._tasks if task is not current]:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def aclose(self) -> None:
        """Cancel every owned task and wait for all of them to end.

        Called from inside one of its own tasks, that task is left to finish by itself.
        """
        self._closed = True
        current = asyncio.current_task()
        tasks = [task for task in self._tasks if task is not current]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def cancel(self) -> None:
        """Close, and cancel every owned task without waiting for them to end: for an owner
        that must stop synchronously (a finalizer); :meth:`aclose` wherever one can wait."""
        self._closed = True
        for task in list(self._tasks):
            task.cancel()

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._tasks.pop(task, None)
        if not task.cancelled() and task.exception() is not None:
            _log.error("%s failed", task.get_name(), exc_info=task.exception())


def abandon(tasks: Iterable[asyncio.Future[Any]]) -> None:
    """Give up requests whose outcome is no longer wanted (a read answered by another
    replica, a long poll that moved on): cancel those still running, and take the error of
    any that fails, now or later, so that asyncio does not report it as never retrieved. A
    task cancelled just as it fails ends with its error, not cancelled (``asyncio.wait_for``
    returns the inner result when both happen at once); its error is logged at debug level:
    the caller decided it does not need it."""
    for task in tasks:
        if not task.done():
            task.cancel()
            task.add_done_callback(_take_error)
        else:
            _take_error(task)


def _take_error(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and (error := task.exception()) is not None:
        _log.debug("abandoned request ended with %s: %s", type(error).__name__, error)


async def within(awaitable: Awaitable[T], timeout_s: float | None) -> T:
    """``await awaitable``, ``TimeoutError`` after ``timeout_s`` (None: no limit), in the
    calling task. A bounded wait as ``asyncio.timeout`` gives it (ruff bans
    ``asyncio.wait_for``), for a caller that holds an awaitable rather than a block. Not
    ``asyncio.wait_for``, which (Python 3.11) loses a cancellation that arrives as the
    awaited work completes (it returns the result, and the cancelled caller goes on), and
    runs a coroutine as a task of its own: when the
    caller is cancelled just as that task fails (a connect refused while it was being
    cancelled), it re-raises the cancellation and leaves the task's error unretrieved, and
    asyncio reports "Task exception was never retrieved" (requests abandoned by a reader
    do that). Here there is no second task: the error is the caller's."""
    async with asyncio.timeout(timeout_s):
        return await awaitable


def end_if_cancelled(what: str, exc: Exception, log: logging.Logger) -> None:
    """For a loop that catches a failure and goes on (a supervisor, a retry): when ``exc`` came
    while the current task was being cancelled (a clean-up raised in place of the
    ``CancelledError``), going on would lose the cancel and whoever cancelled would wait for
    good. Log ``exc`` with its traceback and end with a cancel instead; otherwise return."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        log.error("%s failed while it was being cancelled", what, exc_info=exc)
        raise asyncio.CancelledError(f"{what} was cancelled") from exc
