"""Sending copied entries to their new bookie: pipelined recovery adds, throttled by bytes/s.

:class:`RecoveryAddSink` is an :data:`~bkeeper.autorecovery.entry_copy.EntrySink` that sends
each entry to one target bookie as a recovery add (``AddRequest(recovery=True)``, high
priority, accepted on a fenced ledger), without waiting for the answer: it returns as soon as
the batch is sent, so reading the next batch overlaps with the target storing this one. At
most ``in_flight_max`` adds await an answer (the sink waits for room before sending more);
:meth:`RecoveryAddSink.drain` waits for every answer. An add that fails (an error status, the
connection lost, or no answer at all for ``answer_timeout_s``) fails the sink: the next call
and ``drain`` raise it. An add is answered EOK only once the target made it durable.

:class:`Throttle` spreads bytes over time at ``rate_bytes_per_s`` (0: no limit) and keeps at
most ``bytes_in_flight_max`` bytes of recovery adds unanswered (0: no limit; an entry bigger
than that goes alone); one throttle is shared by every ledger a worker copies, so both limits
are the worker's. The window is what keeps repair from flooding the targets: their journals
commit the recovery adds with the applications' adds, so megabytes queued ahead of an
application's add are milliseconds added to its latency.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from bkeeper.client.pool import BookiePool, Connection
from bkeeper.common.clock import Clock
from bkeeper.common.errors import BKeeperError, BookieUnavailableError, ConfigError
from bkeeper.common.tasks import within
from bkeeper.wire.codes import StatusCode, error_for_status
from bkeeper.wire.messages import AddRequest

__all__ = ["THROTTLE_BURST_S", "RecoveryAddSink", "Throttle"]

#: How far ahead of its rate a throttle lets a sender get before making it wait: bytes worth
#: this many seconds go out at once.
THROTTLE_BURST_S = 0.05


class Throttle:
    """Bytes at ``rate_bytes_per_s`` at most (averaged over :data:`THROTTLE_BURST_S`), and at
    most ``bytes_in_flight_max`` of them unanswered (see the module doc)."""

    def __init__(self, rate_bytes_per_s: int, clock: Clock, bytes_in_flight_max: int = 0) -> None:
        if rate_bytes_per_s < 0:
            raise ConfigError(f"rate_bytes_per_s: must be an integer >= 0, got {rate_bytes_per_s}")
        if bytes_in_flight_max < 0:
            raise ConfigError(
                f"bytes_in_flight_max: must be an integer >= 0, got {bytes_in_flight_max}"
            )
        self.rate_bytes_per_s = rate_bytes_per_s
        self.bytes_in_flight_max = bytes_in_flight_max
        self.bytes_in_flight = 0
        self._room = asyncio.Event()
        self._clock = clock
        self._free_at = 0.0  # monotonic time at which everything sent so far is "paid"

    async def admit(self, size: int, timeout_s: float) -> None:
        """Wait until ``size`` more bytes fit in the window, then count them in flight;
        ``TimeoutError`` if no room came within ``timeout_s`` of the last answer."""
        cap = self.bytes_in_flight_max
        while cap and self.bytes_in_flight and self.bytes_in_flight + size > cap:
            self._room.clear()
            await within(self._room.wait(), timeout_s)
        self.bytes_in_flight += size

    def release(self, size: int) -> None:
        """``size`` bytes admitted are answered (or given up)."""
        self.bytes_in_flight -= size
        self._room.set()

    def delay_s(self, size: int) -> float:
        """Account for ``size`` bytes sent now; how long the sender should wait after."""
        if not self.rate_bytes_per_s:
            return 0.0
        now = self._clock.monotonic()
        self._free_at = max(self._free_at, now) + size / self.rate_bytes_per_s
        return max(0.0, self._free_at - now - THROTTLE_BURST_S)

    async def take(self, size: int) -> None:
        delay = self.delay_s(size)
        if delay > 0:
            await asyncio.sleep(delay)


class RecoveryAddSink:
    """Sends a ledger's entries to ``target`` as recovery adds (see the module doc)."""

    def __init__(
        self,
        pool: BookiePool,
        target: str,
        ledger_id: int,
        master_key: bytes,
        *,
        in_flight_max: int,
        answer_timeout_s: float,
        throttle: Throttle | None = None,
    ) -> None:
        if in_flight_max < 1:
            raise ConfigError(f"in_flight_max: must be a positive integer, got {in_flight_max}")
        self._pool = pool
        self.target = target
        self._ledger_id = ledger_id
        self._key = master_key
        self._in_flight_max = in_flight_max
        self._timeout_s = answer_timeout_s
        self._throttle = throttle
        self._in_flight = 0
        self._held = 0  # bytes of this sink's adds counted in the throttle's window
        self._abandoned = False
        self._room = asyncio.Event()
        self._error: BaseException | None = None
        self.entries_sent = 0
        self.bytes_sent = 0

    async def __call__(self, batch: list[tuple[int, bytes]]) -> None:
        self._check()
        conn = await self._connection()
        ledger_id, key, size = self._ledger_id, self._key, 0
        for entry_id, body in batch:
            if self._in_flight >= self._in_flight_max:
                await self._wait_below(self._in_flight_max)
                self._check()
            if self._throttle is not None:
                await self._admit(len(body))
            request = AddRequest(ledger_id, entry_id, key, body, recovery=True, high_priority=True)
            conn.send(request).add_done_callback(functools.partial(self._answered, len(body)))
            self._in_flight += 1
            size += len(body)
        self.entries_sent += len(batch)
        self.bytes_sent += size
        if self._throttle is not None:
            await self._throttle.take(size)

    async def drain(self) -> None:
        """Wait for the answer to every add sent; raise the first failure."""
        await self._wait_below(1)
        self._check()

    def abandon(self) -> None:
        """Stop counting this sink's unanswered adds in the throttle's window (call it when
        done with the sink, failed or not: an add never answered must not hold the window
        of the worker's other ledgers)."""
        if not self._abandoned:
            self._abandoned = True
            if self._throttle is not None and self._held:
                self._throttle.release(self._held)
            self._held = 0

    async def _admit(self, size: int) -> None:
        assert self._throttle is not None
        try:
            await self._throttle.admit(size, self._timeout_s)
        except TimeoutError:
            raise BookieUnavailableError(
                f"target bookie {self.target}: no room for recovery adds of ledger "
                f"{self._ledger_id}: {self._throttle.bytes_in_flight} bytes unanswered for "
                f"{self._timeout_s:g} s"
            ) from None
        self._held += size
        self._check()

    async def _connection(self) -> Connection:
        try:
            return await self._pool.connection(self.target)
        except BKeeperError as exc:
            raise BookieUnavailableError(f"target bookie {self.target}: {exc}") from exc

    def _answered(self, size: int, future: asyncio.Future[Any]) -> None:
        self._in_flight -= 1
        self._room.set()
        if self._throttle is not None and not self._abandoned:
            self._held -= size
            self._throttle.release(size)
        if self._error is not None:
            return
        if future.cancelled():
            self._error = BookieUnavailableError(f"target bookie {self.target}: add cancelled")
        elif (exc := future.exception()) is not None:
            self._error = exc
        elif future.result().status is not StatusCode.EOK:
            response = future.result()
            self._error = error_for_status(
                response.status,
                f"recovery add of ledger {self._ledger_id} entry {response.entry_id} "
                f"to {self.target}",
            )

    async def _wait_below(self, limit: int) -> None:
        """Wait until fewer than ``limit`` adds are in flight (or one failed); each answer
        must come within ``answer_timeout_s`` of the previous one."""
        while self._in_flight >= limit and self._error is None:
            self._room.clear()
            try:
                await within(self._room.wait(), self._timeout_s)
            except TimeoutError:
                raise BookieUnavailableError(
                    f"target bookie {self.target}: {self._in_flight} recovery adds of ledger "
                    f"{self._ledger_id} unanswered for {self._timeout_s:g} s"
                ) from None

    def _check(self) -> None:
        if self._error is not None:
            raise self._error
