"""The linearizability checker on known histories: linearizable ones pass, non-linearizable
ones fail, unknown outcomes may or may not have taken effect."""

from __future__ import annotations

import math
import random

import pytest

from bkeeper.testing.linearizability import Model, Operation, check, kv_model

INF = math.inf


def op(client, inp, call, out, ret=INF):
    return Operation(client, inp, call, out, ret)


def test_sequential_history_is_linearizable():
    history = [
        op(0, ("put", "k", "a"), 0, 1, 1),
        op(0, ("get", "k"), 2, ("a", 1), 3),
        op(0, ("cas", "k", 1, "b"), 4, (True, 2), 5),
        op(0, ("cas", "k", 1, "c"), 6, (False, 2), 7),
        op(0, ("delete", "k"), 8, True, 9),
        op(0, ("get", "k"), 10, (None, 0), 11),
        op(0, ("delete", "k"), 12, False, 13),
    ]
    result = check(kv_model(), history)
    assert result.verdict == "ok"


def test_a_read_after_a_completed_write_must_see_it():
    history = [
        op(0, ("put", "k", "a"), 0, 1, 1),
        op(1, ("get", "k"), 2, (None, 0), 3),  # stale: the put returned before
    ]
    result = check(kv_model(), history)
    assert result.verdict == "illegal"
    assert len(result.failed) == 2


def test_a_read_concurrent_with_a_write_may_see_either():
    for seen in ((None, 0), ("a", 1)):
        history = [
            op(0, ("put", "k", "a"), 0, 1, 10),
            op(1, ("get", "k"), 1, seen, 2),
        ]
        assert check(kv_model(), history).ok, seen


def test_reads_must_not_go_back_in_time():
    # Two reads during one put: once one saw the new value, a later read cannot see the old.
    history = [
        op(0, ("put", "k", "a"), 0, 1, 10),
        op(1, ("get", "k"), 1, ("a", 1), 2),
        op(2, ("get", "k"), 3, (None, 0), 4),
    ]
    assert check(kv_model(), history).verdict == "illegal"
    history[2] = op(2, ("get", "k"), 1.5, (None, 0), 4)  # overlaps the first read: fine
    assert check(kv_model(), history).ok


def test_an_unknown_outcome_may_take_effect_or_not():
    took = [op(0, ("put", "k", "a"), 0, None), op(1, ("get", "k"), 5, ("a", 1), 6)]
    did_not = [op(0, ("put", "k", "a"), 0, None), op(1, ("get", "k"), 5, (None, 0), 6)]
    assert check(kv_model(), took).ok
    assert check(kv_model(), did_not).ok
    # ... but not both: seen, then gone with nothing to remove it.
    both = [*took, op(1, ("get", "k"), 7, (None, 0), 8)]
    assert check(kv_model(), both).verdict == "illegal"


def test_a_lost_acknowledged_write_is_illegal():
    history = [
        op(0, ("put", "k", "a"), 0, 1, 1),
        op(0, ("put", "k", "b"), 2, 2, 3),
        op(1, ("get", "k"), 4, ("a", 1), 5),  # the second put vanished
    ]
    assert check(kv_model(), history).verdict == "illegal"


def test_cas_results_must_agree_with_the_order():
    # Two concurrent CAS from version 0: exactly one may win.
    both_won = [
        op(0, ("cas", "k", 0, "a"), 0, (True, 1), 5),
        op(1, ("cas", "k", 0, "b"), 1, (True, 1), 6),
    ]
    assert check(kv_model(), both_won).verdict == "illegal"
    one_won = [
        op(0, ("cas", "k", 0, "a"), 0, (True, 1), 5),
        op(1, ("cas", "k", 0, "b"), 1, (False, 1), 6),
    ]
    assert check(kv_model(), one_won).ok


def test_keys_are_checked_independently():
    history = [
        op(0, ("put", "x", "a"), 0, 1, 1),
        op(1, ("put", "y", "b"), 0, 1, 1),
        op(2, ("get", "x"), 2, ("a", 1), 3),
        op(2, ("get", "y"), 2, (None, 0), 3),  # y is stale
    ]
    result = check(kv_model(), history)
    assert result.verdict == "illegal"
    assert {o.input[1] for o in result.failed} == {"y"}


def test_a_search_out_of_steps_says_unknown():
    history = [op(i, ("put", "k", str(i)), 0, None) for i in range(12)]
    history.append(op(99, ("get", "k"), 1, ("zz", 5), 2))  # no put wrote "zz"
    result = check(kv_model(), history, steps_max=50)
    assert result.verdict == "unknown"
    assert check(kv_model(), history).verdict == "illegal"


def test_a_register_model_without_partitions():
    def step(state, inp, out):
        if inp[0] == "w":
            return True, inp[1]
        return out == state, state

    register = Model(init=lambda: 0, step=step)
    ok = [op(0, ("w", 1), 0, None, 2), op(1, ("r",), 1, 1, 3), op(2, ("r",), 4, 1, 5)]
    bad = [op(0, ("w", 1), 0, None, 2), op(1, ("r",), 3, 0, 4)]
    assert check(register, ok).ok
    assert check(register, bad).verdict == "illegal"


@pytest.mark.parametrize("seed", range(5))
def test_histories_of_a_real_sequential_register_with_overlap_pass(seed):
    """Random concurrent histories generated from an atomic register are linearizable."""
    rng = random.Random(seed)
    state: tuple[str | None, int] = (None, 0)
    history = []
    clock = 0.0
    for i in range(60):
        call = clock + rng.random()
        at = call + rng.random()  # the instant it takes effect
        ret = at + rng.random() * 3
        clock = at
        kind = rng.choice(["get", "put", "cas", "delete"])
        value, version = state
        if kind == "get":
            inp, out = ("get", "k"), state
        elif kind == "put":
            state = (str(i), version + 1)
            inp, out = ("put", "k", str(i)), version + 1
        elif kind == "delete":
            inp, out = ("delete", "k"), value is not None
            state = (None, 0)
        else:
            expected = rng.choice([version, version + 1])
            applies = expected == version
            if applies:
                state = (str(i), version + 1)
            inp, out = ("cas", "k", expected, str(i)), (applies, state[1])
        if rng.random() < 0.1:
            out, ret = None, INF
        history.append(op(i % 4, inp, call, out, ret))
    assert check(kv_model(), history).ok
