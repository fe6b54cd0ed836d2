"""The pure add pipeline (client.adding): random interleavings of appends, acks, errors,
lost bookies, timeouts and ensemble changes, against the invariants of its rules."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bkeeper.client.adding import NOTHING, AddPipeline, Effects, PendingAdd, Phase
from bkeeper.client.distribution import write_set
from bkeeper.common.errors import LedgerClosedError, LedgerFencedError, UnauthorizedAccessError
from bkeeper.wire.codes import StatusCode

TIMEOUT_S = 5.0
TICK_S = 0.1


class Model:
    """Drives an AddPipeline and checks every effect it returns."""

    def __init__(self, e: int, qw: int, qa: int, changes_max: int = 1_000) -> None:
        self.e, self.qw, self.qa = e, qw, qa
        self.names = (f"b{i}" for i in itertools.count())
        self.now = 1000.0
        self.p = AddPipeline(
            7,
            tuple(next(self.names) for _ in range(e)),
            qw,
            qa,
            pending_max=50,
            add_timeout_s=TIMEOUT_S,
            tick_interval_s=TICK_S,
            ensemble_changes_max=changes_max,
            now=self.now,
        )
        self.completed: list[int] = []
        self.failed: set[int] = set()
        self.failure_reported = False
        self.acks_sent: dict[int, set[str]] = {}
        self.sent: dict[int, set[str]] = {}  # entry -> bookies it was sent to
        self.changing = False

    def write_set_bookies(self, entry_id: int) -> set[str]:
        ensemble = self.p.ensemble
        return {ensemble[i] for i in write_set(entry_id, self.e, self.qw)}

    # -- effects -------------------------------------------------------------------------
    def completes(self, done: list[PendingAdd] | tuple[PendingAdd, ...]) -> None:
        assert not self.failure_reported, "nothing completes after a failure is reported"
        assert self.p.phase is Phase.OPEN
        for add in done:
            expected = self.completed[-1] + 1 if self.completed else 0
            assert add.entry_id == expected, "completion in entry order"
            acked = self.p.acked_by(add)
            assert len(acked) >= self.qa
            assert acked <= self.acks_sent[add.entry_id], "only acks that were sent"
            assert acked <= self.write_set_bookies(add.entry_id), "only from its write set"
            self.completed.append(add.entry_id)
        assert self.p.last_add_confirmed == self.completed[-1]

    def apply(self, effects: Effects) -> None:
        if effects.error is not None:
            self.failure_reported = True
            for add in effects.fail:
                assert add.entry_id not in self.failed and add.entry_id not in self.completed
                self.failed.add(add.entry_id)
        for add, positions in effects.send:
            assert set(positions) <= set(write_set(add.entry_id, self.e, self.qw))
            self.sent.setdefault(add.entry_id, set()).update(self.p.ensemble[p] for p in positions)
        if effects.complete:
            self.completes(effects.complete)
        if effects.change_ensemble:
            assert not self.changing
            self.changing = True

    # -- events --------------------------------------------------------------------------
    def append(self) -> None:
        if self.p.full or self.failure_reported:
            return
        entry_id = self.p.last_add_pushed + 1
        positions = self.p.append(entry_id, self.p.length + 1, b"x", None, self.now)
        assert set(positions) == set(write_set(entry_id, self.e, self.qw))
        self.sent[entry_id] = {self.p.ensemble[i] for i in positions}

    def append_many(self, data: st.DataObject) -> None:
        room = self.p.pending_max - len(self.p)
        if room <= 0 or self.failure_reported:
            return
        count = data.draw(st.integers(1, min(room, 5)))
        first = self.p.last_add_pushed + 1
        lengths = [self.p.length + i + 1 for i in range(count)]
        self.p.append_many(first, lengths, [b"x"] * count, "future", self.now)
        assert self.p.last_add_pushed == first + count - 1 and self.p.length == lengths[-1]
        futures = [add.future for add in self.p.pending[-count:]]
        assert futures == [None] * (count - 1) + ["future"], "the future goes with the last"
        for entry_id in range(first, first + count):
            ws = self.p.write_sets[entry_id % len(self.p.write_sets)]
            assert set(ws) == set(write_set(entry_id, self.e, self.qw))
            self.sent[entry_id] = {self.p.ensemble[i] for i in ws}

    def pick_entry(self, data: st.DataObject) -> int:
        top = self.p.last_add_pushed
        return data.draw(st.integers(min(-1, top), top + 1))

    def pick_bookie(self, data: st.DataObject) -> str:
        return data.draw(st.sampled_from([*self.p.ensemble, "stranger", "b0"]))

    def ack(self, data: st.DataObject) -> None:
        entry_id, bookie = self.pick_entry(data), self.pick_bookie(data)
        self.acks_sent.setdefault(entry_id, set()).add(bookie)
        done = self.p.ack(bookie, entry_id)
        if done:
            self.completes(done)

    def acks(self, data: st.DataObject) -> None:
        """A batch of one bookie's answers, as the shell takes them: ``ack_all`` up to the
        first error answer, then the rest one by one."""
        bookie = self.pick_bookie(data)
        answers = [
            (data.draw(st.sampled_from([StatusCode.EOK] * 4 + [StatusCode.EIO])), 7, entry_id)
            for entry_id in data.draw(
                st.lists(st.integers(-1, self.p.last_add_pushed + 1), max_size=6)
            )
        ]
        for status, _, entry_id in answers:
            if status is StatusCode.EOK:
                self.acks_sent.setdefault(entry_id, set()).add(bookie)
        done, stop = self.p.ack_all(bookie, answers)
        assert all(status is StatusCode.EOK for status, _, _ in answers[:stop])
        assert stop == len(answers) or answers[stop][0] is not StatusCode.EOK
        if done:
            self.completes(done)
        for status, _, entry_id in answers[stop:]:
            if status is StatusCode.EOK:
                more = self.p.ack(bookie, entry_id)
                if more:
                    self.completes(more)
            else:
                self.apply(self.p.error_answer(bookie, status, entry_id))

    def ack_run(self, data: st.DataObject) -> None:
        """A run of one bookie's EOK answers, as the v2 fast lane gives them."""
        bookie, first = self.pick_bookie(data), self.pick_entry(data)
        count = data.draw(st.integers(1, 6))
        for entry_id in range(first, first + count):
            self.acks_sent.setdefault(entry_id, set()).add(bookie)
        done = self.p.ack_run(bookie, first, count)
        if done:
            self.completes(done)

    def error(self, data: st.DataObject) -> None:
        status = data.draw(
            st.sampled_from(
                [StatusCode.EIO, StatusCode.EFENCED, StatusCode.EUA, StatusCode.EREADONLY]
            )
        )
        self.apply(self.p.error_answer(self.pick_bookie(data), status, self.pick_entry(data)))

    def lose(self, data: st.DataObject) -> None:
        self.apply(self.p.bookie_failed(self.pick_bookie(data)))

    def tick(self, data: st.DataObject) -> None:
        self.now += data.draw(st.sampled_from([TICK_S, TICK_S, TIMEOUT_S / 2, 10 * TIMEOUT_S]))
        self.apply(self.p.tick(self.now))

    def change_round(self) -> None:
        """One round of the ensemble change in progress, or its end."""
        if not self.changing:
            return
        try:
            replacement = self.p.begin_replacement()
        except LedgerClosedError as exc:
            self.apply(self.p.fail(exc))
            self.changing = False
            return
        if replacement is None:
            self.apply(self.p.change_done())
            self.changing = False
            return
        assert replacement.first_entry == self.p.last_add_confirmed + 1
        new = tuple(next(self.names) if b in replacement.failed else b for b in self.p.ensemble)
        self.apply(self.p.replaced(new, self.now))


@settings(max_examples=300)
@given(
    data=st.data(),
    shape=st.sampled_from([(1, 1, 1), (3, 3, 2), (3, 2, 2), (5, 3, 2), (4, 3, 3), (3, 3, 1)]),
)
def test_random_interleavings_keep_the_invariants(
    data: st.DataObject, shape: tuple[int, int, int]
) -> None:
    model = Model(*shape)
    events = data.draw(
        st.lists(
            st.sampled_from(
                [
                    *("append", "append", "append_many", "ack", "ack", "ack", "acks", "ack_run"),
                    *("error", "lose", "tick", "change"),
                ]
            ),
            max_size=120,
        )
    )
    for event in events:
        if event == "append":
            model.append()
        elif event == "change":
            model.change_round()
        else:
            getattr(model, event)(data)
        pending = model.p.pending
        if pending and model.p.phase is Phase.OPEN:  # nothing left that could complete
            assert len(model.p.acked_by(pending[0])) < model.qa
    # Every entry ended exactly once, or is still pending.
    pending = {add.entry_id for add in model.p.pending}
    assert not set(model.completed) & model.failed
    assert set(model.completed) | model.failed | pending == set(range(model.p.last_add_pushed + 1))
    if model.failure_reported:
        assert not pending and model.p.phase is Phase.FAILED


def test_an_entry_needs_qa_distinct_acks_from_its_write_set() -> None:
    model = Model(5, 3, 2)
    model.append()  # entry 0 -> b0, b1, b2
    assert model.p.ack("b3", 0) is None  # in the ensemble, not in the write set
    assert model.p.ack("b0", 0) is None
    assert model.p.ack("b0", 0) is None  # the same bookie twice counts once
    done = model.p.ack("b2", 0)
    assert done is not None and [a.entry_id for a in done] == [0]


def test_completion_waits_for_lower_entries() -> None:
    model = Model(3, 3, 2)
    model.append()
    model.append()
    assert model.p.ack("b0", 1) is None and model.p.ack("b1", 1) is None
    assert model.p.ack("b0", 0) is None
    done = model.p.ack("b1", 0)
    assert done is not None and [a.entry_id for a in done] == [0, 1]


def tick_until_effects(model: Model, ticks_max: int) -> Effects:
    """Tick every TICK_S until the pipeline returns effects (NOTHING after ``ticks_max``)."""
    effects = NOTHING
    for _ in range(ticks_max):
        model.now += TICK_S
        effects = model.p.tick(model.now)
        if effects is not NOTHING:
            break
    return effects


def test_a_timeout_blames_the_late_bookie_and_a_stall_does_not() -> None:
    model = Model(3, 3, 2)
    model.append()
    model.p.ack("b0", 0)
    model.now += 3 * TIMEOUT_S  # the loop did not run: a stall, discounted
    assert model.p.tick(model.now) is NOTHING
    effects = tick_until_effects(model, int(TIMEOUT_S / TICK_S) + 1)
    assert effects.change_ensemble
    assert {bookie for bookie, _ in effects.timed_out} == {"b1", "b2"}
    assert model.p.phase is Phase.CHANGING


def test_ticks_are_needed_only_while_something_is_pending_or_changing() -> None:
    """An idle writer's shell stops ticking (an open ledger nobody appends to woke its
    client ten times a second); it resumes at the next append or change."""
    model = Model(3, 3, 2)
    assert not model.p.needs_ticks
    model.append()
    assert model.p.needs_ticks
    model.p.ack("b0", 0)
    model.p.ack("b1", 0)
    assert not model.p.needs_ticks  # entry 0 completed: nothing to time out
    assert model.p.bookie_failed("b2").change_ensemble
    assert model.p.needs_ticks  # the change (and a degraded writer's searches) go by ticks


def test_a_stall_between_an_append_and_the_resumed_ticks_is_a_stall() -> None:
    """Rule 7 across a pause of the ticks: the first tick after resuming is due one interval
    after the oldest pending entry was sent, so that a stalled loop between that append and
    the resume does not blame the bookies; the idle pause before the append does not count
    as a stall."""
    model = Model(3, 3, 2)
    model.now += 100.0  # idle: no ticks
    model.append()
    model.now += 3 * TIMEOUT_S  # the loop stalls before the ticks resume
    model.p.resume_ticks(model.now)
    model.now += TICK_S
    assert model.p.tick(model.now) is NOTHING
    for _ in range(int(TIMEOUT_S / TICK_S) - 2):  # less than the timeout since the stall
        model.now += TICK_S
        assert model.p.tick(model.now) is NOTHING
    # A quick append after an idle pause times out as ever: the pause is not a stall.
    quick = Model(3, 3, 2)
    quick.now += 100.0
    quick.append()
    quick.p.resume_ticks(quick.now)
    assert tick_until_effects(quick, int(TIMEOUT_S / TICK_S) + 2).change_ensemble


def test_an_ensemble_change_forgets_the_replaced_and_resends_to_the_new() -> None:
    model = Model(3, 3, 2)
    model.append()
    model.p.ack("b0", 0)
    model.p.ack("b2", 0)  # completes: b0 + b2
    model.append()  # entry 1
    model.p.ack("b1", 1)
    assert model.p.bookie_failed("b1").change_ensemble
    assert model.p.ack("b0", 1) is None  # no completion while changing
    replacement = model.p.begin_replacement()
    assert replacement is not None and replacement.failed == {"b1"}
    assert replacement.first_entry == 1
    effects = model.p.replaced(("b0", "b9", "b2"), model.now)
    assert [(a.entry_id, positions) for a, positions in effects.send] == [(1, (1,))]
    assert model.p.begin_replacement() is None
    assert model.p.change_done() is NOTHING  # only b0 counts now
    done = model.p.ack("b9", 1)
    assert done is not None and [a.entry_id for a in done] == [1]


@pytest.mark.parametrize(
    ("status", "error"),
    [(StatusCode.EFENCED, LedgerFencedError), (StatusCode.EUA, UnauthorizedAccessError)],
)
def test_fatal_answers_fail_everything_once(status: StatusCode, error: type[Exception]) -> None:
    model = Model(3, 3, 2)
    model.append()
    model.append()
    effects = model.p.error_answer("b0", status, 1)
    assert isinstance(effects.error, error)
    assert [a.entry_id for a in effects.fail] == [0, 1]
    assert model.p.ack("b0", 0) is None and model.p.ack("b1", 0) is None
    with pytest.raises(error):
        model.p.append(2, 3, b"x", None, model.now)


def test_ensemble_changes_max() -> None:
    model = Model(3, 3, 2, changes_max=1)
    model.append()
    model.p.bookie_failed("b0")
    assert model.p.begin_replacement() is not None
    model.p.replaced(("b5", "b1", "b2"), model.now)
    model.p.bookie_failed("b1")
    with pytest.raises(LedgerClosedError, match="more than 1 ensemble changes"):
        model.p.begin_replacement()
