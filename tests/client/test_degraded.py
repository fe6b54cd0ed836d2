"""Degraded writes in the pure add pipeline (client.adding, rule 5): a lost bookie with no
spare is left down while every write set keeps Qa bookies up; entries complete with Qa acks
from the others, its missing acks start no change, a search for replacements runs every
``degraded_retry_interval_s``, and a replacement found ends it. Before, the first change that
found no replacement failed the writer."""

from __future__ import annotations

import pytest

from bkeeper.client.adding import NOTHING, AddPipeline, Effects, Phase
from bkeeper.common.errors import LedgerClosedError, NotEnoughBookiesError

TIMEOUT_S = 5.0
TICK_S = 0.1
RETRY_S = 3.0
NO_SPARE = NotEnoughBookiesError("no bookie can replace b1: 3 bookies registered as writable")


def pipeline(e: int = 3, qw: int = 3, qa: int = 2, **options: object) -> AddPipeline:
    return AddPipeline(
        7,
        tuple(f"b{i}" for i in range(e)),
        qw,
        qa,
        pending_max=100,
        add_timeout_s=TIMEOUT_S,
        tick_interval_s=TICK_S,
        ensemble_changes_max=options.pop("changes_max", 1_000),  # type: ignore[arg-type]
        now=0.0,
        degraded_retry_interval_s=RETRY_S,
        **options,  # type: ignore[arg-type]
    )


def append(p: AddPipeline, now: float = 0.0) -> tuple[int, ...]:
    entry_id = p.last_add_pushed + 1
    return p.append(entry_id, p.length + 1, b"x", None, now)


def lose_without_spare(p: AddPipeline, bookie: str, now: float = 0.0) -> Effects:
    """``bookie`` fails, and the change finds no bookie to replace it."""
    assert p.bookie_failed(bookie).change_ensemble
    replacement = p.begin_replacement()
    assert replacement is not None and bookie in replacement.failed
    return p.no_replacement(NO_SPARE, now)


def ticks(p: AddPipeline, start: float, seconds: float) -> list[Effects]:
    """Tick every TICK_S from ``start`` for ``seconds``; the effects that were not NOTHING."""
    seen = []
    for step in range(1, round(seconds / TICK_S) + 1):
        effects = p.tick(start + step * TICK_S)
        if effects is not NOTHING:
            seen.append(effects)
    return seen


def test_a_loss_with_no_spare_goes_on_degraded_with_qa_acks() -> None:
    p = pipeline()
    append(p)
    append(p)
    p.ack("b0", 0)
    p.ack("b1", 0)  # entry 0 completes on b0 + b1
    p.ack("b0", 1)  # entry 1: only b0 so far
    effects = lose_without_spare(p, "b1")
    assert p.phase is Phase.DEGRADED and effects.error is None
    assert effects.went_down == ("b1",)
    assert p.down == {"b1"} and p.live_ensemble == ("b0", "b2")
    assert p.last_add_confirmed == 0
    done = p.ack("b2", 1)  # b0 + b2: Qa
    assert done is not None and [a.entry_id for a in done] == [1]
    assert append(p) == (0, 2), "adds no longer go to the bookie down"
    assert p.write_sets == [(0, 2)]
    assert p.ack("b0", 2) is None
    done = p.ack("b2", 2)
    assert done is not None and [a.entry_id for a in done] == [2]
    assert p.bookie_failed("b1") is NOTHING, "a bookie down is not failed again"


def test_pending_entries_with_qa_complete_on_entering_degraded() -> None:
    p = pipeline()
    append(p)
    assert p.bookie_failed("b1").change_ensemble
    p.ack("b0", 0)
    p.ack("b2", 0)  # no completion while changing
    assert p.last_add_confirmed == -1
    p.begin_replacement()
    effects = p.no_replacement(NO_SPARE, 0.0)
    assert [a.entry_id for a in effects.complete] == [0]


def test_no_change_storm_and_one_search_per_interval() -> None:
    p = pipeline()
    lose_without_spare(p, "b1")
    now = 0.0
    searches = 0
    for _ in range(4):  # 4 intervals, an entry appended in each, never acked by b1
        for effects in ticks(p, now, RETRY_S):
            assert not effects.change_ensemble and not effects.timed_out
            assert effects.find_replacement
            searches += 1
        now += RETRY_S
        for add in p.pending:
            p.ack("b0", add.entry_id)
            p.ack("b2", add.entry_id)
        append(p, now)
        if searches:
            assert p.replacement_search_done(False, now) is NOTHING  # none yet
    assert searches == 4
    for add in p.pending:
        p.ack("b0", add.entry_id)
        p.ack("b2", add.entry_id)
    assert not p.pending
    # A search still running is not started again, however long it takes.
    (effects,) = ticks(p, now, RETRY_S)
    assert effects.find_replacement
    assert ticks(p, now + RETRY_S, 10 * RETRY_S) == []
    assert p.phase is Phase.DEGRADED


def test_a_live_bookie_late_past_the_timeout_is_still_blamed() -> None:
    p = pipeline()
    lose_without_spare(p, "b1")
    append(p)
    p.ack("b0", 0)
    search, late = ticks(p, 0.0, TIMEOUT_S + 2 * TICK_S)
    assert search.find_replacement
    assert late.change_ensemble and late.timed_out == (("b2", 0),)
    assert p.phase is Phase.CHANGING


def test_a_second_loss_fails_with_not_enough_bookies() -> None:
    p = pipeline()
    append(p)
    lose_without_spare(p, "b1")
    append(p)
    effects = lose_without_spare(p, "b2")
    assert p.phase is Phase.FAILED
    assert isinstance(effects.error, NotEnoughBookiesError)
    assert "no bookie can replace b1" in str(effects.error)
    assert "write set b0, b1, b2 keeps 1 bookies up, the ack quorum is 2" in str(effects.error)
    assert [a.entry_id for a in effects.fail] == [0, 1]
    with pytest.raises(NotEnoughBookiesError):
        append(p)


@pytest.mark.parametrize(
    ("shape", "degraded"),
    [((4, 2, 2), False), ((5, 3, 2), True), ((3, 2, 1), True), ((3, 3, 3), False)],
)
def test_every_write_set_must_keep_qa_up(shape: tuple[int, int, int], degraded: bool) -> None:
    p = pipeline(*shape)
    effects = lose_without_spare(p, "b1")
    assert (p.phase is Phase.DEGRADED) is degraded
    assert (effects.error is None) is degraded
    if degraded:
        assert all(1 not in ws for ws in p.write_sets)


def test_off_the_change_fails_as_before() -> None:
    p = pipeline(degraded_writes=False)
    append(p)
    effects = lose_without_spare(p, "b1")
    assert effects.error is NO_SPARE and [a.entry_id for a in effects.fail] == [0]
    assert p.phase is Phase.FAILED


def test_a_replacement_found_ends_degraded_writes() -> None:
    p = pipeline()
    append(p)
    p.ack("b0", 0)
    lose_without_spare(p, "b1")
    append(p)  # entry 1 -> b0, b2 only
    p.ack("b0", 1)
    wanted = p.replacement_wanted()
    assert wanted.failed == {"b1"} and wanted.first_entry == 0
    (search,) = ticks(p, 0.0, RETRY_S)
    assert search.find_replacement
    assert p.replacement_search_done(True, RETRY_S).change_ensemble
    assert p.phase is Phase.CHANGING
    replacement = p.begin_replacement()
    assert replacement is not None and replacement.failed == {"b1"}
    effects = p.replaced(("b0", "b9", "b2"), RETRY_S)
    assert [(a.entry_id, ws) for a, ws in effects.send] == [(0, (1,)), (1, (1,))]
    assert p.begin_replacement() is None
    done = p.change_done()
    assert done.healed == ("b1",) and p.phase is Phase.OPEN
    assert p.down == frozenset() and p.write_sets == [(0, 1, 2)]
    p.ack("b9", 0)
    assert p.ack("b9", 1) is not None and p.last_add_confirmed == 1
    assert ticks(p, RETRY_S, 3 * RETRY_S) == [], "no search once healed"


def test_a_search_overtaken_by_a_failure_does_nothing() -> None:
    p = pipeline(5, 3, 2)
    lose_without_spare(p, "b1")
    assert [e.find_replacement for e in ticks(p, 0.0, RETRY_S)] == [True]
    assert p.bookie_failed("b3").change_ensemble  # a change of its own
    assert p.replacement_search_done(True, RETRY_S) is NOTHING
    replacement = p.begin_replacement()
    assert replacement is not None and replacement.failed == {"b1", "b3"}


def test_searches_that_find_nothing_are_not_ensemble_changes() -> None:
    p = pipeline(changes_max=1)
    lose_without_spare(p, "b1")
    for _ in range(5):  # a change that found nothing, again and again
        assert p.replacement_search_done(True, 0.0).change_ensemble
        assert p.begin_replacement() is not None
        p.no_replacement(NO_SPARE, 0.0)
    assert p.phase is Phase.DEGRADED
    assert p.replacement_search_done(True, 0.0).change_ensemble
    p.begin_replacement()
    p.replaced(("b0", "b9", "b2"), 0.0)  # the one change allowed
    p.change_done()
    p.bookie_failed("b0")
    with pytest.raises(LedgerClosedError, match="more than 1 ensemble changes"):
        p.begin_replacement()
