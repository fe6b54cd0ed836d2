"""The kv workload's checker: a recorded history in, violations out (pure).

Each client task of the kv workload records its operations one at a time: an ``invoke``
whose ``value`` is the operation as JSON (``["get", key]``, ``["put", key, value]``,
``["delete", key]``, ``["cas", key, expected_version, value]``), then one completion: ``ok``
with the result as JSON (a get's ``[value, version]``, a put's version, a delete's
``existed``, a CAS's ``[applied, version]``), ``fail`` (certainly not applied) or ``info``
(unknown: the client gave up; a write may have been applied, at any time after its call).

What must hold: the history is linearizable against the store's sequential model
(:func:`bkeeper.testing.linearizability.kv_model`, key by key). The workload ends with a
linearizable read of every key once every fault is healed, so an acknowledged write that was
lost makes the history illegal too. A history the search cannot decide within its step bound
is reported (as a violation: nothing was proved).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any

from bkeeper.testing.linearizability import STEPS_MAX, Operation, check, kv_model
from bkeeper.verify.check import Verdict
from bkeeper.verify.history import Op

__all__ = ["KV_OPS", "add_kv_checks", "check_kv", "kv_operations"]

#: The operations of the kv workload (``Op.f``).
KV_OPS = ("get", "put", "delete", "cas")
#: Operations of a failing key listed in its violation line, at most.
SHOWN_OPS_MAX = 12


def _output(kind: str, text: str) -> Any:
    doc = json.loads(text)
    if kind in {"get", "cas"}:
        return (doc[0], doc[1])
    return doc


def kv_operations(ops: Iterable[Op]) -> tuple[list[Operation], int, int]:
    """The history as the linearizability checker's operations, and how many writes were
    acknowledged and gets answered. Unknown writes return at infinity; failed operations
    and unanswered gets (no effect) are left out."""
    clients: dict[str, int] = {}
    open_calls: dict[str, tuple[tuple[Any, ...], float]] = {}
    out: list[Operation] = []
    writes = gets = 0
    for op in ops:
        if op.f not in KV_OPS:
            continue
        if op.type == "invoke":
            open_calls[op.process] = (tuple(json.loads(op.value)), op.time_s)
            continue
        called = open_calls.pop(op.process, None)
        if called is None:
            raise ValueError(f"history: {op.process} completed {op.f} it never invoked")
        inp, call = called
        client = clients.setdefault(op.process, len(clients))
        if op.type == "ok":
            out.append(Operation(client, inp, call, _output(op.f, op.value), op.time_s))
            if op.f == "get":
                gets += 1
            else:
                writes += 1
        elif op.type == "info" and op.f != "get":
            out.append(Operation(client, inp, call, None, math.inf))
    for process, (inp, call) in open_calls.items():  # invoked, never completed: unknown
        if inp[0] != "get":
            out.append(Operation(clients.setdefault(process, len(clients)), inp, call, None))
    return out, writes, gets


def _cut(ops: list[Operation], at: float) -> list[Operation]:
    """The history as it stood at time ``at``: operations called before it, those still
    running then with an unknown outcome. Linearizable if the whole history is (each
    operation left out takes effect after every one that returned before ``at``)."""
    return [
        o if o.ret <= at else Operation(o.client, o.input, o.call, None) for o in ops if o.call < at
    ]


def _first_illegal_cut(ops: list[Operation], steps_max: int) -> float:
    """The earliest return time at which the history cut there is not linearizable (the
    whole history is not): where a person should look."""
    returns = sorted({o.ret for o in ops if o.ret != math.inf})
    low, high = 0, len(returns) - 1  # the cut at returns[high] (inclusive) is illegal
    while low < high:
        mid = (low + high) // 2
        if check(kv_model(), _cut(ops, returns[mid]), steps_max=steps_max).verdict == "illegal":
            high = mid
        else:
            low = mid + 1
    return returns[high] if returns else math.inf


def check_kv(ops: Iterable[Op], *, steps_max: int = STEPS_MAX) -> Verdict:
    """The violations of a kv workload's history (module doc)."""
    operations, writes, gets = kv_operations(ops)
    verdict = Verdict(acknowledged=writes, reads=gets)
    result = check(kv_model(), operations, steps_max=steps_max)
    if result.ok:
        return verdict
    key = result.failed[0].input[1] if result.failed else "?"
    if result.verdict == "illegal":
        cut = _first_illegal_cut(result.failed, steps_max)
        shown = [o for o in sorted(result.failed, key=lambda o: o.call) if o.call < cut]
        listed = "; ".join(
            f"c{o.client} {list(o.input)} @{o.call:.3f}->"
            f"{'?' if o.ret == math.inf else f'{o.output} @{o.ret:.3f}'}"
            for o in shown[-SHOWN_OPS_MAX:]
        )
        verdict.violate(
            f"key {key!r}: not linearizable ({len(result.failed)} operations; no longer once "
            f"the one returning at {cut:.3f} s is included; the last before it: {listed})"
        )
    else:
        verdict.violate(
            f"key {key!r}: linearizability undecided within {steps_max:,} search steps "
            f"({len(result.failed)} operations): nothing proved"
        )
    return verdict


def add_kv_checks(verdict: Verdict, ops: Iterable[Op], ledgers: int) -> None:
    """:func:`check_kv` of ``ops`` into ``verdict`` (which holds the end's violations), with
    the store log's ``ledgers`` counted."""
    checked = check_kv(ops)
    for line in checked.violations:
        verdict.violate(line)
    verdict.count += checked.count - len(checked.violations)
    verdict.acknowledged, verdict.reads = checked.acknowledged, checked.reads
    verdict.ledgers = ledgers
