"""Stopping a campaign with SIGTERM (as a CI runner or systemd does) or Ctrl-C.

The SIGTERM handler raises ``KeyboardInterrupt`` so that the run unwinds as Ctrl-C does
(namespaces, tmpfs mounts and processes cleaned up); while a run's event loop runs, it
raises nothing into the loop's code, and :func:`watch` raises it from a task of its own. A
signal handler's exception can be lost, though: when the handler happens to run inside a
finalizer (``__del__``, a weakref or GC callback), Python prints "Exception ignored" and
goes on, and the run would carry on to its end as if nothing had been asked. So the handler
also remembers the signal (:func:`interrupt`), and the harness asks again between steps
(:func:`check`) and, while a run's event loop runs, every ``WATCH_S`` (:func:`watch`).

A stop must be quick (``bkeeper verify`` reports within 3 s of Ctrl-C). What a run started
(bookies, ZooKeeper, client processes) registers a killer with :func:`killing`: the handler
calls it first, so that nothing the unwinding waits for is still running; and a run's event
loop is closed by :class:`BoundedRunner`, which gives the cancelled tasks
:data:`TEARDOWN_S` and then abandons them (asyncio's own runner waits for them for ever). A
second signal while the first unwinds is ignored: a clean-up cut in the middle would leave
namespaces or mounts behind."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import Any, TypeVar

__all__ = [
    "TEARDOWN_S",
    "WATCH_S",
    "BoundedRunner",
    "check",
    "install",
    "interrupt",
    "killing",
    "requested",
    "requested_at",
    "reset",
    "watch",
    "watched",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: How often a running event loop looks whether a stop was asked for.
WATCH_S = 0.2
#: Seconds the tasks of a stopped run's event loop get to finish their cancellation.
TEARDOWN_S = 1.0

_signal: list[int] = []  # the signal that asked for the stop, once one has
_signalled_at: list[float] = []  # when (time.monotonic())
_killers: list[Callable[[], None]] = []  # called by the first stop signal (killing)


def interrupt(signum: int, frame: object = None) -> None:
    """The signal handler: remember the stop, kill what registered (:func:`killing`), then
    unwind as Ctrl-C does (raised here, or, while an event loop runs, by :func:`watch`). A
    later signal is ignored (the first one's unwinding goes on)."""
    if _signal:
        return
    _signal.append(signum)
    _signalled_at.append(time.monotonic())
    for kill in list(_killers):
        try:
            kill()
        except Exception as exc:  # the unwinding still cleans up; say why
            log.warning("stopping what a run started: %s", exc)
    if _loop_running():
        # Not raised into whatever the loop runs (a task that catches BaseException would
        # log it as its own failure, traceback and all): watch() raises it within WATCH_S,
        # from a task of its own.
        return
    raise KeyboardInterrupt(f"signal {signum}")


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


@contextlib.contextmanager
def killing(kill: Callable[[], None]) -> Iterator[None]:
    """While the block runs, a stop signal calls ``kill()`` (from the signal handler: it
    must only send signals) before the run unwinds."""
    _killers.append(kill)
    try:
        yield
    finally:
        _killers.remove(kill)


def install() -> None:
    """Make SIGTERM and Ctrl-C (SIGINT) stop the harness this way (main thread only)."""
    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGINT, interrupt)


def requested() -> int | None:
    """The signal that asked for a stop, if one has."""
    return _signal[0] if _signal else None


def requested_at() -> float | None:
    """When (``time.monotonic()``) the stop was asked for, if it was."""
    return _signalled_at[0] if _signalled_at else None


def check() -> None:
    """``KeyboardInterrupt`` if a stop was asked for (its first raise may have been lost)."""
    if _signal:
        raise KeyboardInterrupt(f"signal {_signal[0]}")


async def watch() -> None:
    """Run beside a run's work: raises ``KeyboardInterrupt`` out of the event loop once a
    stop was asked for (an exception of that kind leaves ``run_until_complete`` at once)."""
    while True:
        check()
        await asyncio.sleep(WATCH_S)


async def watched(work: Awaitable[T]) -> T:
    """``work``, with :func:`watch` beside it."""
    watcher = asyncio.create_task(watch())
    try:
        return await work
    finally:
        watcher.cancel()


class BoundedRunner:
    """``asyncio.Runner`` for a run's work (each :meth:`run` is :func:`watched`), whose
    :meth:`close`, after a stop, waits at most :data:`TEARDOWN_S` for the cancelled tasks and
    the default executor's threads, then closes the loop; the tasks still pending are
    abandoned (what they wait for was killed: :func:`killing`), and what asyncio says of them
    then goes to this module's log at debug level, not to the console."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()

    def __enter__(self) -> BoundedRunner:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def run(self, work: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(watched(work))

    def close(self) -> None:
        loop = self.loop
        if loop.is_closed():
            return
        bound = TEARDOWN_S if _signal else None
        if _signal:
            loop.set_exception_handler(_quiet)
        try:
            tasks = [task for task in asyncio.all_tasks(loop) if not task.done()]
            for task in tasks:
                task.cancel()
            _wait(loop, tasks, bound)
            for task in tasks:
                if task.done() and not task.cancelled() and task.exception() is not None:
                    log.debug("task %s ended with %r", task.get_name(), task.exception())
            pending = [task for task in tasks if not task.done()]
            for task in pending:  # abandoned: its clean-up runs now, while the loop is open
                log.debug("task %s abandoned after %s s", task.get_name(), bound)
                try:
                    task.get_coro().close()
                except BaseException as exc:
                    log.debug("closing task %s: %r", task.get_name(), exc)
            for step in (loop.shutdown_asyncgens(), loop.shutdown_default_executor()):
                _wait(loop, [loop.create_task(step)], bound)
        finally:
            loop.close()


def _wait(
    loop: asyncio.AbstractEventLoop, tasks: list[asyncio.Task[Any]], bound: float | None
) -> None:
    """Run ``loop`` until ``tasks`` are done, at most ``bound`` seconds (None: no bound). A
    task that raises the stop again (a ``TaskGroup`` keeps a ``KeyboardInterrupt`` of one of
    its tasks and raises it at its exit) takes the loop out of ``run_until_complete``: the
    wait goes on for the others."""
    deadline = None if bound is None else time.monotonic() + bound
    while True:
        pending = [task for task in tasks if not task.done()]
        left = None if deadline is None else deadline - time.monotonic()
        if not pending or (left is not None and left <= 0):
            return
        try:
            loop.run_until_complete(asyncio.wait(pending, timeout=left))
        except (KeyboardInterrupt, SystemExit) as exc:
            log.debug("a task raised %r while the loop was closed", exc)


def _quiet(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    log.debug("after the stop: %s", context.get("message"), exc_info=context.get("exception"))


def reset() -> None:
    """Forget a stop (tests)."""
    _signal.clear()
    _signalled_at.clear()
