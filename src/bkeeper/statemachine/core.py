"""The decisions of one replicated-state-machine member, as a pure state machine.

:class:`MemberCore` is told what happened (elected, the writer opened or refused, a record
read, an append acknowledged or failed, the lease waited out, leadership ended, the log
deleted, the time) and returns what to do (:data:`Action`: open the writer, apply these
commands at this position, wait until this time, lead, fail the pending commands, take a
snapshot, check for a stalled reader, resign). It does no I/O and reads no clock: times are
arguments, seconds on the member's monotonic clock. The asyncio shell,
:class:`~bkeeper.statemachine.machine.ReplicatedStateMachine`, performs the actions and feeds
the events, in the manner of etcd raft's ``Ready``/``Advance``.

Rules:

1. A member follows until it is elected. Elected with term T, it opens the log's writer with
   T (OPENING). A writer refused for an older term: it follows again and resigns (it queues
   behind the others). Any other failure to open: it follows again (and tries later).
2. The writer open at time f, the previous writer is fenced by f. The member catches up
   (CATCHUP): it applies what it reads until it applied the log's end as it was when the
   writer opened.
3. Caught up, with a read lease L > 0, it waits until f + L (LEASE_WAIT): until then the
   previous leader may still answer reads under its lease. Then it leads (LEADING).
4. A record at or before the position applied is skipped: nothing is applied twice. Records
   are applied in log order, the applied position moving to each one's position.
5. Leading, appends are acknowledged in log order. One sent at s extends the lease to
   ``max(lease_until, s + L * (1 - LEASE_DRIFT))``: an acknowledged append proves the writer
   was not fenced at s, and clocks run at rates within ``LEASE_DRIFT`` of each other.
6. A lease read at t is granted while leading with L > 0 and t < lease_until. Once less than
   half of L remains, it asks for a barrier to renew the lease (one at a time).
7. A snapshot is due after ``snapshot_every_commands`` commands or ``snapshot_every_bytes``
   command bytes applied since the last one, taken while leading, one at a time, once
   something is applied.
8. A failed append, lost leadership or stop: the member steps down (FOLLOWING), its lease is
   gone and its pending commands fail. Fenced while it led, it resigns. A late failure of an
   append sent in an earlier term, seen while not leading, changes nothing.
9. Following, a member that applied nothing for ``follow_stall_s`` while connected to the
   store checks once whether its reader is stuck, and the wait starts again.
10. The log deleted: FAILED, final.

Phases and the events that move them (:data:`TRANSITIONS`; a pair not in it is a bug,
raised as ``AssertionError``). ACKED never changes the phase, so the hot path only checks
that the member leads.

==========  =======  ======  =======  =====  =========  ==========  =====  ======  ====  =======
phase       ELECTED  OPENED  REFUSED  READ   CAUGHT_UP  LEASE_OUT   ACKED  FAILED  DOWN  DELETED
==========  =======  ======  =======  =====  =========  ==========  =====  ======  ====  =======
FOLLOWING   OPENING  -       -        FOL    -          -           -      FOL     FOL   FAILED
OPENING     -        CATCH   FOL      -      -          -           -      OPEN    FOL   FAILED
CATCHUP     -        -       -        CATCH  LEASE      -           -      CATCH   FOL   FAILED
LEASE_WAIT  -        -       -        -      -          LEADING     -      LEASE   FOL   FAILED
LEADING     -        -       -        -      -          -           LEAD   FOL     FOL   FAILED
FAILED      -        -       -        -      -          -           -      FAILED  FAIL  FAILED
==========  =======  ======  =======  =====  =========  ==========  =====  ======  ====  =======

(REFUSED: the writer refused for an older term, or failed to open; FAILED: an append failed;
DOWN: leadership ended or the member stops.) Queries that move nothing: :meth:`lease_read`,
:meth:`follow_tick`, :attr:`role`; :meth:`catchup_tick` may report CAUGHT_UP.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

__all__ = [
    "LEASE_DRIFT",
    "TRANSITIONS",
    "Action",
    "Apply",
    "CheckStall",
    "CoreConfig",
    "Event",
    "FailPending",
    "Lead",
    "LeaseAnswer",
    "MemberCore",
    "OpenWriter",
    "Phase",
    "Resign",
    "Role",
    "TakeSnapshot",
    "WaitLease",
]

Role = Literal["following", "catchup", "leading", "failed"]
#: How much faster one member's monotonic clock may run than another's, at most: a lease
#: of L seconds is used for L * (1 - LEASE_DRIFT) by the leader holding it.
LEASE_DRIFT = 0.1

#: Positions: ordered tuples of ints (the log's ``Position``); the core only compares them.
P = TypeVar("P", bound=tuple[int, ...])


class Phase(enum.Enum):
    FOLLOWING = "following"
    OPENING = "opening"
    CATCHUP = "catchup"
    LEASE_WAIT = "lease_wait"
    LEADING = "leading"
    FAILED = "failed"


class Event(enum.Enum):
    ELECTED = "elected"
    OPENED = "opened"
    REFUSED = "refused"
    READ = "read"
    CAUGHT_UP = "caught_up"
    LEASE_OUT = "lease_out"
    ACKED = "acked"
    FAILED = "failed"
    DOWN = "down"
    DELETED = "deleted"


_F, _O, _C, _W, _L, _X = (
    Phase.FOLLOWING,
    Phase.OPENING,
    Phase.CATCHUP,
    Phase.LEASE_WAIT,
    Phase.LEADING,
    Phase.FAILED,
)
_ROWS: dict[Phase, dict[Event, Phase]] = {
    _F: {Event.ELECTED: _O, Event.READ: _F, Event.FAILED: _F, Event.DOWN: _F},
    _O: {Event.OPENED: _C, Event.REFUSED: _F, Event.FAILED: _O, Event.DOWN: _F},
    _C: {Event.READ: _C, Event.CAUGHT_UP: _W, Event.FAILED: _C, Event.DOWN: _F},
    _W: {Event.LEASE_OUT: _L, Event.FAILED: _W, Event.DOWN: _F},
    _L: {Event.ACKED: _L, Event.FAILED: _F, Event.DOWN: _F},
    _X: {Event.FAILED: _X, Event.DOWN: _X},
}
#: (phase, event) -> the next phase: the table of the module docstring.
TRANSITIONS: dict[tuple[Phase, Event], Phase] = {
    (phase, event): to for phase, row in _ROWS.items() for event, to in row.items()
} | {(phase, Event.DELETED): Phase.FAILED for phase in Phase}

_ROLES: dict[Phase, Role] = {
    _F: "following",
    _O: "following",
    _C: "catchup",
    _W: "catchup",
    _L: "leading",
    _X: "failed",
}


@dataclass(frozen=True, slots=True)
class OpenWriter:
    """Open the log's writer with ``term`` (fencing the previous one)."""

    term: int


@dataclass(frozen=True, slots=True)
class Apply(Generic[P]):
    """Apply ``commands`` (possibly none: a barrier) of the record at ``position``."""

    position: P
    commands: Sequence[bytes]


@dataclass(frozen=True, slots=True)
class WaitLease:
    """Wait until ``until_s`` (the previous leader's lease), then report :meth:`lease_waited`."""

    until_s: float


@dataclass(frozen=True, slots=True)
class Lead:
    """Take commands: the member leads."""


@dataclass(frozen=True, slots=True)
class FailPending:
    """Stop taking commands; fail those queued and appended and not applied."""


@dataclass(frozen=True, slots=True)
class Resign:
    """Leave the election and queue again behind the others."""


@dataclass(frozen=True, slots=True)
class TakeSnapshot:
    """Take a snapshot now; report :meth:`snapshot_finished` when it ends."""


@dataclass(frozen=True, slots=True)
class CheckStall:
    """Look whether the log's confirmed end lies past what was applied (a stuck reader)."""


Action = OpenWriter | Apply[P] | WaitLease | Lead | FailPending | Resign | TakeSnapshot | CheckStall


@dataclass(frozen=True, slots=True)
class LeaseAnswer:
    """``granted``: answer the read from the state now; ``renew``: start a barrier."""

    granted: bool
    renew: bool


#: The four answers, made once (a lease read is on the read path).
_ANSWERS = {
    (granted, renew): LeaseAnswer(granted, renew)
    for granted in (False, True)
    for renew in (False, True)
}


@dataclass(frozen=True)
class CoreConfig:
    """The numbers the core decides with (from the member's ``RsmConfig``)."""

    read_lease_s: float = 0.0
    follow_stall_s: float = 15.0
    snapshot_every_commands: int = 0
    snapshot_every_bytes: int = 0


class MemberCore(Generic[P]):
    """One member's phase, applied position, lease and snapshot counters (module doc)."""

    def __init__(self, config: CoreConfig) -> None:
        self._config = config
        self._phase = Phase.FOLLOWING
        #: The position of the last record applied (or covered by the restored snapshot).
        self.applied: P | None = None
        #: Commands applied (any role), and commands and their bytes since the last snapshot.
        self.applied_count = 0
        self.since_snapshot_commands = 0
        self.since_snapshot_bytes = 0
        #: Times the writer was fenced while leading / refused for an older term.
        self.fenced = 0
        self.refused = 0
        #: Reads granted under the lease, and barriers asked for to renew it.
        self.lease_reads = 0
        self.lease_renewals = 0
        self.term: int | None = None
        self._fenced_at_s = 0.0
        self._catchup_end: P | None = None
        self._lease_until_s = 0.0
        self._fenced_now = False
        self._snapshot_running = False
        self._progress: tuple[P | None, float] = (None, 0.0)

    @property
    def phase(self) -> Phase:
        return self._phase

    @property
    def role(self) -> Role:
        return _ROLES[self._phase]

    @property
    def lease_until_s(self) -> float:
        return self._lease_until_s

    def _move(self, event: Event) -> None:
        to = TRANSITIONS.get((self._phase, event))
        if to is None:
            raise AssertionError(f"event {event.name} in phase {self._phase.name}")
        self._phase = to

    # -- election and the way to leading ----------------------------------------------
    def elected(self, term: int) -> list[Action[P]]:
        self._move(Event.ELECTED)
        self.term = term
        return [OpenWriter(term)]

    def writer_refused(self, *, older_term: bool) -> list[Action[P]]:
        """The writer did not open; ``older_term``: refused for an older term (rule 1)."""
        self._move(Event.REFUSED)
        if not older_term:
            return []
        self.refused += 1
        return [Resign()]

    def writer_opened(self, now_s: float, end: P | None) -> list[Action[P]]:
        """The writer is open (the previous one fenced) at ``now_s``; ``end``: the log's
        last position then (None: empty)."""
        self._move(Event.OPENED)
        self._fenced_at_s = now_s
        self._catchup_end = end
        return self._check_caught_up(now_s)

    def record_read(self, position: P, commands: Sequence[bytes], now_s: float) -> list[Action[P]]:
        """A record read from the log (following or catching up) with its commands."""
        self._move(Event.READ)
        if self.applied is not None and position <= self.applied:
            return []  # applied already (a leader reading back its own commands)
        actions: list[Action[P]] = [self._apply(position, commands)]
        if self._phase is Phase.CATCHUP:
            actions += self._check_caught_up(now_s)
        return actions

    def catchup_tick(self, now_s: float) -> list[Action[P]]:
        """Catching up, the reader returned nothing (a snapshot restored meanwhile may
        cover the log's end)."""
        if self._phase is not Phase.CATCHUP:
            raise AssertionError(f"a catch-up tick in phase {self._phase.name}")
        return self._check_caught_up(now_s)

    def _check_caught_up(self, now_s: float) -> list[Action[P]]:
        end = self._catchup_end
        if end is not None and (self.applied is None or self.applied < end):
            return []
        self._move(Event.CAUGHT_UP)
        return self.lease_waited(now_s)

    def lease_waited(self, now_s: float) -> list[Action[P]]:
        """The wait of rule 3 may be over at ``now_s``."""
        until_s = self._fenced_at_s + self._config.read_lease_s
        if self._config.read_lease_s and now_s < until_s:
            return [WaitLease(until_s)]
        self._move(Event.LEASE_OUT)
        self._fenced_now = False
        return [Lead()]

    # -- leading ----------------------------------------------------------------------
    def append_acked(
        self, position: P, sent_s: float, commands: Sequence[bytes]
    ) -> list[Action[P]]:
        """The oldest append in flight, sent at ``sent_s``, is at ``position``."""
        if self._phase is not Phase.LEADING:
            raise AssertionError(f"event ACKED in phase {self._phase.name}")
        lease_s = self._config.read_lease_s
        if lease_s:
            self._lease_until_s = max(self._lease_until_s, sent_s + lease_s * (1 - LEASE_DRIFT))
        actions: list[Action[P]] = [self._apply(position, commands)]
        if self._snapshot_due():
            self._snapshot_running = True
            actions.append(TakeSnapshot())
        return actions

    def lease_read(self, now_s: float, *, barrier_running: bool) -> LeaseAnswer:
        """May a read be answered from the state at ``now_s`` (rule 6)?"""
        lease_s = self._config.read_lease_s
        if not lease_s or self._phase is not Phase.LEADING:
            return _ANSWERS[False, False]
        remaining_s = self._lease_until_s - now_s
        renew = remaining_s < lease_s / 2 and not barrier_running
        if renew:
            self.lease_renewals += 1
        if remaining_s <= 0:
            return _ANSWERS[False, renew]
        self.lease_reads += 1
        return _ANSWERS[True, renew]

    def append_failed(self, *, fenced: bool) -> list[Action[P]]:
        """An append failed (``fenced``: another writer fenced this one)."""
        leading = self._phase is Phase.LEADING
        self._move(Event.FAILED)
        if not leading:
            return []
        self._fenced_now = self._fenced_now or fenced
        self._lease_until_s = 0.0
        return [FailPending()]

    def step_down(self) -> list[Action[P]]:
        """Leadership ended, or the member stops. Resign when fenced while it led."""
        self._move(Event.DOWN)
        self._lease_until_s = 0.0
        actions: list[Action[P]] = [FailPending()]
        if self._fenced_now:
            self.fenced += 1
            actions.append(Resign())
            self._fenced_now = False
        return actions

    @property
    def fenced_while_leading(self) -> bool:
        """An append failed because another writer fenced this one (this leadership)."""
        return self._fenced_now

    def log_deleted(self) -> None:
        self._move(Event.DELETED)
        self._lease_until_s = 0.0

    # -- following --------------------------------------------------------------------
    def start_following(self, now_s: float) -> None:
        """The follower's wait for progress (rule 9) starts at ``now_s``."""
        self._progress = (self.applied, now_s)

    def follow_tick(self, now_s: float, *, connected: bool) -> list[Action[P]]:
        """The follower's reader returned (a record or not) at ``now_s``."""
        applied, since_s = self._progress
        if self.applied != applied or not connected:
            # (without the store a follower cannot follow a roll: that is no stall)
            self._progress = (self.applied, now_s)
            return []
        if now_s - since_s < self._config.follow_stall_s:
            return []
        self._progress = (applied, now_s)
        return [CheckStall()]

    # -- applying and snapshots -------------------------------------------------------
    def _apply(self, position: P, commands: Sequence[bytes]) -> Apply[P]:
        self.applied = position
        self.applied_count += len(commands)
        self.since_snapshot_commands += len(commands)
        self.since_snapshot_bytes += sum(map(len, commands))
        return Apply(position, commands)

    def restored(self, position: P) -> None:
        """A snapshot covering the log up to ``position`` was restored."""
        self.applied = position

    def _snapshot_due(self) -> bool:
        config = self._config
        due = (
            config.snapshot_every_commands
            and self.since_snapshot_commands >= config.snapshot_every_commands
        ) or (
            config.snapshot_every_bytes and self.since_snapshot_bytes >= config.snapshot_every_bytes
        )
        return bool(due) and not self._snapshot_running and self.applied is not None

    def snapshot_captured(self) -> None:
        """The state was captured for a snapshot: counting starts again."""
        self.since_snapshot_commands = self.since_snapshot_bytes = 0

    def snapshot_finished(self) -> None:
        self._snapshot_running = False
