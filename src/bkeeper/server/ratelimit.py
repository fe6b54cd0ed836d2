"""Rate-limited logging of client errors: one line per bad connection, never a flood.

A client that sends garbage, opens connections it never uses or overruns a limit is worth a
line in the bookie's log (peer and reason), but a client doing it a million times must not
fill the disk with the same line. :class:`RateLimitedLog` logs through a token bucket of
``rate_per_s`` lines a second with bursts of ``burst``; lines over the limit are counted,
and the count rides on the next line logged ("... (N more lines about connections
suppressed)"), or on its own line when :meth:`RateLimitedLog.flush` finds tokens again.
Client errors never carry a traceback; a bookie bug found by a client (an unexpected
exception) logs one, still within the limit.
"""

from __future__ import annotations

import logging

from bkeeper.common.clock import Clock, default_clock
from bkeeper.common.errors import ConfigError

__all__ = ["RateLimitedLog", "TokenBucket"]


class TokenBucket:
    """``rate_per_s`` tokens a second, at most ``burst`` saved up; starts full."""

    __slots__ = ("_burst", "_last", "_rate", "_tokens")

    def __init__(self, rate_per_s: float, burst: int, now: float) -> None:
        if rate_per_s <= 0 or burst < 1:
            raise ConfigError(f"token bucket: rate {rate_per_s} or burst {burst} is not positive")
        self._rate = rate_per_s
        self._burst = float(burst)
        self._tokens = float(burst)
        self._last = now

    def take(self, now: float) -> bool:
        """Take one token if there is one (refilled up to ``now``)."""
        if now > self._last:
            self._tokens = min(self._burst, self._tokens + (now - self._last) * self._rate)
            self._last = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False


class RateLimitedLog:
    """Logs at most what its token bucket allows and counts the lines it drops."""

    def __init__(
        self,
        logger: logging.Logger,
        rate_per_s: float,
        burst: int,
        clock: Clock | None = None,
        what: str = "lines",
    ) -> None:
        self._logger = logger
        self._what = what
        self._clock: Clock = default_clock() if clock is None else clock
        self._bucket = TokenBucket(rate_per_s, burst, self._clock.monotonic())
        self.suppressed = 0
        self.logged = 0

    def log(self, level: int, message: str, *args: object, exc_info: bool = False) -> None:
        """Log ``message % args`` at ``level`` if the bucket allows, else count it."""
        if not self._bucket.take(self._clock.monotonic()):
            self.suppressed += 1
            return
        if self.suppressed:
            message += " (%d more %s suppressed)"
            args = (*args, self.suppressed, self._what)
            self.suppressed = 0
        self.logged += 1
        self._logger.log(level, message, *args, exc_info=exc_info)

    def warning(self, message: str, *args: object) -> None:
        self.log(logging.WARNING, message, *args)

    def info(self, message: str, *args: object) -> None:
        self.log(logging.INFO, message, *args)

    def flush(self) -> None:
        """Report lines suppressed since the last line logged, when the bucket allows."""
        if self.suppressed and self._bucket.take(self._clock.monotonic()):
            self.logged += 1
            self._logger.warning("%d %s suppressed", self.suppressed, self._what)
            self.suppressed = 0
