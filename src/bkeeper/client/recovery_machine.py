"""Ledger recovery's decisions, as a pure state machine.

:class:`RecoveryMachine` asks questions (:class:`Question`: one request to each of some
bookies) and is fed each bookie's classified reply (:func:`classify`); it returns a
:class:`Step`: new questions to ask, questions settled (their outstanding requests are to be
cancelled), and at the end the result (last entry id, length) or the error. No I/O:
:mod:`bkeeper.client.ledger_recovery` sends the requests and cancels the stragglers.

Rules (BookKeeper's, with Qw - Qa + 1 = the recovery quorum, :mod:`client.distribution`):

1. FENCING: a fencing read of entry -1 to every bookie of the last ensemble. A bookie answers
   once it says FOUND (a body that verifies: its LAC counts) or ABSENT. Settled when the
   answers cover every write set with the recovery quorum: LAC = max(LACs, first entry of the
   last segment - 1). An UNAUTHORIZED reply fails recovery at once; all replies in and no
   coverage fails it as "could not fence".
2. LENGTH: the entry at the LAC (when LAC >= 0) is read from its write set (settled by one
   FOUND, or the recovery quorum of ABSENT, or all replies in); its length is the length so far.
   Absent or unknown fails recovery.
3. READING: the next ``batch_entries`` entries after the last one known are read at once, each
   settled as in 2 (FOUND / ABSENT / UNKNOWN). The batch is settled when, in entry order, every
   entry up to the first ABSENT is FOUND (the end is just before it), or every entry is FOUND,
   or an UNKNOWN entry has only FOUND entries before it (recovery fails: it cannot tell whether
   that entry exists). Questions of entries past the end are settled unasked-for.
4. REWRITING: every FOUND entry of the batch is re-written to its write set as a recovery add;
   each is settled at Qa acknowledgements (or all replies in: then recovery fails). When all
   are acknowledged: DONE with (end, length of the last entry) if the batch had an end, else
   READING the next batch.

=========  =============  ==================  ================
phase      settled        and then            next phase
=========  =============  ==================  ================
FENCING    covered        LAC < 0             READING
FENCING    covered        LAC >= 0            LENGTH
LENGTH     found                              READING
READING    batch settled  entries found       REWRITING
READING    batch settled  none found (end)    DONE
REWRITING  all acked      batch had an end    DONE
REWRITING  all acked      no end yet          READING
any        failure                            FAILED
=========  =============  ==================  ================
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from bkeeper.client.distribution import covers_every_write_set, recovery_quorum, write_set
from bkeeper.client.entry import Entry
from bkeeper.client.refusal import eua_answered
from bkeeper.common import bugs
from bkeeper.common.errors import (
    BKeeperError,
    BookieUnavailableError,
    DigestMismatchError,
    UnauthorizedAccessError,
)
from bkeeper.meta.ledger_metadata import LedgerMetadata
from bkeeper.wire.codes import StatusCode
from bkeeper.wire.digest import DigestManager

__all__ = [
    "TRANSITIONS",
    "Ask",
    "Phase",
    "Question",
    "RecoveryMachine",
    "Reply",
    "ReplyKind",
    "Step",
    "classify",
]


class Phase(enum.Enum):
    FENCING = "fencing"
    LENGTH = "length"
    READING = "reading"
    REWRITING = "rewriting"
    DONE = "done"
    FAILED = "failed"


#: The phases a phase may move to (the table in the module doc); anything else is a bug.
TRANSITIONS: Final[Mapping[Phase, frozenset[Phase]]] = {
    Phase.FENCING: frozenset({Phase.LENGTH, Phase.READING, Phase.FAILED}),
    Phase.LENGTH: frozenset({Phase.READING, Phase.FAILED}),
    Phase.READING: frozenset({Phase.REWRITING, Phase.DONE, Phase.FAILED}),
    Phase.REWRITING: frozenset({Phase.READING, Phase.DONE, Phase.FAILED}),
    Phase.DONE: frozenset(),
    Phase.FAILED: frozenset(),
}


class Ask(enum.Enum):
    FENCE = "fencing read"
    READ = "read"
    REWRITE = "recovery add"


@dataclass(frozen=True, slots=True)
class Question:
    """One request (``ask`` of ``entry_id``; ``entry`` to re-write) to each of ``bookies``."""

    ask: Ask
    entry_id: int
    bookies: tuple[str, ...]
    entry: Entry | None = field(default=None, compare=False)


class ReplyKind(enum.Enum):
    FOUND = "found"  # a verified entry (a fencing read: its LAC); a recovery add: acknowledged
    ABSENT = "absent"  # ENOENTRY / ENOLEDGER: the bookie does not have it
    UNAUTHORIZED = "unauthorized"  # EUA
    NONE = "no answer"  # an error, a timeout, a bad replica, any other status


@dataclass(frozen=True, slots=True)
class Reply:
    kind: ReplyKind
    entry: Entry | None = None
    detail: str = ""


_ABSENT = (StatusCode.ENOENTRY, StatusCode.ENOLEDGER)


def classify(question: Question, reply: Any, digest: DigestManager[Entry]) -> Reply:
    """What a bookie's ``reply`` (a response, or the exception its request ended with) says."""
    if isinstance(reply, UnauthorizedAccessError):  # refused before connecting: says why
        return Reply(ReplyKind.UNAUTHORIZED, detail=str(reply))
    if isinstance(reply, BaseException):
        return Reply(ReplyKind.NONE, detail=str(reply) or type(reply).__name__)
    status = reply.status
    if question.ask is Ask.REWRITE:
        ok = status is StatusCode.EOK
        return Reply(ReplyKind.FOUND) if ok else Reply(ReplyKind.NONE, detail=status.name)
    if status is StatusCode.EOK and reply.body is not None:
        expected = None if question.ask is Ask.FENCE else question.entry_id
        try:
            return Reply(ReplyKind.FOUND, digest.verify_entry(reply.body, expected))
        except DigestMismatchError as exc:
            return Reply(ReplyKind.NONE, detail=f"bad replica: {exc}")
    if status in _ABSENT:
        return Reply(ReplyKind.ABSENT)
    if status is StatusCode.EUA:
        return Reply(ReplyKind.UNAUTHORIZED, detail=status.name)
    return Reply(ReplyKind.NONE, detail=status.name)


@dataclass(frozen=True, slots=True)
class Step:
    """What to do: cancel the requests of ``settled``, send ``ask``; then, if set, the
    recovery ended with ``result`` (last entry id, length) or ``error``."""

    ask: tuple[Question, ...] = ()
    settled: tuple[Question, ...] = ()
    result: tuple[int, int] | None = None
    error: BKeeperError | None = None


class _Tally:
    """The replies to one question, by position."""

    __slots__ = ("replies",)

    def __init__(self, size: int) -> None:
        self.replies: list[Reply | None] = [None] * size

    def count(self, kind: ReplyKind) -> int:
        return sum(1 for r in self.replies if r is not None and r.kind is kind)

    @property
    def complete(self) -> bool:
        return all(r is not None for r in self.replies)

    def found(self) -> Entry | None:
        return next((r.entry for r in self.replies if r and r.kind is ReplyKind.FOUND), None)


class RecoveryMachine:
    """The decisions of one ledger recovery (see the module doc)."""

    def __init__(self, ledger_id: int, meta: LedgerMetadata, batch_entries: int) -> None:
        self.ledger_id = ledger_id
        self._meta = meta
        self._batch = batch_entries
        self._quorum = recovery_quorum(meta.write_quorum, meta.ack_quorum)
        self.phase = Phase.FENCING
        self._open: dict[Question, _Tally] = {}  # questions not settled yet
        self._answers: dict[int, Reply | None] = {}  # READING: entry -> FOUND/ABSENT/None
        self._first = 0  # READING: the batch's first entry
        self._end: int | None = None
        self._length = 0
        self._rewrites: list[Entry] = []

    # -- events --------------------------------------------------------------------------
    def start(self) -> Step:
        fence = Question(Ask.FENCE, -1, tuple(self._meta.last_ensemble))
        return Step(ask=self._ask(fence))

    def reply(self, question: Question, position: int, reply: Reply) -> Step:
        """``question.bookies[position]`` answered ``reply``."""
        tally = self._open.get(question)
        if tally is None or tally.replies[position] is not None:
            return Step()  # settled already (a straggler), or answered twice
        tally.replies[position] = reply
        try:
            return self._decide(question, tally)
        except BKeeperError as error:
            self._move(Phase.FAILED)
            settled = tuple(self._open)
            self._open.clear()
            return Step(settled=settled, error=error)

    # -- decisions -----------------------------------------------------------------------
    def _decide(self, question: Question, tally: _Tally) -> Step:
        if question.ask is Ask.FENCE:
            return self._fence(question, tally)
        if question.ask is Ask.READ:
            return self._read(question, tally)
        return self._rewrite(question, tally)

    def _fence(self, question: Question, tally: _Tally) -> Step:
        meta = self._meta
        refusals = [r for r in tally.replies if r is not None and r.kind is ReplyKind.UNAUTHORIZED]
        if refusals:
            detail = refusals[0].detail
            raise UnauthorizedAccessError(
                detail
                if detail != StatusCode.EUA.name
                else eua_answered(f"ledger {self.ledger_id}: fencing")
            )
        answered = [p for p, r in enumerate(tally.replies) if r and r.kind is not ReplyKind.NONE]
        covered = covers_every_write_set(
            answered, meta.ensemble_size, meta.write_quorum, meta.ack_quorum
        )
        if not covered:
            if tally.complete:
                raise BookieUnavailableError(
                    f"ledger {self.ledger_id}: could not fence, too few bookies answered "
                    f"({len(answered)} of {len(question.bookies)})"
                )
            return Step()
        lacs = [r.entry.lac for r in tally.replies if r and r.entry is not None]
        lac = max(max(lacs, default=-1), max(meta.segments) - 1)
        settled = self._settle(question)
        if lac < 0:
            return self._next_batch(0, settled)
        self._first = lac
        self._move(Phase.LENGTH)
        return Step(ask=self._ask(self._read_question(lac)), settled=settled)

    def _entry_outcome(self, question: Question, tally: _Tally) -> Reply | None:
        """FOUND / ABSENT / NONE (unknown) once settled (rule 2), else None."""
        entry = tally.found()
        if entry is not None:
            return Reply(ReplyKind.FOUND, entry)
        quorum = 1 if bugs.ACTIVE and bugs.active("recovery-one-absent") else self._quorum
        if tally.count(ReplyKind.ABSENT) >= quorum:
            return Reply(ReplyKind.ABSENT)
        return Reply(ReplyKind.NONE) if tally.complete else None

    def _read(self, question: Question, tally: _Tally) -> Step:
        outcome = self._entry_outcome(question, tally)
        if outcome is None:
            return Step()
        settled = self._settle(question)
        entry_id = question.entry_id
        if self.phase is Phase.LENGTH:
            if outcome.kind is ReplyKind.ABSENT:
                raise BookieUnavailableError(
                    f"ledger {self.ledger_id}: entry {entry_id} (LAC) is missing"
                )
            if outcome.entry is None:
                raise self._cannot_tell(entry_id)
            self._length = outcome.entry.length
            return self._next_batch(entry_id + 1, settled)
        self._answers[entry_id] = outcome
        return self._batch_settled(settled)

    def _batch_settled(self, settled: tuple[Question, ...]) -> Step:
        found: list[Entry] = []
        end: int | None = None
        for entry_id in range(self._first, self._first + self._batch):
            outcome = self._answers.get(entry_id)
            if outcome is None:
                return Step(settled=settled)  # not known yet, and it matters
            if outcome.kind is ReplyKind.ABSENT:
                end = entry_id - 1
                break
            if outcome.entry is None:
                raise self._cannot_tell(entry_id)
            found.append(outcome.entry)
        settled += tuple(self._open)  # entries past the end: nobody needs them
        self._open.clear()
        if end is not None:
            self._end = end
        if not found:
            return self._done(settled)
        self._length = found[-1].length
        self._rewrites = found
        self._move(Phase.REWRITING)
        rewrites = [
            Question(Ask.REWRITE, e.entry_id, self._write_set_of(e.entry_id), e) for e in found
        ]
        return Step(ask=tuple(q for r in rewrites for q in self._ask(r)), settled=settled)

    def _rewrite(self, question: Question, tally: _Tally) -> Step:
        acked = tally.count(ReplyKind.FOUND)
        ack_quorum = self._meta.ack_quorum
        if acked < ack_quorum:
            if not tally.complete:
                return Step()
            errors = {r.detail for r in tally.replies if r is not None and r.detail}
            raise BookieUnavailableError(
                f"ledger {self.ledger_id}: recovery add of entry {question.entry_id} reached "
                f"{acked} of {ack_quorum} bookies ({', '.join(sorted(errors)) or 'no answer'})"
            )
        settled = self._settle(question)
        if any(q.ask is Ask.REWRITE for q in self._open):
            return Step(settled=settled)
        if self._end is not None:
            return self._done(settled)
        return self._next_batch(self._first + self._batch, settled)

    # -- helpers -------------------------------------------------------------------------
    def _next_batch(self, first: int, settled: tuple[Question, ...]) -> Step:
        self._move(Phase.READING)
        self._first = first
        self._answers.clear()
        questions = [self._read_question(e) for e in range(first, first + self._batch)]
        return Step(ask=tuple(q for r in questions for q in self._ask(r)), settled=settled)

    def _done(self, settled: tuple[Question, ...]) -> Step:
        self._move(Phase.DONE)
        end = self._first - 1 if self._end is None else self._end
        return Step(settled=settled, result=(end, self._length))

    def _read_question(self, entry_id: int) -> Question:
        return Question(Ask.READ, entry_id, self._write_set_of(entry_id))

    def _write_set_of(self, entry_id: int) -> tuple[str, ...]:
        meta = self._meta
        ensemble = meta.ensemble_for(entry_id)
        ws = write_set(entry_id, meta.ensemble_size, meta.write_quorum)
        return tuple(ensemble[i] for i in ws)

    def _ask(self, question: Question) -> tuple[Question, ...]:
        self._open[question] = _Tally(len(question.bookies))
        return (question,)

    def _settle(self, question: Question) -> tuple[Question, ...]:
        del self._open[question]
        return (question,)

    def _cannot_tell(self, entry_id: int) -> BKeeperError:
        return BookieUnavailableError(
            f"ledger {self.ledger_id}: cannot tell whether entry {entry_id} exists"
        )

    def _move(self, phase: Phase) -> None:
        if phase not in TRANSITIONS[self.phase]:
            raise AssertionError(f"recovery: {self.phase.value} -> {phase.value}")
        self.phase = phase
