"""The clock protocol: every component that needs time takes a ``Clock``.

``SystemClock`` reads the monotonic and wall clocks; tests pass a fake clock instead.
"""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["Clock", "SystemClock"]


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
