"""Degraded writes in the pure add pipeline (client.adding, rule 5): a lost bookie with no
spare is left down while every write set keeps Qa bookies up; entries complete with Qa acks
from the others, its missing acks start no change, a search for replacements runs every
``degraded_retry_interval_s``, and a replacement found ends it. Before, the first change that
found no replacement failed the writer."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bkeeper.client.adding import NOTHING, AddPipeline, Effects, PendingAdd, Phase
from bkeeper.client.distribution import write_set
from bkeeper.common.errors import LedgerClosedError, NotEnoughBookiesError
from tests.client.test_adding import Model

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


def test_a_bookie_down_that_answers_again_is_taken_back_in_its_place() -> None:
    p = pipeline()
    append(p)
    p.ack("b0", 0)
    lose_without_spare(p, "b1")
    append(p)
    p.ack("b0", 1)
    p.ack("b2", 1)  # entry 1 complete without b1 ... only once entry 0 is
    assert p.last_add_confirmed == -1
    effects = p.taken_back(["b1", "b7"], 1.0)
    assert p.phase is Phase.OPEN and p.down == frozenset()
    assert effects.back == ("b1",) and effects.healed == ("b1",)
    assert [(a.entry_id, ws) for a, ws in effects.send] == [(0, (1,)), (1, (1,))]
    assert p.write_sets == [(0, 1, 2)] and p.ensemble == ("b0", "b1", "b2")
    done = p.ack("b1", 0)
    assert done is not None and [a.entry_id for a in done] == [0, 1]
    assert ticks(p, 1.0, 3 * RETRY_S) == [], "no search once every bookie is back"


def test_taking_back_one_of_two_bookies_down_stays_degraded() -> None:
    p = pipeline(3, 3, 1)
    lose_without_spare(p, "b1")
    lose_without_spare(p, "b2")
    assert p.down == {"b1", "b2"}
    effects = p.taken_back(["b2"], 0.0)
    assert effects.back == ("b2",) and effects.healed == ()
    assert p.phase is Phase.DEGRADED and p.down == {"b1"} and p.write_sets == [(0, 2)]
    assert [e.find_replacement for e in ticks(p, 0.0, RETRY_S)] == [True]
    assert p.taken_back(["b2"], RETRY_S) is NOTHING, "none of those down: no search now"
    assert p.taken_back(["b1"], RETRY_S).healed == ("b1", "b2")


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


class DegradedModel(Model):
    """test_adding's model, with changes that may find no replacement and degraded
    searches: the same invariants, and none of the bookies down is sent to."""

    def completes(self, done: list[PendingAdd] | tuple[PendingAdd, ...]) -> None:
        phase = self.p.phase
        self.p._phase = Phase.OPEN  # the base model checks completion happens while OPEN
        try:
            assert phase in (Phase.OPEN, Phase.DEGRADED)
            super().completes(done)
        finally:
            self.p._phase = phase

    def up_positions(self, entry_id: int) -> set[int]:
        down = {p for p, b in enumerate(self.p.ensemble) if b in self.p.down}
        return set(write_set(entry_id, self.e, self.qw)) - down

    def append(self) -> None:
        if self.p.full or self.failure_reported:
            return
        entry_id = self.p.last_add_pushed + 1
        positions = self.p.append(entry_id, self.p.length + 1, b"x", None, self.now)
        assert set(positions) == self.up_positions(entry_id)
        self.sent[entry_id] = {self.p.ensemble[i] for i in positions}

    def append_many(self, data: st.DataObject) -> None:
        room = self.p.pending_max - len(self.p)
        if room <= 0 or self.failure_reported:
            return
        count = data.draw(st.integers(1, min(room, 5)))
        first = self.p.last_add_pushed + 1
        lengths = [self.p.length + i + 1 for i in range(count)]
        self.p.append_many(first, lengths, [b"x"] * count, "future", self.now)
        for entry_id in range(first, first + count):
            ws = self.p.write_sets[entry_id % len(self.p.write_sets)]
            assert set(ws) == self.up_positions(entry_id)
            self.sent[entry_id] = {self.p.ensemble[i] for i in ws}

    def apply(self, effects: Effects) -> None:
        super().apply(effects)
        if effects.find_replacement:
            assert self.p.phase is Phase.DEGRADED and not self.changing

    def no_spare(self) -> None:
        """The change in progress finds no replacement."""
        if not self.changing or self.p.begin_replacement() is None:
            return
        self.changing = False
        self.apply(self.p.no_replacement(NO_SPARE, self.now))
        if self.p.phase is Phase.DEGRADED:
            for ws in self.p.write_sets:
                assert len(ws) >= self.qa, "every write set keeps Qa up"

    def back(self, data: st.DataObject) -> None:
        """Some bookie (maybe one down) answers again."""
        bookie = self.pick_bookie(data)
        down = self.p.down
        effects = self.p.taken_back([bookie], self.now)
        self.apply(effects)
        if bookie in down and not self.changing and not self.failure_reported:
            assert bookie not in self.p.down and effects.back == (bookie,)

    def search_done(self, data: st.DataObject) -> None:
        self.apply(self.p.replacement_search_done(data.draw(st.booleans()), self.now))


@settings(max_examples=300)
@given(
    data=st.data(),
    shape=st.sampled_from([(3, 3, 2), (3, 2, 1), (5, 3, 2), (4, 3, 2), (3, 3, 1)]),
)
def test_random_interleavings_with_no_spare_keep_the_invariants(
    data: st.DataObject, shape: tuple[int, int, int]
) -> None:
    model = DegradedModel(*shape)
    events = data.draw(
        st.lists(
            st.sampled_from(
                [
                    *("append", "append", "append_many", "ack", "ack", "ack", "acks", "ack_run"),
                    *("error", "lose", "tick", "change", "no_spare", "no_spare", "search_done"),
                    "back",
                ]
            ),
            max_size=120,
        )
    )
    for event in events:
        if event in ("append", "change", "no_spare"):
            getattr(model, {"change": "change_round"}.get(event, event))()
        else:
            getattr(model, event)(data)
        pending = model.p.pending
        if pending and model.p.phase in (Phase.OPEN, Phase.DEGRADED):
            assert len(model.p.acked_by(pending[0])) < model.qa, "nothing left to complete"
    pending_ids = {add.entry_id for add in model.p.pending}
    assert not set(model.completed) & model.failed
    everything = set(range(model.p.last_add_pushed + 1))
    assert set(model.completed) | model.failed | pending_ids == everything
    if model.failure_reported:
        assert not pending_ids and model.p.phase is Phase.FAILED
