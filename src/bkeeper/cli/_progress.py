"""Progress of long work, on standard error: a live line (or bar) on a terminal, plain lines
otherwise.

Rich draws nothing into a pipe or a file until the work ends (and a transient display not
even then), so a CI log or ``2> file`` would show a long command as silent. Here, when
standard error is not a terminal, a thread of its own prints ``describe()`` as one plain line
every :data:`PLAIN_INTERVAL_S` (the first after one interval: work shorter than that prints
nothing; ``BKEEPER_PROGRESS_INTERVAL_S`` in the environment sets another interval, e.g. for
a quieter CI log). On a terminal the line is redrawn in place (rich), :data:`LIVE_REFRESH_S`
apart.

Nothing here runs on the caller's path: ``describe()`` is called from the ticking thread,
so it must only read (counters, a phase name).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.text import Text

__all__ = [
    "INTERVAL_ENV",
    "LIVE_REFRESH_S",
    "PLAIN_INTERVAL_S",
    "elapsed",
    "plain_interval_s",
    "status_line",
    "ticking",
]

#: Seconds between two plain progress lines (standard error not a terminal).
PLAIN_INTERVAL_S = 2.0
#: Seconds between two redraws of the live line on a terminal.
LIVE_REFRESH_S = 0.5
#: The environment variable that sets the plain lines' interval (seconds, > 0).
INTERVAL_ENV = "BKEEPER_PROGRESS_INTERVAL_S"


def plain_interval_s() -> float:
    """:data:`INTERVAL_ENV` if it holds a positive number of seconds, else
    :data:`PLAIN_INTERVAL_S`."""
    try:
        value = float(os.environ.get(INTERVAL_ENV, ""))
    except ValueError:
        return PLAIN_INTERVAL_S
    return value if value > 0 else PLAIN_INTERVAL_S


def elapsed(seconds: float) -> str:
    """``42 s``, ``3 min 05 s``, ``2 h 03 min``."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


@contextmanager
def ticking(
    tick: Callable[[], None], interval_s: float, *, first_s: float | None = None
) -> Iterator[None]:
    """Call ``tick()`` from a daemon thread every ``interval_s`` (the first after
    ``first_s``, default one interval) until the block ends."""
    done = threading.Event()

    def loop() -> None:
        wait = interval_s if first_s is None else first_s
        while not done.wait(wait):
            tick()
            wait = interval_s

    thread = threading.Thread(target=loop, name="bkeeper-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=1.0)


@contextmanager
def status_line(
    describe: Callable[[], str],
    console: Console | None = None,
    *,
    interval_s: float | None = None,
    first_s: float | None = None,
) -> Iterator[Console]:
    """Show ``describe()`` on standard error while the block runs (module doc); yields the
    console to print other lines to (on a terminal, they go above the live line). Into a
    pipe, the first line comes after ``first_s`` (default: one interval)."""
    console = console or Console(stderr=True)
    if not console.is_terminal:

        def print_line() -> None:
            console.print(describe(), markup=False, highlight=False, soft_wrap=True)

        with ticking(print_line, interval_s or plain_interval_s(), first_s=first_s):
            yield console
        return
    with (
        console.status(Text(describe()), refresh_per_second=1 / LIVE_REFRESH_S) as status,
        ticking(lambda: status.update(Text(describe())), LIVE_REFRESH_S),
    ):
        yield console
