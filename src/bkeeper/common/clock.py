"""The clock protocol: every component that needs time takes a ``Clock``.

``SystemClock`` reads the monotonic and wall clocks; tests pass a fake clock instead. A
component given no clock takes :func:`default_clock`: the system's, unless a process-wide
default was set with :func:`set_default_clock` (the simulator's virtual clock, for the length
of a simulated run, so that nothing in it reads real time).
"""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["Clock", "SystemClock", "default_clock", "set_default_clock"]


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds from an arbitrary origin, never going backwards."""
        ...

    def wall_ms(self) -> int:
        """Milliseconds since the Unix epoch."""
        ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000


_SYSTEM = SystemClock()
_default: Clock = _SYSTEM


def default_clock() -> Clock:
    """The clock of a component given none (module doc)."""
    return _default


def set_default_clock(clock: Clock | None) -> Clock:
    """Make ``clock`` the default (None: the system's again); returns the one it replaces."""
    global _default
    previous, _default = _default, (clock if clock is not None else _SYSTEM)
    return previous
