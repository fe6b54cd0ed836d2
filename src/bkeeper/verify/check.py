"""The ledger workload's checker: a history and the ledgers' final contents in, violations out
(pure).

Final contents are read after every fault is healed, each ledger opened with recovery (so an
open one is sealed). What must hold:

* every acknowledged append (``ok``) is in the final ledger, byte-identical (its digest);
* every entry in a final ledger was sent by its writer (an ``invoke`` of that ledger and entry
  with that digest): nothing appears that no writer wrote;
* final ledgers are dense: entries ``0..last`` all readable;
* a ledger sealed by a fence (``fence`` ok, at entry ``S``) or closed by its writer (``close``
  ok at ``S``) ends at ``S`` for good, and no append of it past ``S`` was acknowledged: nothing
  from a fenced writer is visible;
* what a reader read (``read`` ok) is what the final ledger holds: readers never diverge, and
  never see an entry that is later lost;
* every ledger created (``create`` ok) can be read at the end.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from bkeeper.verify.history import Op

__all__ = ["FinalLedger", "Verdict", "check_ledgers"]

#: Violations listed in full per run; past it they are counted.
VIOLATIONS_SHOWN_MAX = 50


@dataclass(frozen=True)
class FinalLedger:
    """A ledger as read at the end: ``last`` entry id (-1: empty), each entry's digest, or
    ``error`` when it could not be opened or read."""

    last: int = -1
    digests: Mapping[int, str] = field(default_factory=dict)
    error: str = ""


@dataclass
class Verdict:
    """What the checker found: ``violations`` (one line each, at most
    :data:`VIOLATIONS_SHOWN_MAX` kept, ``count`` all), and what it checked."""

    violations: list[str] = field(default_factory=list)
    count: int = 0
    acknowledged: int = 0
    reads: int = 0
    ledgers: int = 0

    def violate(self, line: str) -> None:
        self.count += 1
        if len(self.violations) < VIOLATIONS_SHOWN_MAX:
            self.violations.append(line)

    @property
    def ok(self) -> bool:
        return self.count == 0


def check_ledgers(ops: Iterable[Op], final: Mapping[int, FinalLedger]) -> Verdict:
    """The violations of ``ops`` against ``final`` (module doc)."""
    verdict = Verdict()
    sent: dict[tuple[int, int], set[str]] = {}
    acked: dict[tuple[int, int], str] = {}
    sealed: dict[int, tuple[str, int]] = {}  # ledger -> (how, at entry)
    reads: list[Op] = []
    created: list[int] = []
    for op in ops:
        key = (op.ledger, op.entry)
        if op.f == "append" and op.type == "invoke":
            sent.setdefault(key, set()).add(op.value)
        elif op.f == "append" and op.type == "ok":
            acked[key] = op.value
        elif op.f in ("fence", "close") and op.type == "ok":
            before = sealed.get(op.ledger)
            if before is not None and before[1] != op.entry:
                verdict.violate(
                    f"ledger {op.ledger}: sealed at {before[1]} by {before[0]}, "
                    f"then at {op.entry} by {op.f}"
                )
            sealed.setdefault(op.ledger, (op.f, op.entry))
        elif op.f == "read" and op.type == "ok":
            reads.append(op)
        elif op.f == "create" and op.type == "ok":
            created.append(op.ledger)
    verdict.acknowledged, verdict.reads, verdict.ledgers = len(acked), len(reads), len(created)
    for ledger_id in created:
        found = final.get(ledger_id)
        if found is None or found.error:
            why = "not read" if found is None else found.error
            verdict.violate(f"ledger {ledger_id}: unreadable at the end: {why}")
            continue
        missing = [e for e in range(found.last + 1) if e not in found.digests]
        if missing:
            verdict.violate(f"ledger {ledger_id}: entries {_ids(missing)} missing below its end")
        for entry_id, digest in found.digests.items():
            if digest not in sent.get((ledger_id, entry_id), ()):
                verdict.violate(f"ledger {ledger_id}: entry {entry_id} holds data no writer sent")
        if ledger_id in sealed:
            how, at = sealed[ledger_id]
            if found.last != at:
                verdict.violate(
                    f"ledger {ledger_id}: {how} sealed it at {at}, ends at {found.last}"
                )
    for (ledger_id, entry_id), digest in sorted(acked.items()):
        found = final.get(ledger_id)
        if found is None or found.error:
            continue  # reported above
        if ledger_id in sealed and entry_id > sealed[ledger_id][1]:
            how, at = sealed[ledger_id]
            verdict.violate(
                f"ledger {ledger_id}: entry {entry_id} acknowledged past its seal at {at} ({how})"
            )
        got = found.digests.get(entry_id)
        if got is None:
            verdict.violate(f"ledger {ledger_id}: acknowledged entry {entry_id} lost")
        elif got != digest:
            verdict.violate(f"ledger {ledger_id}: acknowledged entry {entry_id} differs")
    for op in reads:
        found = final.get(op.ledger)
        if found is None or found.error:
            continue
        got = found.digests.get(op.entry)
        if got is None:
            verdict.violate(
                f"ledger {op.ledger}: entry {op.entry} read by {op.process}, later lost"
            )
        elif got != op.value:
            verdict.violate(
                f"ledger {op.ledger}: entry {op.entry} read by {op.process} differs from its end"
            )
    return verdict


def _ids(entry_ids: list[int]) -> str:
    shown = ", ".join(map(str, entry_ids[:5]))
    return shown + (f" (+{len(entry_ids) - 5} more)" if len(entry_ids) > 5 else "")
