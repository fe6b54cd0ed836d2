"""Green threads: the storage engine's threads as greenlets on the event loop's one OS thread.

:class:`GreenThreads` is the :class:`~bkeeper.common.threads.Threads` of the deterministic
simulator: the journals, flushers and compaction passes of every bookie run as greenlets
under one asyncio event loop, so no OS thread and no real time decides what runs when, and
a seed replays exactly.

How it runs:

* The loop runs in the OS thread's main greenlet, the *hub*. A worker is a greenlet whose
  parent is the hub; :meth:`GreenWorker.start` schedules its first run with
  ``loop.call_soon`` (never runs it inside ``start``).
* A worker runs until it waits (``Condition.wait``, ``Event.wait``, ``Worker.join``) or ends,
  then the hub goes on with the loop. Only waits switch: what a worker does between two
  waits is one step of the loop, never interleaved with anything.
* Wake-ups are scheduled, never run at once: ``notify``, ``notify_all``, ``set`` and the end
  of a worker (for its joiners) mark their waiters woken, oldest first, and schedule each
  resumption with ``loop.call_soon`` (the notifier is usually the loop itself, holding the
  lock). A wait with a timeout is a ``loop.call_later`` timer (virtual time in the
  simulator), cancelled when woken first. A resumed wait takes its lock again and returns
  True if woken, False on timeout, as ``threading`` does.
* Waits on the hub (``Storage.close`` joining the journal from a coroutine, say) cannot yield
  to the loop: the hub runs the scheduled resumptions itself, oldest first, until what it
  waits for happened. When none is scheduled and it has not, nothing can happen without
  the loop (a worker waits on a timer, or for a notify no one will send):
  :class:`GreenDeadlockError`, naming each worker and what it waits on. (No time passes
  meanwhile, so a timeout given to a wait on the hub never expires: the same error.)
* Locks stay ``threading.Lock``. On one OS thread a lock found held at a switch is held by
  suspended code that cannot go on first, so where ``threading`` would block (taking a
  condition's lock, or taking it again to return from a wait) this raises
  :class:`GreenDeadlockError` instead of hanging the OS thread: a condition's lock must not
  be held across a wait on anything else.
* An exception that escapes a worker's target is logged and appended to
  :attr:`GreenThreads.errors` (the owner fails the run with it); the worker ends.
* Deterministic: FIFO everywhere (waiters, resumptions, :attr:`GreenThreads.workers`), no
  OS thread, no clock read. Only the OS thread that made the :class:`GreenThreads` (the
  loop's) may use it: a call from another raises ``RuntimeError``.
"""

from __future__ import annotations

import asyncio
import collections
import enum
import logging
import threading
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING

import greenlet

if TYPE_CHECKING:
    from bkeeper.common.threads import Threads

__all__ = [
    "GreenCondition",
    "GreenDeadlockError",
    "GreenEvent",
    "GreenThreads",
    "GreenWorker",
    "WorkerState",
]

log = logging.getLogger(__name__)


class GreenDeadlockError(RuntimeError):
    """A wait that cannot end: the hub waits for what only the running loop could bring, or
    a lock is held by suspended code. A bug in the simulation (or a deadlock the code would
    have with real threads too), so deliberately outside :mod:`bkeeper.common.errors`' tree,
    which the library's handlers catch."""


class WorkerState(enum.Enum):
    NEW = "new"  #: made, not started
    READY = "ready"  #: started or woken: its run is scheduled
    RUNNING = "running"
    WAITING = "waiting"  #: for a notify, a set, a join or a timer (``waiting_on`` says)
    DONE = "done"


class _Wakeup:
    """One wait of one waiter (a worker; None: the hub), and how it ended."""

    __slots__ = ("ended", "lock", "queue", "timer", "woken", "worker")

    def __init__(
        self,
        worker: GreenWorker | None,
        queue: collections.deque[_Wakeup] | None,
        lock: threading.Lock | None = None,
    ) -> None:
        self.worker = worker
        self.queue = queue  # the waiters it is in until it ends (None: a first run)
        self.lock = lock  # taken again before the wait returns
        self.ended = False
        self.woken = False  # ended by a notify (False: by its timeout)
        self.timer: asyncio.TimerHandle | None = None

    def leave(self) -> None:
        """Out of its queue and its timer cancelled (the wait ends without a wake-up)."""
        if self.queue is not None and self in self.queue:
            self.queue.remove(self)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


class _WorkerGreenlet(greenlet.greenlet):  # type: ignore[misc]  # greenlet has no type hints
    """A worker's greenlet, knowing its worker."""

    def __init__(self, worker: GreenWorker, hub: object) -> None:
        super().__init__(worker._main, hub)
        self.worker = worker


class GreenThreads:
    """Threads, conditions and events as greenlets on ``loop`` (module doc). Made on the OS
    thread that runs ``loop``, outside any worker; ``name`` labels its errors (one per
    bookie, say: each component's threads and what they wait on come from one)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, name: str = "green") -> None:
        self.name = name
        self._loop = loop
        self._hub: object = greenlet.getcurrent()
        if isinstance(self._hub, _WorkerGreenlet):
            raise RuntimeError("GreenThreads must be made on the event loop, not in a worker")
        self._thread_id = threading.get_ident()
        self._live: dict[GreenWorker, None] = {}  # started, not ended: in start order
        self._ready: dict[_Wakeup, None] = {}  # resumptions scheduled: in schedule order
        #: Exceptions that escaped a worker's target, in the order they did.
        self.errors: list[BaseException] = []

    # -- the port ----------------------------------------------------------------------
    def thread(
        self, target: Callable[[], None], name: str, *, lower_priority: bool = False
    ) -> GreenWorker:
        """A worker running ``target`` (``lower_priority`` means nothing here)."""
        return GreenWorker(self, target, name)

    def condition(self, lock: threading.Lock) -> GreenCondition:
        return GreenCondition(self, lock)

    def event(self) -> GreenEvent:
        return GreenEvent(self)

    # -- what the owner sees -----------------------------------------------------------
    @property
    def workers(self) -> tuple[GreenWorker, ...]:
        """The workers started and not ended, in start order."""
        return tuple(self._live)

    @property
    def runnable(self) -> bool:
        """Whether a worker's run is scheduled (False: every live worker waits)."""
        return bool(self._ready)

    def describe(self) -> str:
        """One line: each live worker and what it does or waits on."""
        if not self._live:
            return f"{self.name}: no worker alive"
        return f"{self.name}: " + "; ".join(worker.describe() for worker in self._live)

    # -- machinery ---------------------------------------------------------------------
    def _check_thread(self) -> None:
        if threading.get_ident() != self._thread_id:
            raise RuntimeError(
                f"{self.name}: green threads used from another OS thread than their loop's"
            )

    def _current(self) -> GreenWorker | None:
        """The worker the caller runs on; None: the hub."""
        self._check_thread()
        current = greenlet.getcurrent()
        return current.worker if isinstance(current, _WorkerGreenlet) else None

    def _started(self, worker: GreenWorker) -> None:
        self._live[worker] = None
        self._schedule(_Wakeup(worker, None))

    def _ended(self, worker: GreenWorker) -> None:
        self._live.pop(worker, None)

    def _wake(self, wakeup: _Wakeup, woken: bool) -> None:
        """End a wait (the caller took it out of its queue) and schedule its resumption."""
        wakeup.ended, wakeup.woken = True, woken
        if wakeup.timer is not None:
            wakeup.timer.cancel()
            wakeup.timer = None
        if wakeup.worker is not None:  # the hub's own waits see it in their drive
            self._schedule(wakeup)

    def _schedule(self, wakeup: _Wakeup) -> None:
        assert wakeup.worker is not None
        wakeup.worker.state = WorkerState.READY
        self._ready[wakeup] = None
        self._loop.call_soon(self._run_scheduled, wakeup)

    def _time_out(self, wakeup: _Wakeup) -> None:
        wakeup.timer = None
        if not wakeup.ended:
            wakeup.leave()
            self._wake(wakeup, woken=False)

    def _run_scheduled(self, wakeup: _Wakeup) -> None:
        """The loop's callback: resume the worker, unless the hub did already."""
        if wakeup not in self._ready:
            return
        try:
            self._resume(wakeup)
        except GreenDeadlockError as exc:
            log.error("%s", exc)
            self.errors.append(exc)

    def _resume(self, wakeup: _Wakeup) -> None:
        """Switch into the worker (from the hub) until it waits again or ends."""
        del self._ready[wakeup]
        worker = wakeup.worker
        assert worker is not None
        if wakeup.lock is not None and wakeup.lock.locked():
            worker.state = WorkerState.WAITING  # for good: nothing resumes it again
            worker.waiting_on += ", its lock held by suspended code"
            raise GreenDeadlockError(
                f"{self.name}: {worker.name} cannot take its lock again to return from its "
                "wait: the lock is held by code that is suspended (the event loop waiting "
                "while it holds the lock?)"
            )
        worker._switch_in()

    def _suspend(self, wakeup: _Wakeup, timeout: float | None, what: str) -> bool:
        """Wait until ``wakeup`` ends; True if woken (False: timed out)."""
        worker = wakeup.worker
        if worker is None:
            self._drive(lambda: wakeup.ended, what)
            return wakeup.woken
        if timeout is not None:
            wakeup.timer = self._loop.call_later(timeout, self._time_out, wakeup)
        worker.state = WorkerState.WAITING
        worker.waiting_on, worker._wait = what, wakeup
        try:
            greenlet.getcurrent().parent.switch()
        finally:
            worker.waiting_on, worker._wait = "", None
        return wakeup.woken

    def _drive(self, done: Callable[[], bool], what: str) -> None:
        """On the hub: run the scheduled resumptions, oldest first, until ``done()``."""
        while not done():
            if not self._ready:
                raise GreenDeadlockError(
                    f"{what} on the event loop itself cannot end without the loop running: "
                    + self.describe()
                )
            self._resume(next(iter(self._ready)))


class GreenWorker:
    """A green thread (:class:`~bkeeper.common.threads.Worker`): ``state``, and while it
    waits, ``waiting_on`` says what for."""

    def __init__(self, threads: GreenThreads, target: Callable[[], None], name: str) -> None:
        self.name = name
        self.state = WorkerState.NEW
        self.waiting_on = ""
        self._threads = threads
        self._target = target
        self._joiners: collections.deque[_Wakeup] = collections.deque()
        self._greenlet: _WorkerGreenlet | None = None
        self._wait: _Wakeup | None = None  # the wait it is in

    def __repr__(self) -> str:
        return f"<GreenWorker {self.describe()}>"

    def describe(self) -> str:
        if self.state is not WorkerState.WAITING:
            return f"{self.name} {self.state.value}"
        timer = " (a timer set)" if self.waits_on_timer else " (no timer)"
        return f"{self.name} waits on {self.waiting_on}{timer}"

    def start(self) -> None:
        threads = self._threads
        threads._check_thread()
        if self.state is not WorkerState.NEW:
            raise RuntimeError(f"{self.name}: threads can only be started once")
        self._greenlet = _WorkerGreenlet(self, threads._hub)
        threads._started(self)

    def join(self) -> None:
        threads = self._threads
        current = threads._current()
        if self.state is WorkerState.NEW:
            raise RuntimeError(f"{self.name}: cannot join a thread before it is started")
        if current is self:
            raise RuntimeError(f"{self.name}: cannot join the current thread")
        if self.state is WorkerState.DONE:
            return
        wakeup = _Wakeup(current, self._joiners)
        self._joiners.append(wakeup)
        try:
            threads._suspend(wakeup, None, f"join({self.name})")
        finally:
            wakeup.leave()

    def is_alive(self) -> bool:
        return self.state is not WorkerState.NEW and self.state is not WorkerState.DONE

    def is_current(self) -> bool:
        return self._greenlet is not None and greenlet.getcurrent() is self._greenlet

    @property
    def waits_on_timer(self) -> bool:
        """Waiting with a timeout (a timer on the loop wakes it if nothing else does)."""
        wait = self._wait
        return self.state is WorkerState.WAITING and wait is not None and wait.timer is not None

    def _switch_in(self) -> None:
        assert self._greenlet is not None
        self.state = WorkerState.RUNNING
        self._greenlet.switch()

    def _main(self) -> None:
        """The greenlet's body: the target, then wake the joiners."""
        try:
            self._target()
        except greenlet.GreenletExit:
            raise
        except BaseException as exc:  # kept for the owner, who fails the run with it
            log.exception("%s: green thread %s failed", self._threads.name, self.name)
            self._threads.errors.append(exc)
        finally:
            self.state = WorkerState.DONE
            self._threads._ended(self)
            while self._joiners:
                self._threads._wake(self._joiners.popleft(), woken=True)


class GreenCondition:
    """A :class:`~bkeeper.common.threads.Condition` over ``lock`` for green threads."""

    def __init__(self, threads: GreenThreads, lock: threading.Lock) -> None:
        self._threads = threads
        self._lock = lock
        self._waiters: collections.deque[_Wakeup] = collections.deque()

    def __enter__(self) -> bool:
        self._acquire("take")
        return True

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
        /,
    ) -> None:
        self._lock.release()

    def _acquire(self, verb: str) -> None:
        self._threads._check_thread()
        if not self._lock.acquire(blocking=False):
            raise GreenDeadlockError(
                f"{self._threads.name}: cannot {verb} a condition's lock: it is held by code "
                "that is suspended (held across a wait on something else?)"
            )

    def wait(self, timeout: float | None = None) -> bool:
        threads = self._threads
        current = threads._current()
        if not self._lock.locked():
            raise RuntimeError("cannot wait on un-acquired lock")
        if timeout is not None and timeout <= 0:
            return False  # as threading's: nothing else can run and notify meanwhile
        wakeup = _Wakeup(current, self._waiters, self._lock)
        self._waiters.append(wakeup)
        self._lock.release()
        try:
            return threads._suspend(wakeup, timeout, f"condition.wait(timeout={timeout})")
        finally:
            wakeup.leave()
            self._acquire("take again")

    def notify(self, n: int = 1) -> None:
        self._threads._check_thread()
        if not self._lock.locked():
            raise RuntimeError("cannot notify on un-acquired lock")
        waiters = self._waiters
        for _ in range(min(n, len(waiters))):
            self._threads._wake(waiters.popleft(), woken=True)

    def notify_all(self) -> None:
        self.notify(len(self._waiters))


class GreenEvent:
    """An :class:`~bkeeper.common.threads.Event` for green threads."""

    def __init__(self, threads: GreenThreads) -> None:
        self._threads = threads
        self._flag = False
        self._waiters: collections.deque[_Wakeup] = collections.deque()

    def is_set(self) -> bool:
        return self._flag

    def set(self) -> None:
        self._threads._check_thread()
        self._flag = True
        waiters = self._waiters
        while waiters:
            self._threads._wake(waiters.popleft(), woken=True)

    def clear(self) -> None:
        self._flag = False

    def wait(self, timeout: float | None = None) -> bool:
        threads = self._threads
        current = threads._current()
        if self._flag:
            return True
        if timeout is not None and timeout <= 0:
            return False
        wakeup = _Wakeup(current, self._waiters)
        self._waiters.append(wakeup)
        try:
            return threads._suspend(wakeup, timeout, f"event.wait(timeout={timeout})")
        finally:
            wakeup.leave()


if TYPE_CHECKING:  # a GreenThreads is a Threads
    _GREEN_THREADS_ARE_THREADS: type[Threads] = GreenThreads
