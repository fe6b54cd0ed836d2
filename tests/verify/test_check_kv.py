"""The kv checker on hand-made histories, recorded as the kv workload records them: each
violation it exists for is found (stale read, lost write, two winning CAS), unknown outcomes
are allowed either way, and a clean history has none."""

from __future__ import annotations

import json
import math

import pytest

from bkeeper.verify.check_kv import check_kv, kv_operations
from bkeeper.verify.history import History, Op

Event = tuple[str, str, str, object]  # process, type, f, input (invoke) or output (ok)


def ops(*events: Event) -> list[Op]:
    h = History()
    for process, type_, f, doc in events:
        value = "" if doc is None else json.dumps(doc)
        h.add(process, type_, f, value=value)  # type: ignore[arg-type]
    return list(h)


def test_a_clean_history_has_no_violation() -> None:
    history = ops(
        ("a", "invoke", "put", ["put", "k", "x"]),
        ("b", "invoke", "get", ["get", "k"]),  # concurrent with the put: either answer
        ("b", "ok", "get", [None, 0]),
        ("a", "ok", "put", 1),
        ("a", "invoke", "cas", ["cas", "k", 1, "y"]),
        ("a", "ok", "cas", [True, 2]),
        ("b", "invoke", "delete", ["delete", "k"]),
        ("b", "ok", "delete", True),
        ("final", "invoke", "get", ["get", "k"]),
        ("final", "ok", "get", [None, 0]),
    )
    verdict = check_kv(history)
    assert verdict.ok, verdict.violations
    assert (verdict.acknowledged, verdict.reads) == (3, 2)


def test_a_stale_read_after_a_write_completed_is_a_violation() -> None:
    history = ops(
        ("a", "invoke", "put", ["put", "k", "x"]),
        ("a", "ok", "put", 1),
        ("b", "invoke", "get", ["get", "k"]),
        ("b", "ok", "get", [None, 0]),  # the write had returned before this read began
    )
    verdict = check_kv(history)
    assert verdict.count == 1
    assert verdict.violations[0].startswith(
        f"key 'k': not linearizable (2 operations; no longer once the one returning at "
        f"{history[3].time_s:.3f} s is included; the last before it: c0 ['put', 'k', 'x'] "
    )


def test_the_violation_names_the_first_return_that_breaks_the_history() -> None:
    history = ops(
        ("a", "invoke", "put", ["put", "k", "x"]),
        ("a", "ok", "put", 1),
        ("b", "invoke", "get", ["get", "k"]),
        ("b", "ok", "get", ["x", 1]),
        ("a", "invoke", "put", ["put", "k", "y"]),
        ("a", "ok", "put", 2),
        ("b", "invoke", "get", ["get", "k"]),
        ("b", "ok", "get", ["x", 1]),  # stale: here it breaks
        ("a", "invoke", "put", ["put", "k", "z"]),
        ("a", "ok", "put", 3),
        ("b", "invoke", "get", ["get", "k"]),
        ("b", "ok", "get", ["z", 3]),
    )
    (line,) = check_kv(history).violations
    assert f"no longer once the one returning at {history[7].time_s:.3f} s is included" in line
    assert "['put', 'k', 'z']" not in line  # only what was called before that return


def test_an_acknowledged_write_lost_is_a_violation() -> None:
    history = ops(
        ("a", "invoke", "put", ["put", "k", "x"]),
        ("a", "ok", "put", 1),
        ("a", "invoke", "put", ["put", "k", "y"]),
        ("a", "ok", "put", 2),
        ("final", "invoke", "get", ["get", "k"]),
        ("final", "ok", "get", ["x", 1]),  # the second put is gone
    )
    assert not check_kv(history).ok


def test_two_winning_cas_on_one_version_is_a_violation() -> None:
    history = ops(
        ("a", "invoke", "cas", ["cas", "k", 0, "x"]),
        ("b", "invoke", "cas", ["cas", "k", 0, "y"]),
        ("a", "ok", "cas", [True, 1]),
        ("b", "ok", "cas", [True, 1]),
    )
    assert not check_kv(history).ok


@pytest.mark.parametrize("seen", [[None, 0], ["x", 1]])
def test_an_unknown_write_may_have_happened_or_not(seen: list[object]) -> None:
    history = ops(
        ("a", "invoke", "put", ["put", "k", "x"]),
        ("a", "info", "put", None),
        ("b", "invoke", "get", ["get", "k"]),  # an unanswered get: no effect, left out
        ("b", "info", "get", None),
        ("c", "invoke", "get", ["get", "k"]),
        ("c", "ok", "get", seen),
    )
    assert check_kv(history).ok
    operations, writes, gets = kv_operations(history)
    assert (len(operations), writes, gets) == (2, 0, 1)
    assert operations[0].ret == math.inf and operations[0].output is None


def test_a_write_invoked_and_never_completed_is_unknown() -> None:
    history = ops(
        ("a", "invoke", "put", ["put", "k", "x"]),
        ("c", "invoke", "get", ["get", "k"]),
        ("c", "ok", "get", ["x", 1]),
    )
    assert check_kv(history).ok


def test_a_search_that_runs_out_of_steps_says_so() -> None:
    history = ops(
        ("a", "invoke", "put", ["put", "k", "x"]),
        ("a", "ok", "put", 1),
        ("b", "invoke", "get", ["get", "k"]),
        ("b", "ok", "get", ["x", 1]),
    )
    verdict = check_kv(history, steps_max=1)
    assert verdict.violations == [
        "key 'k': linearizability undecided within 1 search steps (2 operations): nothing proved"
    ]


def test_a_completion_without_its_invocation_is_a_harness_error() -> None:
    with pytest.raises(ValueError, match="a completed get it never invoked"):
        kv_operations(ops(("a", "ok", "get", [None, 0])))
