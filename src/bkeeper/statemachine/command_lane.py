"""The leader's side of a member: commands in, records appended, results out.

:class:`CommandLane` takes commands while the member leads (:meth:`CommandLane.start` with
the log's writer, until :meth:`CommandLane.fail_pending`), appends them with group commit
(commands submitted while the previous record is being sent go into one record,
:func:`~bkeeper.statemachine.protocol.encode_batch`, up to ``BATCH_COMMANDS_MAX`` commands
and ``BATCH_BYTES_MAX`` bytes), and applies each record once it is acknowledged, in log
order, after telling the member's core (which extends the read lease and says when a
snapshot is due). Read barriers are no-op records; lease reads ask the core. A failed
append steps the leader down (:meth:`CommandLane.wait_failed` wakes the member).

Limits: ``in_flight_max`` commands submitted and not yet applied; ``append_timeout_s`` per
command.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bkeeper.common.clock import Clock
from bkeeper.common.errors import (
    BKeeperError,
    LogFencedError,
    NotLeaderError,
    StateMachineError,
)
from bkeeper.common.tasks import TaskOwner, within
from bkeeper.namedlog import LogWriter, Position
from bkeeper.statemachine.core import Apply, FailPending, MemberCore, TakeSnapshot
from bkeeper.statemachine.protocol import (
    BATCH_BYTES_MAX,
    BATCH_COMMANDS_MAX,
    BATCH_PROPERTIES,
    ITEM_HEAD,
    NOOP_PROPERTIES,
    RsmConfig,
    StateMachine,
    encode_batch,
)

__all__ = ["CommandLane"]


@dataclass
class _Command:
    """A command submitted and not applied yet (``noop``: a read barrier)."""

    command: bytes
    noop: bool
    result: asyncio.Future[Any]


@dataclass
class _Pending:
    """One record appended and not applied yet: the commands it carries."""

    appended: asyncio.Future[Position]
    commands: list[_Command]
    sent_s: float  # the member's monotonic clock, before the append was sent


class CommandLane:
    """The commands of one member while it leads (module doc)."""

    def __init__(
        self,
        config: RsmConfig,
        core: MemberCore[Position],
        machine: StateMachine,
        clock: Clock,
        snapshot: Callable[[], None],
    ) -> None:
        """``snapshot``: called when the core says a snapshot is due."""
        self._config = config
        self._core = core
        self._machine = machine
        self._clock = clock
        self._snapshot = snapshot
        self._leading = asyncio.Event()
        self._writer: LogWriter | None = None
        self._failure = asyncio.Event()
        self._in_flight: collections.deque[_Pending] = collections.deque()
        self._slots = asyncio.Semaphore(config.in_flight_max)
        self._queue: collections.deque[_Command] = collections.deque()
        self._tasks = TaskOwner(f"{config.log_name} commands", error=StateMachineError)
        self._flusher: asyncio.Task[None] | None = None
        self._barrier: asyncio.Future[None] | None = None

    @property
    def leading(self) -> bool:
        return self._leading.is_set()

    async def wait_leading(self, timeout_s: float | None = None) -> None:
        async with asyncio.timeout(timeout_s):
            await self._leading.wait()

    def start(self, writer: LogWriter) -> None:
        """Take commands, appending them with ``writer`` (the core said Lead)."""
        self._failure = asyncio.Event()
        self._writer = writer
        self._leading.set()

    async def wait_failed(self) -> None:
        """Return once an append failed while leading (the lane stepped down)."""
        await self._failure.wait()

    async def aclose(self) -> None:
        await self._tasks.aclose()

    def fail_pending(self, error: BaseException) -> None:
        """Stop taking commands; fail those appended and not applied (their outcome is
        unknown to their callers: the log may hold them, and followers apply them then)."""
        self._leading.clear()
        self._writer = None
        while self._in_flight:
            pending = self._in_flight.popleft()
            pending.appended.add_done_callback(_retrieve)  # nobody drains it any more
            _fail_commands(pending.commands, error)
        _fail_commands(list(self._queue), error)
        self._queue.clear()

    async def submit(self, command: bytes) -> Any:
        """Append ``command`` and apply it once acknowledged; its result.
        ``NotLeaderError`` when this member does not lead (or stopped leading before the
        command was applied: it may still be in the log)."""
        return await self._submit(command, noop=False)

    async def read_barrier(self) -> None:
        """Return once every write acknowledged before the call is applied here, and this
        member still led after the call was made (see the module docstring)."""
        if self._barrier is None:
            self._barrier = asyncio.ensure_future(self._run_barrier())
        await asyncio.shield(self._barrier)

    async def _run_barrier(self) -> None:
        self._barrier = None  # reads from now on need a barrier appended after them
        await self._submit(b"", noop=True)

    def lease_read(self) -> bool:
        """True when this member may answer a linearizable read from its state now, without
        a barrier: it leads and holds a read lease (module doc). Answer at once, with no
        ``await`` between this call and reading the state. Past half the lease, a barrier
        is started to renew it."""
        answer = self._core.lease_read(
            self._clock.monotonic(), barrier_running=self._barrier is not None
        )
        if answer.renew:
            self._barrier = asyncio.ensure_future(self._run_barrier())
            self._barrier.add_done_callback(_retrieve)
        return answer.granted

    async def _submit(self, command: bytes, *, noop: bool) -> Any:
        if not self.leading:
            raise NotLeaderError(f"{self._config.log_name}: this member does not lead")
        loop = asyncio.get_running_loop()
        async with self._slots:
            item = _Command(command, noop, loop.create_future())
            self._queue.append(item)
            if self._flusher is None:
                self._flusher = self._tasks.spawn(self._flush(), "append")
            try:
                return await within(asyncio.shield(item.result), self._config.append_timeout_s)
            except TimeoutError:
                # Nobody awaits the result any more: its failure (the step-down fails every
                # command) is read, not left for asyncio to report as never retrieved.
                item.result.add_done_callback(_retrieve)
                self._fail(TimeoutError("append timed out"))
                raise NotLeaderError(
                    f"{self._config.log_name}: the append outlived "
                    f"{self._config.append_timeout_s}s; the leader steps down"
                ) from None
            except asyncio.CancelledError:  # the caller went away: the same
                item.result.add_done_callback(_retrieve)
                raise

    def _take_batch(self) -> list[_Command]:
        """The queued commands one record takes (group commit: what queued meanwhile)."""
        items = [self._queue.popleft()]
        size = len(items[0].command)
        while self._queue and len(items) < BATCH_COMMANDS_MAX:
            size += len(self._queue[0].command) + ITEM_HEAD.size
            if size > BATCH_BYTES_MAX:
                break
            items.append(self._queue.popleft())
        return items

    async def _flush(self) -> None:
        """Append the queued commands, as many to a record as queued while the previous
        append was being sent; in order."""
        name = self._config.log_name
        try:
            while self._queue:
                items = self._take_batch()
                writer = self._writer
                if writer is None or not self.leading:
                    _fail_commands(items, NotLeaderError(f"{name}: this member does not lead"))
                    continue
                if len(items) == 1:
                    payload = items[0].command
                    properties = NOOP_PROPERTIES if items[0].noop else None
                else:
                    payload = encode_batch([(i.noop, i.command) for i in items])
                    properties = BATCH_PROPERTIES
                sent_s = self._clock.monotonic()
                try:
                    appended = await writer.append_async(payload, properties=properties)
                except BKeeperError as exc:
                    _fail_commands(items, NotLeaderError(f"{name}: append failed: {exc}"))
                    self._fail(exc)
                    continue
                if self._writer is not writer:  # stepped down while sending
                    _fail_commands(items, NotLeaderError(f"{name}: leadership ended"))
                    continue
                self._in_flight.append(_Pending(appended, items, sent_s))
                appended.add_done_callback(lambda _f: self._drain())
        finally:
            self._flusher = None

    def _fail(self, exc: BaseException) -> None:
        """The writer failed: step down (``run`` follows again)."""
        fenced = isinstance(exc, LogFencedError)
        if FailPending() in self._core.append_failed(fenced=fenced):
            self.fail_pending(NotLeaderError(f"{self._config.log_name}: the writer failed: {exc}"))
        self._failure.set()

    def _drain(self) -> None:
        """Apply acknowledged records in log order (the head first)."""
        while self._in_flight and self._in_flight[0].appended.done():
            pending = self._in_flight.popleft()
            error = pending.appended.exception()
            if error is not None:
                name = self._config.log_name
                _fail_commands(pending.commands, NotLeaderError(f"{name}: append failed: {error}"))
                self._fail(error)
                return
            commands = [item.command for item in pending.commands if not item.noop]
            position = pending.appended.result()
            for action in self._core.append_acked(position, pending.sent_s, commands):
                if isinstance(action, Apply):
                    self._apply_commands(pending.commands, position)
                elif isinstance(action, TakeSnapshot):
                    self._snapshot()
            for item in pending.commands:  # with nothing to apply, the noops are done too
                if item.noop and not item.result.done():
                    item.result.set_result(None)

    def _apply_commands(self, items: list[_Command], position: Position) -> None:
        """Apply acknowledged commands (a noop, a read barrier's, just completes); each
        one's result (or error) is its caller's."""
        for item in items:
            if item.noop:
                if not item.result.done():
                    item.result.set_result(None)
                continue
            try:
                result = self._machine.apply(item.command, position)
            except Exception as exc:  # the machine's own error is the command's result
                if not item.result.done():
                    item.result.set_exception(exc)
                continue
            if not item.result.done():
                item.result.set_result(result)


def _retrieve(future: asyncio.Future[Any]) -> None:
    """An outcome nobody may await any more (a lease renewal's: its failure is the
    leader's, who steps down; a command's whose caller gave up): read here."""
    if not future.cancelled():
        future.exception()


def _fail_commands(commands: list[_Command], error: BaseException) -> None:
    for item in commands:
        if not item.result.done():
            item.result.set_exception(error)
