"""Where each ledger of a decommission stands, as a pure function of what one poll read
(:mod:`bkeeper.autorecovery.decommission_status`): every state, the order in which they win,
since when, what the operator can do, and the timeout's one line."""

from __future__ import annotations

from collections.abc import Mapping

from bkeeper.autorecovery.decommission_status import (
    AuditState,
    AuditWatch,
    DecommissionStatus,
    LedgerRow,
    LedgerState,
    Observation,
    changed_rows,
    counts_text,
    describe,
    ledger_rows,
    remedy,
    timeout_message,
)
from bkeeper.autorecovery.replicate import missing_replacements
from bkeeper.common.ids import LedgerId
from bkeeper.meta.ledger_metadata import LedgerMetadata
from bkeeper.meta.ledger_metadata import LedgerState as MetaState
from bkeeper.meta.underreplication import BlockedReason, UnderreplicatedLedger
from bkeeper.wire.digest import DigestType

GONE = "gone:3181"
OTHER = "other:3181"
NOW_MS = 1_700_000_100_000
MARKED_MS = 1_700_000_000_000
WHY = f"no candidate bookie for {GONE} (segment at entry 0): 3 writable, 3 already in the ensemble"


def mark(ledger_id: int, *missing: str, ctime_ms: int | None = MARKED_MS) -> UnderreplicatedLedger:
    return UnderreplicatedLedger(LedgerId(ledger_id), missing or (GONE,), ctime_ms, 0)


def blocked(kind: str = "no_candidate", detail: str = WHY) -> BlockedReason:
    return BlockedReason(kind, detail, MARKED_MS + 5, "w1")


def poll(
    remaining: list[int],
    *,
    marks: Mapping[int, UnderreplicatedLedger] | None = None,
    holders: Mapping[int, str] | None = None,
    reasons: Mapping[int, BlockedReason] | None = None,
    audit: AuditState = AuditState.WAITING,
    previous: Mapping[int, LedgerRow] | None = None,
    now_ms: int = NOW_MS,
) -> dict[int, LedgerRow]:
    seen = Observation(remaining, marks or {}, holders or {}, reasons or {}, audit, now_ms)
    return ledger_rows(GONE, seen, previous or {})


def test_not_marked_yet_waits_for_the_auditor_then_says_the_audit_left_it() -> None:
    [row] = poll([1]).values()
    assert row == LedgerRow(1, LedgerState.AWAITING_AUDIT, since_ms=NOW_MS)
    # queued for another bookie only: the worker would not move this one
    [other] = poll([1], marks={1: mark(1, OTHER)}).values()
    assert other.state is LedgerState.AWAITING_AUDIT
    [left] = poll([1], audit=AuditState.RAN, marks={1: mark(1, OTHER)}).values()
    assert left.state is LedgerState.NOT_MARKED
    assert left.remedy == f"copy it by hand: bkeeper shell recover {GONE} --ledger 1"
    assert describe(left).startswith("not marked under-replicated although the audit ran; copy")


def test_marked_and_nobody_on_it_is_queued_since_its_mark() -> None:
    [row] = poll([1], marks={1: mark(1, OTHER, GONE)}).values()
    assert row == LedgerRow(1, LedgerState.QUEUED, since_ms=MARKED_MS)
    assert describe(row) == "queued: marked under-replicated, no worker on it yet"
    # a mark without its time (a Java auditor's, say): since first seen, kept after
    first = poll([1], marks={1: mark(1, ctime_ms=None)})
    later = poll([1], marks={1: mark(1, ctime_ms=None)}, previous=first, now_ms=NOW_MS + 9)
    assert first[1].since_ms == later[1].since_ms == NOW_MS


def test_a_worker_on_it_re_replicates_since_first_seen_until_another_takes_it() -> None:
    first = poll([1], marks={1: mark(1)}, holders={1: "w1"})
    assert first[1] == LedgerRow(1, LedgerState.REPLICATING, since_ms=NOW_MS, worker="w1")
    assert describe(first[1]) == "being re-replicated by w1"
    same = poll([1], marks={1: mark(1)}, holders={1: "w1"}, previous=first, now_ms=NOW_MS + 7)
    assert same[1].since_ms == NOW_MS
    other = poll([1], marks={1: mark(1)}, holders={1: "w2"}, previous=same, now_ms=NOW_MS + 8)
    assert (other[1].worker, other[1].since_ms) == ("w2", NOW_MS + 8)


def test_a_recorded_reason_blocks_it_since_the_worker_found_it_with_what_to_do() -> None:
    [row] = poll([1], marks={1: mark(1)}, reasons={1: blocked()}).values()
    assert row.state is LedgerState.BLOCKED and row.blocked_for_good
    assert (row.since_ms, row.reason, row.reason_kind, row.reason_worker, row.worker) == (
        MARKED_MS + 5,
        WHY,
        "no_candidate",
        "w1",
        None,
    )
    assert row.remedy == (
        "add 1 writable bookie outside its ensemble (workers retry as soon as one registers)"
    )
    assert describe(row) == f"blocked: {WHY} (no_candidate); {row.remedy}"
    waiting = poll([1], marks={1: mark(1)}, reasons={1: blocked("awaiting_writer", "open")})
    assert waiting[1].state is LedgerState.BLOCKED and not waiting[1].blocked_for_good


def test_a_blocked_ledger_held_once_is_retried_held_twice_is_being_copied() -> None:
    """A retry that fails again lets go within milliseconds; a lock held at two polls in a
    row by the same worker is a copy under way (a bookie joined, say)."""
    seen = {"marks": {1: mark(1)}, "reasons": {1: blocked()}, "holders": {1: "w2"}}
    first = poll([1], **seen)
    assert (first[1].state, first[1].worker) == (LedgerState.BLOCKED, "w2")
    assert "; w2 is trying it again; add 1" in describe(first[1])
    second = poll([1], **seen, previous=first, now_ms=NOW_MS + 3)
    row = second[1]
    assert (row.state, row.worker, row.since_ms, row.remedy) == (
        LedgerState.REPLICATING,
        "w2",
        NOW_MS + 3,
        None,
    )
    assert describe(row) == f"being re-replicated by w2 (its last attempt: {WHY})"
    released = poll([1], marks={1: mark(1)}, reasons={1: blocked()}, previous=second)
    assert (released[1].state, released[1].worker) == (LedgerState.BLOCKED, None)


def test_a_ledger_gone_from_the_remaining_is_moved_since_first_seen_so() -> None:
    before = poll([1, 2], marks={1: mark(1)})
    after = poll([2], previous=before, now_ms=NOW_MS + 50)
    assert after[1] == LedgerRow(1, LedgerState.MOVED, since_ms=NOW_MS + 50)
    assert list(after) == [1, 2]
    again = poll([2], previous=after, now_ms=NOW_MS + 99)
    assert again[1].since_ms == NOW_MS + 50
    assert describe(again[1]) == "moved off"


def test_what_to_do_follows_the_kind_and_the_text_the_worker_recorded() -> None:
    meta = LedgerMetadata(
        ensemble_size=3,
        write_quorum=2,
        ack_quorum=2,
        segments={0: ["a:1", "b:1", GONE]},
        digest_type=DigestType.CRC32C,
        password=b"pw",
        state=MetaState.OPEN,
    )
    # the text as the worker writes it (a change there must change this)
    why = missing_replacements(meta, {GONE}, ["a:1", "b:1"])
    assert why is not None
    assert remedy(GONE, "no_candidate", why).startswith("add 1 writable bookie outside")
    two = missing_replacements(meta, {GONE, "b:1"}, ["a:1"])
    assert two is not None and remedy(GONE, "no_candidate", two).startswith("add 2 writable")
    racks = (
        "ledger 7, segment at entry 0: no bookie can replace gone:3181 with every write "
        "quorum of 3 on 2 racks: the other members are on 1 rack (/r1) and the candidates on "
        "1 rack (/r1) (min_racks_per_write_quorum, enforced)"
    )
    assert remedy(GONE, "no_candidate", racks).startswith(
        "add a writable bookie on a rack other than /r1 (min_racks_per_write_quorum"
    )
    assert remedy(GONE, "no_candidate", "something new").startswith("add a writable bookie")
    assert "fences and copies it" in remedy(GONE, "awaiting_writer", "open ...")
    assert f"keep {GONE} (start it again)" in remedy(GONE, "no_password", "no password")
    assert f"start {GONE} again" in remedy(GONE, "replicas_unreadable", "read failed")
    assert "another target" in remedy(GONE, "target_failed", "refused")
    assert remedy(GONE, "error", "metadata store away").startswith("workers try again")


def test_the_audit_counts_as_run_once_no_new_mark_was_seen_for_the_settle_time() -> None:
    watch = AuditWatch(settle_s=10)
    assert watch.observe([], [], 0) is AuditState.WAITING
    assert watch.observe([], [], 100) is AuditState.WAITING  # nothing marked: not seen to run
    assert watch.observe([1], [], 101) is AuditState.WAITING
    assert watch.observe([1], [], 110) is AuditState.WAITING
    assert watch.observe([1], [], 111) is AuditState.RAN
    assert watch.observe([1, 2], [], 112) is AuditState.WAITING  # still marking
    assert watch.observe([2], [1], 121) is AuditState.WAITING  # a ledger moved: nothing new
    assert watch.observe([2], [], 122) is AuditState.RAN
    moved_only = AuditWatch(settle_s=1)
    moved_only.observe([], [5], 0)  # marked and moved between two polls
    assert moved_only.observe([], [], 1) is AuditState.RAN


def test_changes_are_new_rows_and_rows_whose_state_worker_or_reason_changed() -> None:
    first = poll([1, 2, 3], marks={2: mark(2)}, holders={2: "w1"})
    assert [r.ledger_id for r in changed_rows({}, first)] == [1, 2, 3]
    second = poll(
        [1, 2, 3],
        marks={1: mark(1), 2: mark(2), 3: mark(3)},
        holders={2: "w1"},
        previous=first,
        now_ms=NOW_MS + 1,
    )
    assert [(r.ledger_id, r.state) for r in changed_rows(first, second)] == [
        (1, LedgerState.QUEUED),
        (3, LedgerState.QUEUED),
    ]
    third = poll(
        [3],
        marks={3: mark(3)},
        reasons={3: blocked()},
        previous=second,
        now_ms=NOW_MS + 2,
    )
    assert [(r.ledger_id, r.state) for r in changed_rows(second, third)] == [
        (1, LedgerState.MOVED),
        (2, LedgerState.MOVED),
        (3, LedgerState.BLOCKED),
    ]
    assert changed_rows(third, third) == []


def status(rows: dict[int, LedgerRow], **kwargs: object) -> DecommissionStatus:
    return DecommissionStatus(GONE, rows, **kwargs)


def test_counts_and_the_timeout_line_name_what_blocks_it_and_what_to_do() -> None:
    rows = poll(
        [2, 3, 4, 5, 6, 7],
        marks={n: mark(n) for n in (2, 3, 4, 5, 6)},
        holders={2: "w1"},
        reasons={4: blocked("error", "a race lost"), 5: blocked(), 6: blocked()},
        audit=AuditState.RAN,
        previous={1: LedgerRow(1, LedgerState.MOVED)},
    )
    current = status(rows, auditor="aud:1")
    assert counts_text(current) == (
        "1 of 7 moved, 1 being re-replicated, 1 queued, 3 blocked, 1 not marked by the audit"
    )
    # blocked for good first, then the others blocked, then those not marked
    assert [r.ledger_id for r in current.stuck()] == [5, 6, 4, 7]
    line = timeout_message(current, 60)
    assert line.startswith(f"bookie {GONE}: 6 of 7 ledgers still need it after 60 s (1 of 7 ")
    assert f"; ledger 5 blocked: {WHY} (no_candidate); add 1 writable bookie" in line
    assert "; ledger 6 blocked:" in line and "; ledger 4 blocked: a race lost (error)" in line
    assert "; and 1 more" in line and "ledger 7" not in line
    assert line.endswith(f"(bkeeper shell listunderreplicated --missing {GONE})")
    assert "\n" not in line

    waiting = status(poll([1, 2]), auditor=None, enabled=False)
    line = timeout_message(waiting, 0.5)
    assert (
        "2 of 2 ledgers still need it after 0.5 s (0 of 2 moved, 2 waiting for the auditor)" in line
    )
    assert "; no auditor is elected; auto-recovery is disabled" in line
    assert "auditor aud:1 marked none" in timeout_message(status(poll([1]), auditor="aud:1"), 1)
