"""A linearizability checker over recorded histories (Wing & Gong's search with Lowe's
memoisation, as Porcupine does it). Pure: no I/O, no clocks.

A history is a list of :class:`Operation`: who called, what (``input``), when it was called
and when it returned, and what it returned (``output``). An operation whose outcome is
unknown (a timeout, a connection lost after the request was sent) has ``output=None`` and
``ret=math.inf``: it may have taken effect at any point after its call, or not at all. An
operation known to have failed without effect should be left out of the history.

A :class:`Model` is the sequential specification: ``init()`` the first state (hashable),
``step(state, input, output)`` → ``(ok, new_state)`` says whether the operation may return
``output`` in ``state`` (``output=None``: any outcome), and ``partition`` splits a history
into independent sub-histories (one per key for a key-value store: P-compositionality), each
checked on its own.

The search (per partition): walk the call/return events in time order; at a call, try to
linearize the operation now (the model accepts it in the current state), remember (set of
linearized operations, state) so that no configuration is explored twice, and go on; at a
return whose operation is not linearized yet, backtrack to the last choice. The history is
linearizable when every operation is linearized. Worst case exponential; ``steps_max``
bounds the work per partition (the result is then "unknown", never a guess).

:func:`kv_model` is the model of :mod:`bkeeper.kv`'s operations (see its docstring).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "CheckResult",
    "Model",
    "Operation",
    "STEPS_MAX",
    "check",
    "kv_model",
]

#: Default bound on the search steps of one partition.
STEPS_MAX = 5_000_000


@dataclass(frozen=True)
class Operation:
    """One call in a history. ``ret=math.inf`` with ``output=None``: outcome unknown."""

    client: int
    input: Any
    call: float
    output: Any
    ret: float = math.inf

    def __post_init__(self) -> None:
        if self.ret < self.call:
            raise ValueError(f"operation {self.input!r} returns ({self.ret}) before its call")


@dataclass(frozen=True)
class Model:
    init: Callable[[], Hashable]
    step: Callable[[Any, Any, Any], tuple[bool, Any]]
    partition: Callable[[Sequence[Operation]], list[list[Operation]]] | None = None


@dataclass(frozen=True)
class CheckResult:
    """``verdict``: "ok" (linearizable), "illegal" (not), "unknown" (``steps_max`` ran out).
    ``failed``: the first partition found illegal or unknown; ``steps``: search steps taken."""

    verdict: Literal["ok", "illegal", "unknown"]
    failed: list[Operation] = field(default_factory=list)
    steps: int = 0

    @property
    def ok(self) -> bool:
        return self.verdict == "ok"


@dataclass(eq=False)
class _Node:
    """One event in the doubly linked list the search walks."""

    index: int  # the operation's index in its partition
    is_call: bool
    op: Operation | None
    match: _Node | None = None  # a call's return node
    prev: _Node | None = None
    next: _Node | None = None


def _events(ops: Sequence[Operation]) -> _Node:
    """The list head: call and return events in time order (a call before a return at the
    same time, so operations touching in time count as concurrent)."""
    events: list[tuple[float, int, int, _Node]] = []
    for index, op in enumerate(ops):
        call = _Node(index, True, op)
        ret = _Node(index, False, None)
        call.match = ret
        events.append((op.call, 0, index, call))
        events.append((op.ret, 1, index, ret))
    events.sort(key=lambda e: (e[0], e[1], e[2]))
    head = _Node(-1, False, None)
    last = head
    for *_key, node in events:
        last.next = node
        node.prev = last
        last = node
    return head


def _lift(call: _Node) -> None:
    """Take a call and its return out of the list."""
    assert call.prev is not None and call.match is not None
    call.prev.next = call.next
    if call.next is not None:
        call.next.prev = call.prev
    ret = call.match
    assert ret.prev is not None
    ret.prev.next = ret.next
    if ret.next is not None:
        ret.next.prev = ret.prev


def _unlift(call: _Node) -> None:
    """Put them back (the inverse of the last ``_lift``)."""
    ret = call.match
    assert ret is not None and ret.prev is not None and call.prev is not None
    ret.prev.next = ret
    if ret.next is not None:
        ret.next.prev = ret
    call.prev.next = call
    if call.next is not None:
        call.next.prev = call


def _check_one(model: Model, ops: Sequence[Operation], steps_max: int) -> tuple[str, int]:
    head = _events(ops)
    state: Any = model.init()
    linearized = 0
    cache: set[tuple[int, Any]] = set()
    stack: list[tuple[_Node, Any]] = []
    node = head.next
    steps = 0
    while head.next is not None:
        steps += 1
        if steps > steps_max:
            return "unknown", steps
        assert node is not None
        if node.is_call:
            assert node.op is not None
            ok, new_state = model.step(state, node.op.input, node.op.output)
            if ok:
                key = (linearized | (1 << node.index), new_state)
                if key not in cache:
                    cache.add(key)
                    stack.append((node, state))
                    state, linearized = new_state, key[0]
                    _lift(node)
                    node = head.next
                    continue
            node = node.next
        else:  # a return whose call is not linearized yet: undo the last choice
            if not stack:
                return "illegal", steps
            call, state = stack.pop()
            linearized &= ~(1 << call.index)
            _unlift(call)
            node = call.next
    return "ok", steps


def check(model: Model, history: Sequence[Operation], *, steps_max: int = STEPS_MAX) -> CheckResult:
    """Whether ``history`` is linearizable under ``model`` (see the module docstring)."""
    parts = model.partition(history) if model.partition is not None else [list(history)]
    total = 0
    for part in parts:
        verdict, steps = _check_one(model, part, steps_max)
        total += steps
        if verdict != "ok":
            return CheckResult("illegal" if verdict == "illegal" else "unknown", list(part), total)
    return CheckResult("ok", [], total)


# -- the key-value store's model ------------------------------------------------------------
def _kv_step(state: tuple[str | None, int], op: Any, output: Any) -> tuple[bool, Any]:
    value, version = state
    kind = op[0]
    if kind == "get":
        if output is None:
            return True, state
        return (output[0], output[1]) == (value, version), state
    if kind == "put":
        new = (op[2], version + 1)
        return output is None or output == version + 1, new
    if kind == "delete":
        return output is None or output == (value is not None), (None, 0)
    if kind == "cas":
        expected, new_value = op[2], op[3]
        applies = version == expected
        new = (new_value, version + 1) if applies else state
        if output is None:
            return True, new
        return output == (applies, new[1]), new
    raise ValueError(f"kv model: unknown operation {op!r}")


def _kv_partition(history: Sequence[Operation]) -> list[list[Operation]]:
    by_key: dict[str, list[Operation]] = {}
    for op in history:
        by_key.setdefault(op.input[1], []).append(op)
    return list(by_key.values())


def kv_model() -> Model:
    """The key-value store's operations on one key's (value, version), version 0 = absent:

    - ``("get", key)`` → ``(value | None, version)``;
    - ``("put", key, value)`` → the new version (previous + 1);
    - ``("delete", key)`` → whether the key existed (version back to 0);
    - ``("cas", key, expected_version, value)`` → ``(applied, version after)``: applies
      when the key's version is ``expected_version`` (0: absent).

    Partitioned by key."""
    return Model(init=lambda: (None, 0), step=_kv_step, partition=_kv_partition)
