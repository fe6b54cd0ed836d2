"""How a compaction pass goes easy on the bookie: on a thread of lowered CPU priority, and
throttled to a copy rate and a share of the time (:mod:`bkeeper.storage.compaction`)."""

from __future__ import annotations

from collections.abc import Callable

from bkeeper.common.clock import Clock
from bkeeper.common.threads import OS_THREADS, Event, Threads

__all__ = ["CompactionThrottle", "on_a_lower_priority_thread"]


def on_a_lower_priority_thread(work: Callable[[], None], threads: Threads = OS_THREADS) -> None:
    """Run ``work`` on a thread of its own whose CPU priority is lowered (``threads``'
    ``lower_priority``: by :data:`~bkeeper.common.threads.LOWER_PRIORITY_NICE_INCREMENT`
    where the OS allows it; Linux sets it per thread), and wait for it: on a busy machine the
    pass's copying then yields the CPU to request handling, this process's and other
    bookies'. A thread of its own, because a lowered priority cannot be raised again without
    privileges."""
    failures: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # handed to the waiting caller below
            failures.append(exc)

    thread = threads.thread(run, "bkeeper-compaction", lower_priority=True)
    thread.start()
    thread.join()
    if failures:
        raise failures[0]


class CompactionThrottle:
    """Keeps copying under ``rate`` bytes a second (0: no limit) and working at most
    ``time_share`` of the time; waits on ``stop``."""

    def __init__(self, rate: int, time_share: float, stop: Event, clock: Clock) -> None:
        self._rate = rate
        self._pause_per_work = 1 / time_share - 1
        self._stop = stop
        self._clock = clock
        self._started = clock.monotonic()
        self._spent = 0

    def spent(self, size: int, seconds: float) -> None:
        """After ``size`` bytes copied in ``seconds`` of work (reading, copying, syncing):
        pause ``1 / share - 1`` times as long, and as long as the rate needs."""
        if self._pause_per_work and seconds > 0:
            self._stop.wait(seconds * self._pause_per_work)
        if not self._rate:
            return
        self._spent += size
        ahead = self._spent / self._rate - (self._clock.monotonic() - self._started)
        if ahead > 0:
            self._stop.wait(ahead)
