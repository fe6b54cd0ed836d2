"""The log checker on hand-made histories: each violation it exists for is found, and a clean
history has none."""

from __future__ import annotations

from bkeeper.verify.check_log import check_log
from bkeeper.verify.history import History, Op

FINAL = [((1, 0), "a"), ((1, 1), "b"), ((2, 0), "c"), ((2, 1), "d")]


def ops(*events: tuple[str, str, str, int, int, str]) -> list[Op]:
    h = History()
    for process, type_, f, ledger, entry, value in events:
        h.add(process, type_, f, ledger=ledger, entry=entry, value=value)  # type: ignore[arg-type]
    return list(h)


SENT = [("w", "invoke", "append", -1, -1, v) for v in "abcd"]
ACKED = [("w", "ok", "append", 1, 0, "a"), ("w", "ok", "append", 2, 1, "d")]


def test_a_clean_history_has_no_violation() -> None:
    history = ops(
        *SENT,
        *ACKED,
        ("tail", "ok", "tail", 1, 0, "a"),
        ("tail", "ok", "tail", 1, 1, "b"),
        ("c0", "ok", "consume", 1, 0, "a"),
        ("c0", "ok", "consume", 1, 1, "b"),
        ("c0", "ok", "ack", 1, 1, ""),
        ("c1", "ok", "consume", 2, 0, "c"),
        ("c1", "ok", "ack", 2, 0, ""),
    )
    verdict = check_log(history, FINAL, (2, 0))
    assert verdict.ok, verdict.violations
    assert (verdict.acknowledged, verdict.reads, verdict.ledgers) == (2, 2, 2)


def test_lost_changed_duplicated_and_unsent_records() -> None:
    history = ops(*SENT[:3], *ACKED, ("w", "ok", "append", 1, 1, "x"))
    final = [((1, 0), "a"), ((1, 1), "b"), ((2, 0), "a"), ((2, 2), "d")]
    assert check_log(history, final, None).violations == [
        "record a appears twice (at 1:0 and 2:0)",
        "record at 2:2 was sent by no writer",
        "acknowledged record d at 2:1 lost",
        "position 1:1 holds another record than the one acknowledged there (x)",
    ]


def test_a_reader_that_skips_or_diverges() -> None:
    skipped = ops(*SENT, ("tail", "ok", "tail", 1, 0, "a"), ("tail", "ok", "tail", 2, 0, "c"))
    assert check_log(skipped, FINAL, None).violations == [
        "tail went from index 0 to 2 of the log: records skipped"
    ]
    late = ops(*SENT, ("tail", "ok", "tail", 1, 1, "b"))
    assert check_log(late, FINAL, None).violations == [
        "tail went from index -1 to 1 of the log: records skipped"
    ]
    other = ops(*SENT, ("tail", "ok", "tail", 1, 0, "z"))
    assert check_log(other, FINAL, None).violations == [
        "tail read 1:0 differently from the final log"
    ]


def test_a_consumer_session_that_skips_records_or_a_mark_out_of_bounds() -> None:
    history = ops(
        *SENT,
        ("c0", "ok", "consume", 1, 0, "a"),
        ("c0", "ok", "ack", 1, 0, ""),
        ("c1", "ok", "consume", 2, 0, "c"),
    )
    assert check_log(history, FINAL, (1, 0)).violations == [
        "c1 started at index 2 of the log, past the record after the last one delivered "
        "before it (1): records skipped"
    ]
    behind = ops(
        *SENT,
        ("c0", "ok", "consume", 1, 0, "a"),
        ("c0", "ok", "consume", 1, 1, "b"),
        ("c0", "ok", "ack", 1, 1, ""),
    )
    assert check_log(behind, FINAL, (1, 0)).violations == [
        "the subscription's mark is (1, 0), behind the last acknowledgement flushed (1, 1)"
    ]
    assert check_log(behind, FINAL, (2, 1)).violations == [
        "the subscription's mark (2, 1) is past every record delivered: records skipped"
    ]


def test_acks_flushed_without_a_record_may_move_the_mark_and_the_next_session() -> None:
    """A session that ended on an error had its acks flushed by ``close`` (not recorded):
    the mark and the next session may be past the last recorded flush, never past what was
    delivered (seed 504 of a log run was reported a violation before)."""
    history = ops(
        *SENT,
        ("c0", "ok", "consume", 1, 0, "a"),
        ("c0", "ok", "ack", 1, 0, ""),
        ("c0", "ok", "consume", 1, 1, "b"),
        ("c1", "ok", "consume", 2, 0, "c"),
    )
    assert check_log(history, FINAL, (2, 0)).ok
