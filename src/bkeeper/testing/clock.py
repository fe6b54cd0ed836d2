"""A fake :class:`bkeeper.common.clock.Clock` for tests: time moves only when told to.

Pure state machines take the time as an argument; components that read it take a ``Clock``.
Tests hand them a :class:`FakeClock` and move it with :meth:`FakeClock.advance`, so timeouts
and ages are decided without sleeping.
"""

from __future__ import annotations

__all__ = ["FakeClock"]


class FakeClock:
    """Monotonic seconds and wall milliseconds that advance together, only on request."""

    def __init__(self, monotonic_s: float = 1000.0, wall_ms: int = 1_700_000_000_000) -> None:
        self._monotonic_s = monotonic_s
        self._wall_ms = wall_ms

    def monotonic(self) -> float:
        return self._monotonic_s

    def wall_ms(self) -> int:
        return self._wall_ms

    def advance(self, seconds: float) -> None:
        """Move both clocks forward by ``seconds`` (never backwards)."""
        if seconds < 0:
            raise ValueError(f"a clock never goes back; asked to advance {seconds} s")
        self._monotonic_s += seconds
        self._wall_ms += round(seconds * 1000)
