"""Shared subscriptions: several consumers at once, each record delivered to one of them.

A :class:`SharedConsumer` takes work by *claims*
(:class:`~bkeeper.namedlog.core.subscription_state.Claim`):
it reads up to ``claim_records`` records of one ledger from where dispatching is (more to
end at an entry's end: a claim holds whole record batches), and records
the claim (and the new dispatching point) in the subscription's state by compare-and-set; a
consumer that loses the race reads again from the new point. A claim must be acknowledged
(record by record: ``ack_individual``; a cumulative ack means nothing across consumers)
before ``ack_timeout_ms``; once past it, with records not acknowledged, any consumer that finds
no new records takes it over and gets those records again (at-least-once: the slow consumer
may still be working on them). Claims are read again from the log, so a claim taken over
costs a reader; at most ``CLAIMS_MAX`` claims are open at once.

A chunked record (:mod:`bkeeper.namedlog.core.chunks`) is claimed from its first chunk to its last:
acknowledging it acknowledges every chunk, and a claim taken over delivers it again whole.

Acks are gathered and flushed as for an exclusive consumer
(:class:`~bkeeper.namedlog.subscriptions.exclusive.Consumer`); consumers are not fenced (acks
are idempotent).
"""

from __future__ import annotations

import asyncio
import collections
import logging
from dataclasses import replace

from bkeeper.common.cas import cas_update
from bkeeper.common.errors import ConfigError
from bkeeper.namedlog.core.records import Position, Record
from bkeeper.namedlog.core.subscription_state import CLAIMS_MAX, Claim, SubscriptionState
from bkeeper.namedlog.handle import LogHandle
from bkeeper.namedlog.reader import LogReader
from bkeeper.namedlog.subscriptions.exclusive import Consumer
from bkeeper.namedlog.subscriptions.options import SubscribeOptions

__all__ = ["SharedConsumer"]

log = logging.getLogger(__name__)

#: How long a claim waits for its first new record before the consumer looks again (s).
_CLAIM_WAIT_S = 0.2
#: Compare-and-set rounds one claim tries before it reads again from scratch.
_CLAIM_ATTEMPTS_MAX = 20


class SharedConsumer(Consumer):
    """One of the consumers of a shared subscription (see the module docstring)."""

    def __init__(
        self,
        named: LogHandle,
        name: str,
        state: SubscriptionState,
        version: int,
        options: SubscribeOptions,
    ) -> None:
        super().__init__(named, name, state, version, options)
        self._ack_timeout_ms = options.ack_timeout_ms
        self._claim_records = options.claim_records
        self._buffer: collections.deque[Record] = collections.deque()
        self._mine: list[Claim] = []  # claims delivered to this consumer

    async def receive(self, timeout_s: float | None = None) -> Record | None:
        """The next record claimed by this consumer, or None if none came in time."""
        self._check_reading()
        clock = self.named.context.clock
        deadline = None if timeout_s is None else clock.monotonic() + timeout_s
        while not self._buffer:
            if not await self._claim():
                left = None if deadline is None else deadline - clock.monotonic()
                if left is not None and left <= 0:
                    return None
                await asyncio.sleep(min(_CLAIM_WAIT_S, left) if left is not None else _CLAIM_WAIT_S)
        record = self._buffer.popleft()
        self._note(record)
        self.delivered = max(record.position, self.delivered or record.position)
        return record

    def ack(self, position: Position) -> None:
        raise ConfigError(
            f"subscription {self.name!r} is shared: acknowledge each record (ack_individual)"
        )

    def _check_delivered(self, position: Position) -> None:
        if not any(
            c.ledger == position.ledger_id and c.first <= position.entry_id <= c.last
            for c in self._mine
        ):
            raise ConfigError(f"ack of {position}: not delivered to this consumer")

    # -- claims ------------------------------------------------------------------------------
    async def _claim(self) -> bool:
        """Claim records (new ones, else an expired claim); True when some were buffered."""

        async def attempt(snapshot: tuple[SubscriptionState, int]) -> bool:
            state, version = snapshot
            now = self.named.context.clock.wall_ms()
            records = await self._read_new(state.dispatch_from)
            if records:
                first, last = records[0].position, records[-1].position
                begins = first.entry_id - records[0].chunks + 1  # a chunked record: its first
                until_ms = now + self._ack_timeout_ms
                claim = Claim(self.consumer_id, first.ledger_id, begins, last.entry_id, until_ms)
                new = state.with_claim(claim)
            else:
                expired = state.expired_claims(now)
                if not expired:
                    return False
                old = expired[0]
                claim = replace(old, consumer=self.consumer_id, until_ms=now + self._ack_timeout_ms)
                new = state.with_claim_taken(old, claim)
                records = await self._read_claim(claim, state)
                log.info(
                    "subscription %s: claim %s:%d-%d of %s taken over (not acknowledged)",
                    self.name,
                    old.ledger,
                    old.first,
                    old.last,
                    old.consumer,
                )
            # Lost: another consumer claimed meanwhile, look again.
            self._version = await self._subs.write(self.named.name, self.name, new, version)
            self._state = new
            mine = [c for c in (*self._mine, claim) if not new.claim_done(c)]
            self._mine = mine[-CLAIMS_MAX:]
            self._buffer.extend(records)
            return bool(records)

        return await cas_update(
            lambda: self._subs.read(self.named.name, self.name),
            attempt,
            on_exhausted=lambda: False,
            what=f"subscription {self.name!r}: a claim",
            attempts_max=_CLAIM_ATTEMPTS_MAX,
        )

    async def _read_new(self, start: Position) -> list[Record]:
        reader = LogReader(self.named, start)
        try:
            await reader.seek()
            records: list[Record] = []
            # Whole entries: a claim never ends inside a batch.
            while len(records) < self._claim_records or _inside_batch(records[-1]):
                record = await reader.next(_CLAIM_WAIT_S if not records else 0.0)
                if record is None:
                    break
                if records and record.position.ledger_id != records[0].position.ledger_id:
                    break  # a claim holds records of one ledger
                records.append(record)
            return records
        finally:
            await reader.close()

    async def _read_claim(self, claim: Claim, state: SubscriptionState) -> list[Record]:
        reader = LogReader(self.named, Position(claim.ledger, claim.first))
        try:
            await reader.seek()
            records: list[Record] = []
            while True:
                record = await reader.next(5.0)
                if record is None or record.position[:2] > (claim.ledger, claim.last):
                    break
                if not state.is_acked(record.position):
                    records.append(record)
            return records
        finally:
            await reader.close()


def _inside_batch(record: Record) -> bool:
    """Whether records of the batch holding ``record`` follow it."""
    return record.position.index < record.entry_records - 1
