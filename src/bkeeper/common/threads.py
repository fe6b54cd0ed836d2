"""Threads as a port: what background work runs on and waits with.

The storage engine runs its journal, its flusher and its compaction passes on threads of their
own, and those threads wait on conditions and events. It takes them from a :class:`Threads`:

* :data:`OS_THREADS` (:class:`OsThreads`): real ``threading`` daemon threads, conditions and
  events, as in production;
* a deterministic simulator's, which runs every such thread on the one OS thread of its event
  loop (``bkeeper.sim.green``), so that a run replays exactly from its seed.

Contract, the one ``threading`` keeps (an implementation may add limits of its own, which it
documents):

* :meth:`Threads.thread` makes a :class:`Worker` that runs ``target`` once, after
  :meth:`Worker.start`; :meth:`Worker.join` waits until it returned; :meth:`Worker.is_current`
  says whether the caller runs on that worker (so a worker never joins itself).
  ``lower_priority`` asks for a lowered CPU priority (a nice increment of
  :data:`LOWER_PRIORITY_NICE_INCREMENT`, where the OS allows it per thread); a hint, which an
  implementation without OS threads ignores.
* :meth:`Threads.condition` makes a :class:`Condition` over ``lock`` (a ``threading.Lock``):
  ``with`` takes the lock; :meth:`Condition.wait` releases it while waiting and holds it again
  when it returns, True if notified and False once ``timeout`` seconds passed; ``notify`` and
  ``notify_all`` are called with the lock held.
* :meth:`Threads.event` makes an :class:`Event` (``threading.Event``'s methods).

Locks are plain ``threading.Lock`` objects whatever the implementation.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Protocol

__all__ = [
    "LOWER_PRIORITY_NICE_INCREMENT",
    "OS_THREADS",
    "Condition",
    "Event",
    "OsThreads",
    "Threads",
    "Worker",
]

log = logging.getLogger(__name__)

#: How much a ``lower_priority`` thread lowers its CPU priority (a nice increment).
LOWER_PRIORITY_NICE_INCREMENT = 10


class Worker(Protocol):
    """A thread of work: ``target`` run once (see :meth:`Threads.thread`)."""

    def start(self) -> None: ...

    def join(self) -> None:
        """Wait until the target returned (or raised)."""
        ...

    def is_alive(self) -> bool:
        """Started and not yet ended."""
        ...

    def is_current(self) -> bool:
        """Whether the caller runs on this worker."""
        ...


class Condition(Protocol):
    """``threading.Condition``'s methods, over the lock it was made with."""

    def __enter__(self) -> bool: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
        /,
    ) -> None: ...

    def wait(self, timeout: float | None = None) -> bool: ...

    def notify(self, n: int = 1) -> None: ...

    def notify_all(self) -> None: ...


class Event(Protocol):
    """``threading.Event``'s methods."""

    def is_set(self) -> bool: ...

    def set(self) -> None: ...

    def clear(self) -> None: ...

    def wait(self, timeout: float | None = None) -> bool: ...


class Threads(Protocol):
    """Makes the threads, conditions and events of a component (module doc)."""

    def thread(
        self, target: Callable[[], None], name: str, *, lower_priority: bool = False
    ) -> Worker: ...

    def condition(self, lock: threading.Lock) -> Condition: ...

    def event(self) -> Event: ...


class _OsWorker:
    """A daemon ``threading.Thread``."""

    def __init__(self, target: Callable[[], None], name: str) -> None:
        self._thread = threading.Thread(target=target, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self) -> None:
        self._thread.join()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def is_current(self) -> bool:
        return threading.current_thread() is self._thread


def _at_lower_priority(target: Callable[[], None], name: str) -> Callable[[], None]:
    """``target``, first lowering the CPU priority of the thread it runs on (Linux sets it
    per thread; elsewhere, or where it is not allowed, the thread keeps full priority). A
    thread of its own, because a lowered priority cannot be raised again without
    privileges."""

    def run() -> None:
        try:
            os.setpriority(
                os.PRIO_PROCESS, threading.get_native_id(), LOWER_PRIORITY_NICE_INCREMENT
            )
        except (OSError, AttributeError) as exc:  # not Linux, or not allowed: full priority
            log.debug("%s runs at normal priority: %s", name, exc)
        target()

    return run


class OsThreads:
    """Real threads: daemon ``threading.Thread`` objects, ``threading.Condition`` and
    ``threading.Event``."""

    def thread(
        self, target: Callable[[], None], name: str, *, lower_priority: bool = False
    ) -> Worker:
        if lower_priority:
            target = _at_lower_priority(target, name)
        return _OsWorker(target, name)

    def condition(self, lock: threading.Lock) -> Condition:
        return threading.Condition(lock)

    def event(self) -> Event:
        return threading.Event()


#: The real threads, what every component uses unless given others.
OS_THREADS: Threads = OsThreads()
