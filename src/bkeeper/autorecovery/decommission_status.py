"""What a decommission waits for, ledger by ledger: pure functions of what
:func:`bkeeper.autorecovery.admin.decommission` reads at each poll, and the words an operator
reads (``bkeeper shell decommissionbookie``, its timeout's error line).

Each ledger that needed the leaving bookie when the decommission began has one row
(:func:`ledger_rows`). A ledger that still needs the bookie is, first match wins:

================  =========================================================================
state             when
================  =========================================================================
``replicating``   marked for the bookie and a worker holds its lock, with no reason recorded,
                  or held by the same worker at two polls in a row (a real copy: a retry
                  that fails again lets go in milliseconds)
``blocked``       marked for the bookie, with the reason a worker's last attempt recorded
                  (``no_candidate``, ``awaiting_writer``, ...); a worker holding it at this
                  poll only is retrying it (``worker``)
``queued``        marked for the bookie, no worker on it, no reason
``awaiting_audit``  not marked for the bookie (not queued, or queued for other bookies
                  only) and the audit not seen to have run
``not_marked``    not marked for the bookie although the audit ran (:class:`AuditWatch`)
================  =========================================================================

and one that no longer needs it is ``moved``. ``since_ms`` (wall clock) is when the row
entered its state: the mark's ctime when queued, the reason's ``since_ms`` when blocked,
otherwise when a poll first saw it so (carried over from the previous rows while the state,
and for ``replicating`` the worker, stay the same).

Whether the audit ran is not written anywhere the decommission can read (the auditor records
no time for its bookie check), so :class:`AuditWatch` judges it from outside: the audit ran
once a ledger of the bookie was seen marked (or moved) and no further one was for
``settle_s``.

A blocked ledger carries what the operator can do (:func:`remedy`), from the kind and the
text the worker recorded; ``no_candidate``, ``no_password`` and ``replicas_unreadable``
are blocked for good (:data:`PERMANENT_KINDS`): waiting longer does not help.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from bkeeper.meta.underreplication import BlockedReason, UnderreplicatedLedger

__all__ = [
    "PERMANENT_KINDS",
    "AuditState",
    "AuditWatch",
    "DecommissionStatus",
    "LedgerRow",
    "LedgerState",
    "Observation",
    "changed_rows",
    "counts_text",
    "describe",
    "ledger_rows",
    "remedy",
    "timeout_message",
]

#: Reason kinds that waiting does not end: the operator has to act.
PERMANENT_KINDS = frozenset({"no_candidate", "no_password", "replicas_unreadable"})
#: Blocked ledgers a timeout's one error line names (the others are counted).
TIMEOUT_LEDGERS_NAMED_MAX = 3


class LedgerState(StrEnum):
    """Where one ledger of the decommission stands (module doc, in its order)."""

    REPLICATING = "replicating"
    BLOCKED = "blocked"
    QUEUED = "queued"
    AWAITING_AUDIT = "awaiting_audit"
    NOT_MARKED = "not_marked"
    MOVED = "moved"


#: How each state is counted in a summary, in the order summaries list them.
_COUNTED = {
    LedgerState.MOVED: "moved",
    LedgerState.REPLICATING: "being re-replicated",
    LedgerState.QUEUED: "queued",
    LedgerState.AWAITING_AUDIT: "waiting for the auditor",
    LedgerState.BLOCKED: "blocked",
    LedgerState.NOT_MARKED: "not marked by the audit",
}


class AuditState(StrEnum):
    WAITING = "waiting"  # triggered, not seen to have run
    RAN = "ran"


@dataclass(frozen=True)
class LedgerRow:
    """One ledger of a decommission. ``worker``: the lock holder now; ``reason``,
    ``reason_kind``, ``reason_worker``: the last recorded attempt (a blocked ledger's, or a
    replicating one's previous try); ``remedy``: what the operator can do about it."""

    ledger_id: int
    state: LedgerState
    since_ms: int | None = None
    worker: str | None = None
    reason: str | None = None
    reason_kind: str | None = None
    reason_worker: str | None = None
    remedy: str | None = None

    @property
    def blocked_for_good(self) -> bool:
        return self.state is LedgerState.BLOCKED and self.reason_kind in PERMANENT_KINDS


@dataclass(frozen=True)
class Observation:
    """What one poll read: the ledgers still needing the bookie; of those, the queue
    entries, the lock holders and the recorded reasons; the audit as judged so far; the
    wall time of the poll."""

    remaining: Collection[int]
    marks: Mapping[int, UnderreplicatedLedger]
    holders: Mapping[int, str]
    reasons: Mapping[int, BlockedReason]
    audit: AuditState
    now_ms: int


@dataclass(frozen=True)
class DecommissionStatus:
    """A decommission at one poll: every ledger that needed ``bookie_id`` at the start
    (``rows``, by id), the audit as judged, the cluster's auditor and switch."""

    bookie_id: str
    rows: Mapping[int, LedgerRow]
    audit: AuditState = AuditState.WAITING
    auditor: str | None = None
    enabled: bool = True
    elapsed_s: float = 0.0
    counts: Mapping[LedgerState, int] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        counts = dict.fromkeys(_COUNTED, 0)
        for row in self.rows.values():
            counts[row.state] += 1
        object.__setattr__(self, "counts", counts)

    @property
    def total(self) -> int:
        return len(self.rows)

    @property
    def moved(self) -> int:
        return self.counts[LedgerState.MOVED]

    def stuck(self) -> list[LedgerRow]:
        """The ledgers that wait on something other than a worker's progress: blocked
        (those blocked for good first) and not marked, by id within each."""
        rows = sorted(self.rows.values(), key=lambda r: r.ledger_id)
        blocked = [r for r in rows if r.state is LedgerState.BLOCKED]
        return [
            *(r for r in blocked if r.blocked_for_good),
            *(r for r in blocked if not r.blocked_for_good),
            *(r for r in rows if r.state is LedgerState.NOT_MARKED),
        ]


class AuditWatch:
    """Judges from outside whether the audit has run (module doc): call :meth:`observe` at
    each poll with the ledgers seen marked for the bookie and those moved off it, and the
    monotonic time."""

    def __init__(self, settle_s: float) -> None:
        self._settle_s = settle_s
        self._seen: set[int] = set()
        self._last_new_s: float | None = None

    def observe(self, marked: Iterable[int], moved: Iterable[int], now_s: float) -> AuditState:
        before = len(self._seen)
        self._seen.update(marked)
        self._seen.update(moved)
        if len(self._seen) > before:
            self._last_new_s = now_s
        if self._last_new_s is None or now_s - self._last_new_s < self._settle_s:
            return AuditState.WAITING
        return AuditState.RAN


def ledger_rows(
    bookie_id: str, observation: Observation, previous: Mapping[int, LedgerRow]
) -> dict[int, LedgerRow]:
    """The rows of this poll, by id: one per ledger of ``previous`` (the rows of the last
    poll, or of the start with any state) and of ``observation.remaining``."""
    now_ms = observation.now_ms
    remaining = set(observation.remaining)
    rows: dict[int, LedgerRow] = {}
    for ledger_id in sorted(remaining | set(previous)):
        before = previous.get(ledger_id)
        if ledger_id in remaining:
            row = _row(bookie_id, ledger_id, observation, before)
        else:
            row = LedgerRow(ledger_id, LedgerState.MOVED)
        if row.since_ms is None:
            same = before is not None and (before.state, before.worker) == (row.state, row.worker)
            since = before.since_ms if same and before is not None else None
            row = dataclasses.replace(row, since_ms=now_ms if since is None else since)
        rows[ledger_id] = row
    return rows


def _row(bookie_id: str, ledger_id: int, seen: Observation, before: LedgerRow | None) -> LedgerRow:
    mark = seen.marks.get(ledger_id)
    if mark is None or bookie_id not in mark.missing_replicas:
        if seen.audit is AuditState.WAITING:
            return LedgerRow(ledger_id, LedgerState.AWAITING_AUDIT)
        fix = f"copy it by hand: bkeeper shell recover {bookie_id} --ledger {ledger_id}"
        return LedgerRow(ledger_id, LedgerState.NOT_MARKED, remedy=fix)
    holder = seen.holders.get(ledger_id)
    why = seen.reasons.get(ledger_id)
    if why is None:
        if holder is not None:
            return LedgerRow(ledger_id, LedgerState.REPLICATING, worker=holder)
        return LedgerRow(ledger_id, LedgerState.QUEUED, since_ms=mark.ctime_ms)
    held_before = before is not None and holder is not None and before.worker == holder
    state = LedgerState.REPLICATING if held_before else LedgerState.BLOCKED
    return LedgerRow(
        ledger_id,
        state,
        since_ms=why.since_ms if state is LedgerState.BLOCKED else None,
        worker=holder,
        reason=why.detail,
        reason_kind=why.kind,
        reason_worker=why.worker,
        remedy=remedy(bookie_id, why.kind, why.detail) if state is LedgerState.BLOCKED else None,
    )


#: ``missing_replacements``' text (autorecovery/replicate.py): which bookies need a
#: candidate, how many are writable, already in the ensemble, registered but lacking entries.
_NO_CANDIDATE = re.compile(
    r"no candidate bookie for (?P<needing>[^(]+) \(segment at entry \d+\): "
    r"(?P<writable>\d+) writable, (?P<already>\d+) already in the ensemble"
    r"(?:, (?P<lacking>\d+) lacking entries)?"
)
#: ``replace_bookie``'s text when the racks enforced rule out every candidate
#: (client/placement.py): the racks the ledger's other members are on.
_NO_RACK = re.compile(r"the other members are on \d+ racks? \((?P<racks>[^)]*)\)")


def remedy(bookie_id: str, kind: str, detail: str) -> str:
    """What the operator can do about a ledger blocked with ``kind`` and ``detail`` (the
    text its worker recorded)."""
    if kind == "no_candidate":
        return _add_bookies(detail)
    if kind == "awaiting_writer":
        return (
            "wait: its writer may replace the bookie itself; once open_ledger_grace_period_ms "
            "is over a worker fences and copies it (closing its writer ends it sooner)"
        )
    if kind == "no_password":
        return (
            "no worker can copy it: delete the ledger if it is not needed, or keep "
            f"{bookie_id} (start it again)"
        )
    if kind == "replicas_unreadable":
        return f"no other replica serves its entries: start {bookie_id} again to copy them"
    if kind == "target_failed":
        return "workers try another target (that bookie's log says why it refused)"
    return "workers try again (the worker's log says more)"


def _add_bookies(detail: str) -> str:
    """How many writable bookies to add, and where, as far as ``detail`` says."""
    retry = "workers retry as soon as one registers"
    rack = _NO_RACK.search(detail)
    if rack is not None:
        return (
            f"add a writable bookie on a rack other than {rack['racks']} "
            f"(min_racks_per_write_quorum is enforced; {retry})"
        )
    found = _NO_CANDIDATE.search(detail)
    if found is None:
        return f"add a writable bookie that is not in its ensemble ({retry})"
    needing = len([b for b in found["needing"].split(",") if b.strip()])
    writable, already = int(found["writable"]), int(found["already"])
    spare = writable - already - int(found["lacking"] or 0)
    missing = max(needing - max(spare, 0), 1)
    bookies = "bookie" if missing == 1 else "bookies"
    return f"add {missing} writable {bookies} outside its ensemble ({retry})"


def describe(row: LedgerRow) -> str:
    """One line for a person (no times: the caller adds ``since`` as it shows time)."""
    state = row.state
    if state is LedgerState.MOVED:
        return "moved off"
    if state is LedgerState.AWAITING_AUDIT:
        return "waiting for the auditor to mark it under-replicated"
    if state is LedgerState.QUEUED:
        return "queued: marked under-replicated, no worker on it yet"
    if state is LedgerState.REPLICATING:
        last = f" (its last attempt: {row.reason})" if row.reason else ""
        return f"being re-replicated by {row.worker}{last}"
    if state is LedgerState.NOT_MARKED:
        return f"not marked under-replicated although the audit ran; {row.remedy}"
    retrying = f"; {row.worker} is trying it again" if row.worker else ""
    return f"blocked: {row.reason} ({row.reason_kind}){retrying}; {row.remedy}"


def changed_rows(
    previous: Mapping[int, LedgerRow], current: Mapping[int, LedgerRow]
) -> list[LedgerRow]:
    """The rows of ``current`` that are new or changed state, worker or reason, by id."""
    changed = []
    for ledger_id, row in sorted(current.items()):
        before = previous.get(ledger_id)
        if before is None or _shown(before) != _shown(row):
            changed.append(row)
    return changed


def _shown(row: LedgerRow) -> tuple[object, ...]:
    return (row.state, row.worker, row.reason_kind, row.reason)


def counts_text(status: DecommissionStatus) -> str:
    """``2 of 5 moved, 1 being re-replicated, 1 blocked``: the states that have ledgers."""
    parts = [f"{status.moved} of {status.total} moved"]
    for state, words in _COUNTED.items():
        count = status.counts[state]
        if state is not LedgerState.MOVED and count:
            parts.append(f"{count} {words}")
    return ", ".join(parts)


def timeout_message(status: DecommissionStatus, timeout_s: float) -> str:
    """The one line a decommission that timed out fails with: how many ledgers still need
    the bookie, in which states, the first blocked ones with their reasons and what to do."""
    bookie_id = status.bookie_id
    left = status.total - status.moved
    message = (
        f"bookie {bookie_id}: {left} of {status.total} ledgers still need it after "
        f"{timeout_s:g} s ({counts_text(status)})"
    )
    stuck = status.stuck()
    for row in stuck[:TIMEOUT_LEDGERS_NAMED_MAX]:
        message += f"; ledger {row.ledger_id} {describe(row)}"
    if len(stuck) > TIMEOUT_LEDGERS_NAMED_MAX:
        message += f"; and {len(stuck) - TIMEOUT_LEDGERS_NAMED_MAX} more"
    if left and status.counts[LedgerState.AWAITING_AUDIT] == left:
        auditor = status.auditor
        message += (
            "; no auditor is elected" if auditor is None else f"; auditor {auditor} marked none"
        )
    if not status.enabled:
        message += "; auto-recovery is disabled (bkeeper shell autorecovery --enable)"
    return f"{message} (bkeeper shell listunderreplicated --missing {bookie_id})"
