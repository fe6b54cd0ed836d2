"""Ledger recovery: fence the old writer, find the true end, seal the ledger.

Steps (BookKeeper's, §0 of the reference):

1. State OPEN -> IN_RECOVERY by compare-and-set (a CLOSED ledger needs nothing).
2. Fence, find the end after the LAC and re-write what is found: the decisions are
   :class:`~bkeeper.client.recovery_machine.RecoveryMachine`'s (its module doc has the rules); this
   shell sends its questions (one request per bookie, each bounded by ``read_timeout_ms``),
   feeds back the replies, and cancels the requests of every question as soon as it is
   settled: a silent bookie costs one timeout per batch, not one per entry, and no request of
   a recovery outlives it.
3. CLOSED with last entry and length by compare-and-set. A lost CAS re-reads: a CLOSED
   ledger means a concurrent recovery finished first, and its end is taken as is.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any

from bkeeper.client.context import ClientContext
from bkeeper.client.entry import Entry
from bkeeper.client.recovery_machine import Ask, Question, RecoveryMachine, Step, classify
from bkeeper.common import bugs
from bkeeper.common.cas import cas_update
from bkeeper.common.errors import BKeeperError, UnauthorizedAccessError
from bkeeper.common.tasks import TASKS_MAX, TaskOwner, abandon, within
from bkeeper.meta.ledger_metadata import LedgerMetadata, LedgerState
from bkeeper.meta.store import Versioned
from bkeeper.wire.digest import DigestManager, master_key
from bkeeper.wire.messages import AddRequest, ReadRequest, Request

__all__ = ["check_password", "recover_ledger"]

log = logging.getLogger(__name__)


def check_password(ledger_id: int, meta: LedgerMetadata, password: bytes) -> None:
    """``UnauthorizedAccessError`` unless ``password`` is the one the metadata holds (a
    ledger whose metadata holds none is checked by the bookies alone: EUA on a wrong key)."""
    if meta.has_password and meta.password != password:
        raise UnauthorizedAccessError(f"ledger {ledger_id}: wrong password")


class _Recovery:
    """Runs one :class:`RecoveryMachine`: its requests are tasks of one :class:`TaskOwner`."""

    def __init__(self, ctx: ClientContext, ledger_id: int, meta: LedgerMetadata, password: bytes):
        self.ctx = ctx
        self.ledger_id = ledger_id
        self.key = master_key(password)
        self.digest = DigestManager(ledger_id, meta.digest_type, password, Entry)
        self.timeout_s = ctx.config.read_timeout_ms / 1000.0
        batch = ctx.config.recovery_batch_entries
        self.machine = RecoveryMachine(ledger_id, meta, batch)
        in_flight_max = max(meta.ensemble_size, batch * meta.write_quorum)
        self.tasks = TaskOwner(f"ledger {ledger_id} recovery", tasks_max=TASKS_MAX + in_flight_max)
        self.requests: dict[Question, list[asyncio.Future[Any]]] = {}
        #: every request sent on a live connection and not answered yet (abandoned at the end)
        self.unanswered: set[asyncio.Future[Any]] = set()
        self.outcome: asyncio.Future[tuple[int, int]] = asyncio.get_running_loop().create_future()

    async def run(self) -> tuple[int, int]:
        """(last entry id, length) of the ledger, once fenced and its end re-written."""
        try:
            self.perform(self.machine.start())
            return await self.outcome
        finally:
            abandon(self.unanswered)  # the tasks' requests: closed with the tasks
            await self.tasks.aclose()

    def perform(self, step: Step) -> None:
        current = asyncio.current_task()
        for question in step.settled:
            abandon(t for t in self.requests.pop(question, ()) if t is not current)
        if step.error is not None:
            if not self.outcome.done():
                self.outcome.set_exception(step.error)
            return
        if step.result is not None:
            if not self.outcome.done():
                self.outcome.set_result(step.result)
            return
        for question in step.ask:
            request = self.request(question)
            self.requests[question] = [
                self.send(question, position, request) for position in range(len(question.bookies))
            ]

    def send(self, question: Question, position: int, request: Request) -> asyncio.Future[Any]:
        """Ask one bookie of ``question``: on its live connection, a request whose answer is
        a callback (no task per request: a recovery asks ensemble x entries); otherwise a
        task that connects first."""
        conn = self.ctx.pool.connection_nowait(question.bookies[position])
        if conn is None:
            return self.tasks.spawn(self.ask(question, position, request), question.ask.value)
        loop = asyncio.get_running_loop()
        try:
            future = conn.send(request)
        except BKeeperError as exc:
            future = loop.create_future()
            future.set_exception(exc)  # answered by the callback, like any other (not inline)
        timer = loop.call_later(self.timeout_s, self._time_out, future)
        future.add_done_callback(functools.partial(self._answered, question, position, timer))
        self.unanswered.add(future)
        return future

    def _time_out(self, future: asyncio.Future[Any]) -> None:
        if not future.done():
            future.set_exception(TimeoutError(f"no answer within {self.timeout_s:g}s"))

    def _answered(
        self,
        question: Question,
        position: int,
        timer: asyncio.TimerHandle,
        future: asyncio.Future[Any],
    ) -> None:
        timer.cancel()
        self.unanswered.discard(future)
        if future.cancelled():
            return  # abandoned: its question was settled
        reply = future.exception() or future.result()
        try:
            self.answer(question, position, reply)
        except Exception as exc:  # a bug in the machine: the recovery fails, not the loop
            if not self.outcome.done():
                self.outcome.set_exception(exc)

    def request(self, question: Question) -> Request:
        if question.ask is Ask.REWRITE:
            entry = question.entry
            assert entry is not None
            body = self.digest.encode_entry(entry.entry_id, entry.lac, entry.length, entry.payload)
            return AddRequest(self.ledger_id, entry.entry_id, self.key, body, recovery=True)
        fence = not (bugs.ACTIVE and bugs.active("recovery-no-fence"))
        return ReadRequest(self.ledger_id, question.entry_id, fence=fence, master_key=self.key)

    async def ask(self, question: Question, position: int, request: Request) -> None:
        """Send ``request`` to one bookie of ``question``; feed the machine its reply."""
        bookie = question.bookies[position]
        try:
            reply: object = await within(self.ctx.pool.send(bookie, request), self.timeout_s)
        except Exception as exc:  # no answer: the machine decides what that means
            reply = exc
        self.answer(question, position, reply)

    def answer(self, question: Question, position: int, reply: object) -> None:
        answer = classify(question, reply, self.digest)
        if answer.detail.startswith("bad replica"):
            log.warning("ledger %d entry %d: %s", self.ledger_id, question.entry_id, answer.detail)
        self.perform(self.machine.reply(question, position, answer))


async def recover_ledger(
    ctx: ClientContext, ledger_id: int, password: bytes
) -> Versioned[LedgerMetadata]:
    """Fence and seal ``ledger_id``; returns its CLOSED metadata."""

    async def read() -> Versioned[LedgerMetadata]:
        return await ctx.ledgers.read(ledger_id)

    async def mark_in_recovery(held: Versioned[LedgerMetadata]) -> Versioned[LedgerMetadata]:
        if held.value.state is not LedgerState.OPEN:
            return held
        return await ctx.ledgers.write(ledger_id, held.value.in_recovery(), held.version)

    retries = ctx.config.metadata_retries_max
    versioned = await read()
    check_password(ledger_id, versioned.value, password)
    versioned = await cas_update(
        read,
        mark_in_recovery,
        what=f"ledger {ledger_id}: could not start recovery",
        attempts_max=retries,
        current=versioned,
    )
    if versioned.value.state is LedgerState.CLOSED:
        return versioned
    last, length = await _Recovery(ctx, ledger_id, versioned.value, password).run()
    log.info("ledger %d recovered: last entry %d, %d bytes", ledger_id, last, length)

    async def close(held: Versioned[LedgerMetadata]) -> Versioned[LedgerMetadata]:
        if held.value.state is LedgerState.CLOSED:
            return held
        return await ctx.ledgers.write(ledger_id, held.value.closed(last, length), held.version)

    what = f"ledger {ledger_id}: could not close after recovery"
    return await cas_update(read, close, what=what, attempts_max=retries, current=versioned)
