"""Stopping a campaign with SIGTERM (as a CI runner or systemd does) or Ctrl-C.

The SIGTERM handler raises ``KeyboardInterrupt`` so that the run unwinds as Ctrl-C does
(namespaces, tmpfs mounts and processes cleaned up). A signal handler's exception can be
lost, though: when the handler happens to run inside a finalizer (``__del__``, a weakref or
GC callback), Python prints "Exception ignored" and goes on, and the run would carry on to
its end as if nothing had been asked. So the handler also remembers the signal
(:func:`interrupt`), and the harness asks again between steps (:func:`check`) and, while a
run's event loop runs, every ``WATCH_S`` (:func:`watch`)."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable
from typing import NoReturn, TypeVar

__all__ = ["WATCH_S", "check", "install", "interrupt", "requested", "reset", "watch", "watched"]

T = TypeVar("T")

#: How often a running event loop looks whether a stop was asked for.
WATCH_S = 0.2

_signal: list[int] = []  # the signal that asked for the stop, once one has


def interrupt(signum: int, frame: object = None) -> NoReturn:
    """The signal handler: remember the stop, then unwind as Ctrl-C does."""
    if not _signal:
        _signal.append(signum)
    raise KeyboardInterrupt(f"signal {signum}")


def install() -> None:
    """Make SIGTERM and Ctrl-C (SIGINT) stop the harness this way (main thread only)."""
    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGINT, interrupt)


def requested() -> int | None:
    """The signal that asked for a stop, if one has."""
    return _signal[0] if _signal else None


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


def reset() -> None:
    """Forget a stop (tests)."""
    _signal.clear()
