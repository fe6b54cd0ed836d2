"""A replicated state machine on a named log: election, terms, catch-up, apply after ack.

This module is the asyncio shell: the decisions are the member's pure core
(:mod:`bkeeper.statemachine.core`, its rules and transition table); the shell performs its
actions (open the writer, read, append, apply, wait, step down, snapshot) and feeds it what
happened, with the time from the member's :class:`~bkeeper.common.clock.Clock`.

A user implements :class:`StateMachine`: ``apply`` a command to the state (deterministically,
the same on every member) and return a result; ``write_snapshot`` the state to a stream;
``restore_snapshot`` from one. :class:`ReplicatedStateMachine` runs it:

- Every member joins a leader election on the metadata store and applies the log in order,
  from the latest snapshot's position (or the log's start).
- The elected member takes its election node's sequence as its term and opens the log's
  writer with it (the log records the term before it fences the previous writer; an older
  term is refused before anything is fenced: :class:`~bkeeper.common.errors.WriterTermError`),
  catches up to the log's end, then leads: :meth:`ReplicatedStateMachine.submit` appends a
  command and applies it once it is acknowledged, in log order, returning its result.
- Followers tail the log without fencing and apply what they read. A leader whose writer was
  fenced, whose append failed or timed out, or that lost its election steps down and follows;
  positions already applied are skipped, so nothing is applied twice and nothing is applied
  that is not in the log. A follower that applies nothing for ``follow_stall_s`` while the
  log's confirmed end lies past what it applied logs where its reader waits and reads on
  with a new one (:attr:`ReplicatedStateMachine.reader_restarts`).
- The log deleted under a running member (it was there, or made, when the member started):
  the member stops. ``run`` raises :class:`~bkeeper.common.errors.LogDeletedError` naming
  the log, after one error line; :attr:`ReplicatedStateMachine.role` is ``"failed"`` and
  :attr:`ReplicatedStateMachine.failure` holds the error. It does not try again: its state
  came from a log that is gone.
- :meth:`ReplicatedStateMachine.read_barrier` makes reads linearizable: it appends a no-op
  record (a "barrier") and returns once it is applied; its acknowledgement proves the writer
  was not fenced after the read arrived, so the state then holds every write completed
  before it. Concurrent reads share a barrier.
- Read lease (``read_lease_s`` = L > 0): an append sent at ``s`` (this member's monotonic
  clock, read through its ``Clock``) and acknowledged proves the writer was not fenced at
  ``s``: no other leader had fenced it by then. A new leader waits L after its fencing
  completed before it takes commands, so no other member acknowledges a write before
  ``s + L`` on the new leader's clock. Until ``s + L * (1 - LEASE_DRIFT)`` on its own clock the
  leader may then answer a read from its state at once
  (:meth:`ReplicatedStateMachine.lease_read`): the state holds every acknowledged write. The
  assumption: members' clocks run at rates within ``LEASE_DRIFT`` of each other (a stopped
  process's monotonic clock runs on: when it continues, its lease has run out). Reads renew
  the lease with a barrier once half of it is gone; a fail-over takes L longer.
- Snapshots (:mod:`bkeeper.statemachine.snapshot_store`, taken and restored by
  :mod:`bkeeper.statemachine.snapshot_taker`): every ``snapshot_every_commands``
  commands or ``snapshot_every_bytes`` command bytes the leader writes the state to a ledger,
  records it with the position it covers, then truncates the log before it. A member that
  starts, or whose reader was passed by truncation, restores the latest snapshot and tails on.

Group commit (:mod:`bkeeper.statemachine.command_lane`): commands submitted while the
previous record is being sent go into one record (property ``bkeeper.rsm = batch``,
:func:`encode_batch`), up to ``BATCH_COMMANDS_MAX`` commands and ``BATCH_BYTES_MAX`` bytes;
a lone command is a record of its own, as it was submitted. Records the framework writes
itself (barriers) carry the property ``bkeeper.rsm = noop`` and are never given to
``apply``. Limits: ``in_flight_max`` commands submitted and not yet applied;
``append_timeout_s`` per command.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from bkeeper.common.clock import Clock
from bkeeper.common.errors import (
    BKeeperError,
    LogDeletedError,
    LogExistsError,
    LogNotFoundError,
    NotLeaderError,
    StateMachineError,
    WriterTermError,
)
from bkeeper.common.tasks import TaskOwner, within
from bkeeper.meta.election import LeaderElection
from bkeeper.meta.store import NodeStore, SessionState
from bkeeper.namedlog import LogWriter, NamedLog, NamedLogs, Position, Record
from bkeeper.statemachine.command_lane import CommandLane
from bkeeper.statemachine.core import (
    Action,
    Apply,
    CoreConfig,
    MemberCore,
    Phase,
    Resign,
    WaitLease,
)
from bkeeper.statemachine.log_tail import LogTail
from bkeeper.statemachine.protocol import (
    BATCH_PROPERTIES,
    NOOP_PROPERTIES,
    Role,
    RsmConfig,
    StateMachine,
    decode_batch,
    election_path,
)
from bkeeper.statemachine.snapshot_store import SnapshotStore
from bkeeper.statemachine.snapshot_taker import SnapshotTaker

__all__ = ["ReplicatedStateMachine"]

log = logging.getLogger(__name__)

_NOOP = NOOP_PROPERTIES["bkeeper.rsm"]
_BATCH = BATCH_PROPERTIES["bkeeper.rsm"]


class ReplicatedStateMachine:
    """Runs a :class:`StateMachine` as one member (see the module docstring).
    ``await run(stop)`` until ``stop`` is set; ``submit`` while :attr:`leading`."""

    def __init__(
        self,
        logs: NamedLogs,
        store: NodeStore,
        machine: StateMachine,
        config: RsmConfig,
        *,
        clock: Clock | None = None,
        before_open_writer: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """``clock``: the lease's, the follower's stall check's (default: the logs',
        ``logs.clock``). ``before_open_writer``: awaited between the leadership check and
        ``open_writer`` (a test hook: a pause placed exactly there)."""
        self._logs = logs
        self._store = store
        self._machine = machine
        self._config = config
        self._clock: Clock = clock or logs.clock
        self._before_open_writer = before_open_writer
        self._core: MemberCore[Position] = MemberCore(
            CoreConfig(
                read_lease_s=config.read_lease_s,
                follow_stall_s=config.follow_stall_s,
                snapshot_every_commands=config.snapshot_every_commands,
                snapshot_every_bytes=config.snapshot_every_bytes,
            )
        )
        self.snapshots = SnapshotStore(logs, store, config.log_name)
        self._snapshot_taker = SnapshotTaker(logs, self.snapshots, machine, config, self._core)
        self._tail = LogTail(
            config.log_name,
            logs.walk,
            config.follow_stall_s,
            lambda: self._core.applied,
            self._snapshot_taker.restore,
        )
        self.directory = election_path(logs.bk.cluster.root, config.log_name)
        self._commands = CommandLane(config, self._core, machine, self._clock, self._snapshot)
        #: The member's background tasks (snapshots).
        self._tasks = TaskOwner(f"{config.log_name} member", error=StateMachineError)
        self._election: LeaderElection | None = None
        #: Why the member stopped for good (its log was deleted), or None.
        self.failure: LogDeletedError | None = None

    # -- what the member is and did (the core's) --------------------------------------
    @property
    def role(self) -> Role:
        """What this member does now; ``apply`` may read it."""
        return self._core.role

    @property
    def applied(self) -> Position | None:
        """The position of the last record applied (or covered by the restored snapshot)."""
        return self._core.applied

    @property
    def applied_count(self) -> int:
        """Commands applied by this member (any role)."""
        return self._core.applied_count

    @property
    def fenced(self) -> int:
        """Times this member's writer was fenced while it led."""
        return self._core.fenced

    @property
    def refused(self) -> int:
        """Times this member's writer was refused for an older term."""
        return self._core.refused

    @property
    def lease_reads(self) -> int:
        """Reads answered under the lease."""
        return self._core.lease_reads

    @property
    def lease_renewals(self) -> int:
        """Barriers the lease's renewal appended."""
        return self._core.lease_renewals

    @property
    def reader_restarts(self) -> int:
        """Readers replaced because they returned nothing while the log held more."""
        return self._tail.restarts

    @property
    def snapshots_written(self) -> int:
        return self._snapshot_taker.written

    @property
    def snapshots_restored(self) -> int:
        return self._snapshot_taker.restored

    @property
    def leading(self) -> bool:
        """True while this member leads and takes commands."""
        return self._commands.leading

    async def wait_leading(self, timeout_s: float | None = None) -> None:
        await self._commands.wait_leading(timeout_s)

    async def submit(self, command: bytes) -> Any:
        """Append ``command`` and apply it once acknowledged; its result.
        ``NotLeaderError`` when this member does not lead (or stopped leading before the
        command was applied: it may still be in the log)."""
        return await self._commands.submit(command)

    async def read_barrier(self) -> None:
        """Return once every write acknowledged before the call is applied here, and this
        member still led after the call was made (see the module docstring)."""
        await self._commands.read_barrier()

    def lease_read(self) -> bool:
        """True when this member may answer a linearizable read from its state now, without
        a barrier: it leads and holds a read lease (module doc). Answer at once, with no
        ``await`` between this call and reading the state. Past half the lease, a barrier
        is started to renew it."""
        return self._commands.lease_read()

    async def leader(self) -> bytes | None:
        """The election data of the member that leads now (None: nobody)."""
        if self._election is None:
            return None
        return await self._election.leader()

    async def snapshot(self) -> Position | None:
        """Write a snapshot of the state now and truncate the log before it; the position
        it covers (None when a newer one is recorded already or nothing is applied)."""
        return await self._snapshot_taker.take()

    # -- the member's life ---------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        config = self._config
        begun = await self._begin(stop)
        if begun is None:  # stopped before it could start
            await self._tail.close()
            return
        named, election = begun
        self._election = election
        try:
            while not stop.is_set():
                try:
                    await self._follow(named, election, stop)
                    if stop.is_set():
                        break
                    if not await self._confirmed(election):
                        await asyncio.sleep(0.05)
                        continue
                    term = election.sequence
                    if term is None:  # lost it since the check
                        continue
                    if self._before_open_writer is not None:
                        await self._before_open_writer()
                    resign = await self._lead(named, election, stop, term)
                except LogNotFoundError as exc:  # it was there at the start: deleted
                    raise self._log_deleted(exc) from exc
                except BKeeperError as exc:  # the store or bookies failed: try again shortly
                    log.info("%s: %s; trying again", config.log_name, exc)
                    await asyncio.sleep(config.retry_pause_s)
                    continue
                if resign:
                    # Fenced while this member thought it led: its view of the election is
                    # stale. Resign and queue again behind the others.
                    await election.aclose()
                    election = self._candidate()
                    self._election = election
                    await election.start()
        finally:
            self._perform_down(NotLeaderError(f"{config.log_name}: the member is stopping"))
            await self._commands.aclose()
            await self._tasks.aclose()
            await election.aclose()
            await self._tail.close()

    def _log_deleted(self, cause: LogNotFoundError) -> LogDeletedError:
        """The member's log was deleted: the member fails for good (module docstring)."""
        name = self._config.log_name
        error = LogDeletedError(
            f"{name}: the member's log {name!r} was deleted: it stops ({cause})"
        )
        self.failure = error
        self._core.log_deleted()
        log.error("%s", error)
        return error

    async def _begin(self, stop: asyncio.Event) -> tuple[NamedLog, LeaderElection] | None:
        """The log, the snapshot restored, the reader and a candidacy: tried again while the
        store or the bookies fail (a member started during a ZooKeeper outage waits it out
        instead of exiting); None once ``stop`` is set."""
        config = self._config
        while not stop.is_set():
            try:
                with contextlib.suppress(LogExistsError):
                    await self._logs.create(config.log_name)
                named = self._logs.log(config.log_name)
                await self._snapshot_taker.restore()
                await self._tail.open(named)
                election = self._candidate()
                try:
                    await election.start()
                except BaseException:
                    await election.aclose()
                    raise
                return named, election
            except BKeeperError as exc:
                log.info("%s: cannot start yet: %s", config.log_name, exc)
                with contextlib.suppress(TimeoutError):
                    await within(stop.wait(), config.retry_pause_s)
        return None

    def _candidate(self) -> LeaderElection:
        return LeaderElection(self._store, self.directory, self._config.candidate)

    async def _confirmed(self, election: LeaderElection) -> bool:
        """Leadership as the store sees it now (a paused process may still believe it)."""
        try:
            holder = await election.leader()
        except BKeeperError:
            return False
        return election.is_leader and holder == self._config.candidate

    def _apply_record(self, record: Record) -> list[Action[Position]]:
        """Feed a record read to the core and apply it; the core's other actions."""
        kind = record.properties.get("bkeeper.rsm")
        if kind == _NOOP:
            commands: Sequence[bytes] = ()
        elif kind == _BATCH:
            commands = [command for noop, command in decode_batch(record.payload) if not noop]
        else:
            commands = (record.payload,)
        actions = self._core.record_read(record.position, commands, self._clock.monotonic())
        rest: list[Action[Position]] = []
        for action in actions:
            if isinstance(action, Apply):
                for command in action.commands:
                    try:
                        self._machine.apply(command, action.position)
                    except Exception as exc:  # the command's result (its caller got it)
                        log.warning(
                            "%s: command at %s raised: %r",
                            self._config.log_name,
                            action.position,
                            exc,
                        )
            else:
                rest.append(action)
        return rest

    async def _follow(self, named: NamedLog, election: LeaderElection, stop: asyncio.Event) -> None:
        core, clock = self._core, self._clock
        core.start_following(clock.monotonic())
        while not election.is_leader and not stop.is_set():
            record = await self._tail.next_record(named, self._config.follow_poll_s)
            if record is not None:
                self._apply_record(record)
            connected = self._store.session_state is SessionState.CONNECTED
            if core.follow_tick(clock.monotonic(), connected=connected):  # a CheckStall
                await self._tail.check_stall(named)

    async def _lead(
        self, named: NamedLog, election: LeaderElection, stop: asyncio.Event, term: int
    ) -> bool:
        """Lead until leadership ends; True when another writer fenced this one, or a newer
        leader holds the log (the member then resigns and queues again)."""
        core, clock = self._core, self._clock
        core.elected(term)  # an OpenWriter(term)
        try:
            writer = await named.open_writer(term=term)
            fenced_at_s = clock.monotonic()  # the previous writer is fenced by now
        except WriterTermError as exc:
            log.warning("not taking over the log: %s", exc)
            return Resign() in core.writer_refused(older_term=True)
        except BKeeperError as exc:
            core.writer_refused(older_term=False)
            if isinstance(exc, LogNotFoundError):
                raise  # deleted: the member stops
            log.info("could not take over the log: %s", exc)
            await asyncio.sleep(self._config.retry_pause_s)
            return False
        try:
            actions = core.writer_opened(fenced_at_s, await named.last_position())
            while core.phase is Phase.CATCHUP:
                if not election.is_leader or stop.is_set():
                    return False
                record = await self._tail.next_record(named, 0.5)
                now_s = clock.monotonic()
                actions = self._apply_record(record) if record else core.catchup_tick(now_s)
            while actions and isinstance(wait := actions[0], WaitLease):
                # The previous leader may answer reads under its lease until then.
                await asyncio.sleep(max(0.0, wait.until_s - clock.monotonic()))
                if not election.is_leader or stop.is_set():
                    return False
                actions = core.lease_waited(clock.monotonic())
            if core.phase is not Phase.LEADING:
                raise AssertionError(f"caught up, the core says {actions}")
            self._perform_lead(writer)
            lost = asyncio.ensure_future(election.wait_leadership_lost())
            stopped = asyncio.ensure_future(stop.wait())
            failed = asyncio.ensure_future(self._commands.wait_failed())
            try:
                await asyncio.wait({lost, stopped, failed}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiter in (lost, stopped, failed):
                    waiter.cancel()
        finally:
            down = self._perform_down(NotLeaderError(f"{self._config.log_name}: leadership ended"))
            with contextlib.suppress(BKeeperError):
                await writer.close()
        if Resign() in down:
            log.warning("fenced: another process leads now")
            return True
        return False

    def _perform_lead(self, writer: LogWriter) -> None:
        self._tail.behind = True
        self._commands.start(writer)

    def _perform_down(self, error: BaseException) -> list[Action[Position]]:
        """Tell the core leadership ended (or the member stops) and fail what is pending."""
        actions = self._core.step_down()
        self._commands.fail_pending(error)
        return actions

    def _snapshot(self) -> None:
        """The core said TakeSnapshot (it takes one at a time)."""
        if not self._tasks.closed:
            self._tasks.spawn(self._snapshot_taker.take(), "snapshot")
