"""Virtual time for in-memory scenarios: an event loop whose clock jumps ahead whenever every
task waits on a timer, so a 300 ms timeout is 300 simulated ms whatever the machine's load,
and a scenario that waits out a minute of timeouts takes no minute.

:class:`VirtualTimeLoop` is an ordinary selector loop with two changes:

- ``time()`` reads a virtual clock (``loop.time()``, and so ``call_later``, ``asyncio.sleep``
  and ``asyncio.timeout``, all run on it);
- when the loop has nothing ready and would wait for its next timer, it first polls its
  selector without waiting; if nothing arrived, the virtual clock jumps to that timer.

Work handed to threads takes no virtual time: while any is in flight the loop waits for
it for real and the clock stands still, so however slow the machine, a timer never fires
because a thread (a bookie's fsync) was slow. The loop counts its own ``run_in_executor``
calls (``asyncio.to_thread``: the in-memory bookies' storage opens and closes); threads that
report back with ``call_soon_threadsafe`` on their own (a bookie's journal, answering adds
once durable) are known through :meth:`VirtualTimeLoop.add_busy_probe`. (A thread that waits
for virtual time to pass would wait for ever: none does.) Sockets to other processes are not
for this loop: a reply on its way does not stop the clock.

:class:`LoopClock` is the :class:`~bkeeper.common.clock.Clock` that reads the running loop's
time, for components that take a clock (the client's context): on this loop, virtual time.

:func:`run_virtual` runs a coroutine on a new such loop; :func:`on_virtual_time` makes an
``async def`` test a plain one that does so (pytest-asyncio then leaves it alone).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import selectors
import time
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

__all__ = ["LoopClock", "RealIOError", "VirtualTimeLoop", "on_virtual_time", "run_virtual"]

T = TypeVar("T")
P = ParamSpec("P")

#: Where the virtual clock starts (any value: only differences matter, as for monotonic).
START_S = 1000.0
#: How long the loop waits for real at a time while a thread works (then asks again).
BUSY_POLL_S = 0.05
#: Wall milliseconds at virtual ``START_S`` (2023-11-14), so ``wall_ms`` moves with the loop.
WALL_START_MS = 1_700_000_000_000


class RealIOError(RuntimeError):
    """Real I/O asked of a :class:`VirtualTimeLoop`: a bug in the test, so deliberately
    outside :mod:`bkeeper.common.errors`' tree, which the library's handlers catch (a client
    that took it for an unreachable bookie would retry it away)."""


class _Selector(selectors.BaseSelector):
    """The loop's selector, asking it whether time may jump before each wait."""

    def __init__(self, real: selectors.BaseSelector, loop: VirtualTimeLoop) -> None:
        self._real = real
        self._loop = loop

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        """Refused: real I/O (a socket, a pipe) carries data the loop cannot see in flight,
        so it would jump the clock past a timeout while an answer was on its way. (The loop's
        own self-pipe was registered before this selector took over.)"""
        raise RealIOError(
            f"virtual time cannot run real I/O ({fileobj!r} registered with the loop): a "
            "test with real sockets or pipes runs on real time"
        )

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._real.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.modify(fileobj, events, data)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is not None and timeout <= 0:
            return self._real.select(0)
        # Asked before the poll: a thread that reports done has already woken the selector.
        busy = self._loop.busy()
        events = self._real.select(0)
        if events:
            return events
        if busy:  # a thread works: wait for it for real, the clock standing still
            return self._real.select(BUSY_POLL_S if timeout is None else min(timeout, BUSY_POLL_S))
        if timeout is None:  # no timer at all: only I/O (another thread) can wake the loop
            return self._real.select(None)
        self._loop.advance(timeout)
        return []

    def close(self) -> None:
        self._real.close()

    def get_key(self, fileobj: Any) -> selectors.SelectorKey:
        return self._real.get_key(fileobj)

    def get_map(self) -> Any:
        return self._real.get_map()


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop on virtual time (module doc)."""

    def __init__(self) -> None:
        super().__init__(selectors.DefaultSelector())
        self._now = START_S
        self.threads_in_flight = 0
        self._busy_probes: list[Callable[[], bool]] = []
        self._selector = _Selector(self._selector, self)  # type: ignore[has-type]

    def add_busy_probe(self, probe: Callable[[], bool]) -> Callable[[], None]:
        """``probe()`` says whether a thread outside the loop is still working on something
        it will report back (the clock must not jump meanwhile); the call returned removes
        it."""
        self._busy_probes.append(probe)
        return lambda: self._busy_probes.remove(probe)

    def busy(self) -> bool:
        """Work in a thread that the loop waits for: time moves for real meanwhile."""
        return self.threads_in_flight > 0 or any(probe() for probe in self._busy_probes)

    def time(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        """Move the virtual clock ``seconds`` ahead (the loop does it when all tasks wait)."""
        if seconds > 0:
            self._now += seconds

    def run_in_executor(  # type: ignore[override]
        self, executor: concurrent.futures.Executor | None, func: Callable[..., T], *args: Any
    ) -> asyncio.Future[T]:
        future = super().run_in_executor(executor, func, *args)
        self.threads_in_flight += 1
        future.add_done_callback(self._thread_done)
        return future

    def _thread_done(self, _future: asyncio.Future[Any]) -> None:
        self.threads_in_flight -= 1


class LoopClock:
    """A :class:`~bkeeper.common.clock.Clock` reading the running event loop's time (outside
    a loop, the monotonic clock); wall time moves with it."""

    def monotonic(self) -> float:
        try:
            return asyncio.get_running_loop().time()
        except RuntimeError:
            return time.monotonic()

    def wall_ms(self) -> int:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return time.time_ns() // 1_000_000
        if isinstance(loop, VirtualTimeLoop):
            return WALL_START_MS + round((loop.time() - START_S) * 1000)
        return time.time_ns() // 1_000_000


def run_virtual(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` on a new :class:`VirtualTimeLoop` and close it (as ``asyncio.run``)."""
    loop = VirtualTimeLoop()
    try:
        asyncio.set_event_loop(loop)
        return loop.run_until_complete(main)
    finally:
        try:
            _cancel_all(loop)
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            asyncio.set_event_loop(None)
            loop.close()


def _cancel_all(loop: asyncio.AbstractEventLoop) -> None:
    tasks = asyncio.all_tasks(loop)
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))


def on_virtual_time(test: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, T]:
    """An ``async def`` test run by :func:`run_virtual` (its fixtures are sync ones)."""

    @functools.wraps(test)
    def run(*args: P.args, **kwargs: P.kwargs) -> T:
        return run_virtual(test(*args, **kwargs))

    return run
