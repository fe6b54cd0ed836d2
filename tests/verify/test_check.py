"""The ledger checker on hand-made histories: each violation it exists for is found, and a
clean history has none."""

from __future__ import annotations

from bkeeper.verify.check import FinalLedger, check_ledgers
from bkeeper.verify.history import History, Op


def history(*events: tuple[str, str, str, int, int, str]) -> list[Op]:
    h = History()
    for process, type_, f, ledger, entry, value in events:
        h.add(process, type_, f, ledger=ledger, entry=entry, value=value)  # type: ignore[arg-type]
    return list(h)


def written(ledger: int, entries: int, *, acked: int | None = None) -> list[tuple]:
    """A writer creating ``ledger`` and sending ``entries`` entries (digest "d<n>"), the
    first ``acked`` acknowledged (all by default)."""
    events: list[tuple] = [("w", "ok", "create", ledger, -1, "")]
    for e in range(entries):
        events.append(("w", "invoke", "append", ledger, e, f"d{e}"))
    for e in range(entries if acked is None else acked):
        events.append(("w", "ok", "append", ledger, e, f"d{e}"))
    return events


def final(last: int, **changed: str) -> FinalLedger:
    digests = {e: f"d{e}" for e in range(last + 1)}
    for key, value in changed.items():
        digests[int(key[1:])] = value
    return FinalLedger(last, digests)


def test_a_clean_history_has_no_violation() -> None:
    ops = history(*written(1, 5), ("w", "ok", "close", 1, 4, ""), ("r", "ok", "read", 1, 2, "d2"))
    verdict = check_ledgers(ops, {1: final(4)})
    assert verdict.ok, verdict.violations
    assert (verdict.acknowledged, verdict.reads, verdict.ledgers) == (5, 1, 1)


def test_an_unacknowledged_entry_may_be_there_or_not() -> None:
    ops = history(*written(1, 5, acked=3))
    assert check_ledgers(ops, {1: final(2)}).ok
    assert check_ledgers(ops, {1: final(4)}).ok


def test_a_lost_acknowledged_entry() -> None:
    verdict = check_ledgers(history(*written(1, 5)), {1: final(3)})
    assert verdict.violations == ["ledger 1: acknowledged entry 4 lost"]


def test_an_acknowledged_entry_that_differs_is_also_data_no_writer_sent() -> None:
    verdict = check_ledgers(history(*written(1, 3)), {1: final(2, e1="zz")})
    assert verdict.violations == [
        "ledger 1: entry 1 holds data no writer sent",
        "ledger 1: acknowledged entry 1 differs",
    ]


def test_a_hole_below_the_end() -> None:
    end = FinalLedger(3, {0: "d0", 1: "d1", 3: "d3"})
    verdict = check_ledgers(history(*written(1, 4, acked=0)), {1: end})
    assert verdict.violations == ["ledger 1: entries 2 missing below its end"]


def test_nothing_acknowledged_past_a_fence_and_the_seal_holds() -> None:
    ops = history(
        *written(1, 4, acked=2), ("f", "ok", "fence", 1, 1, ""), ("w", "ok", "append", 1, 2, "d2")
    )
    verdict = check_ledgers(ops, {1: final(1)})
    assert verdict.violations == [
        "ledger 1: entry 2 acknowledged past its seal at 1 (fence)",
        "ledger 1: acknowledged entry 2 lost",
    ]
    moved = check_ledgers(history(*written(1, 4), ("f", "ok", "fence", 1, 3, "")), {1: final(2)})
    assert "ledger 1: fence sealed it at 3, ends at 2" in moved.violations


def test_two_seals_that_disagree() -> None:
    ops = history(
        *written(1, 3, acked=1), ("w", "ok", "close", 1, 0, ""), ("f", "ok", "fence", 1, 2, "")
    )
    verdict = check_ledgers(ops, {1: final(0)})
    assert verdict.violations[0] == "ledger 1: sealed at 0 by close, then at 2 by fence"


def test_a_reader_that_saw_what_is_not_there_at_the_end() -> None:
    ops = history(
        *written(1, 3, acked=1), ("r", "ok", "read", 1, 2, "d2"), ("r", "ok", "read", 1, 0, "other")
    )
    verdict = check_ledgers(ops, {1: final(1)})
    assert verdict.violations == [
        "ledger 1: entry 2 read by r, later lost",
        "ledger 1: entry 0 read by r differs from its end",
    ]


def test_an_unreadable_ledger() -> None:
    verdict = check_ledgers(history(*written(1, 2)), {1: FinalLedger(error="BookieUnavailable")})
    assert verdict.violations == ["ledger 1: unreadable at the end: BookieUnavailable"]
    assert check_ledgers(history(*written(2, 1)), {}).violations == [
        "ledger 2: unreadable at the end: not read"
    ]
