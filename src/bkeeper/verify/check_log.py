"""The log workload's checker: a history and the named log's final records in, violations
out (pure).

The final log is read whole after every fault is healed. What must hold:

* no record appears twice, and every record in the log was sent by a writer;
* every acknowledged append is in the log at the position it was acknowledged with,
  identical: two writers fencing each other lose nothing they were told was written;
* a tailing reader saw a gap-free prefix of the final log, in order, identical;
* each consumer session of the subscription got consecutive records of the final log, in
  order, identical; a session started no later than the record after the last one delivered
  before it (nothing skipped); the subscription's final mark is at or after the last
  acknowledgement recorded as flushed and at or before the last record delivered (acks can
  also be flushed unrecorded: by the periodic flusher, or by ``close`` after an error).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from bkeeper.verify.check import Verdict
from bkeeper.verify.history import Op

__all__ = ["check_log"]

LogRecord = tuple[tuple[int, int], str]  # (position, digest)


def check_log(
    ops: Iterable[Op], final: Sequence[LogRecord], final_mark: tuple[int, int] | None
) -> Verdict:
    """The violations of ``ops`` against the log's ``final`` records (module doc)."""
    verdict = Verdict(ledgers=len({pos[0] for pos, _ in final}))
    index: dict[str, int] = {}
    for i, (pos, digest) in enumerate(final):
        if digest in index:
            verdict.violate(
                f"record {digest} appears twice (at {_pos(final[index[digest]][0])} "
                f"and {_pos(pos)})"
            )
        index.setdefault(digest, i)
    at = {pos: digest for pos, digest in final}
    sent: set[str] = set()
    acked: list[Op] = []
    tails: dict[str, list[Op]] = {}
    sessions: dict[str, list[Op]] = {}
    flushed_at: dict[int, tuple[int, int]] = {}  # op index -> the position flushed
    for op in ops:
        if op.f == "append" and op.type == "invoke":
            sent.add(op.value)
        elif op.f == "append" and op.type == "ok":
            acked.append(op)
        elif op.f == "tail" and op.type == "ok":
            tails.setdefault(op.process, []).append(op)
        elif op.f == "consume" and op.type == "ok":
            sessions.setdefault(op.process, []).append(op)
        elif op.f == "ack" and op.type == "ok":
            flushed_at[op.index] = (op.ledger, op.entry)
    verdict.acknowledged = len(acked)
    for pos, digest in final:
        if digest not in sent:
            verdict.violate(f"record at {_pos(pos)} was sent by no writer")
    for op in acked:
        got = at.get((op.ledger, op.entry))
        if got is None:
            verdict.violate(f"acknowledged record {op.value} at {op.ledger}:{op.entry} lost")
        elif got != op.value:
            verdict.violate(
                f"position {op.ledger}:{op.entry} holds another record than the "
                f"one acknowledged there ({op.value})"
            )
    positions = {pos: i for i, (pos, _) in enumerate(final)}
    for reader, reads in tails.items():
        verdict.reads += len(reads)
        _consecutive(verdict, reader, reads, positions, at, start=0)
    delivered_max = -1  # the highest index of the log delivered so far, by any session
    for session, delivered in sessions.items():  # in the order sessions started
        first = positions.get((delivered[0].ledger, delivered[0].entry))
        if first is not None and first > delivered_max + 1:
            verdict.violate(
                f"{session} started at index {first} of the log, past the record "
                f"after the last one delivered before it ({delivered_max + 1}): "
                "records skipped"
            )
        _consecutive(verdict, session, delivered, positions, at, start=None)
        indexes = [positions.get((op.ledger, op.entry), -1) for op in delivered]
        delivered_max = max(delivered_max, *indexes)
    last_flushed = max(flushed_at.values()) if flushed_at else None
    mark = -1 if final_mark is None else positions.get(final_mark, -2)
    if last_flushed is not None and (final_mark is None or final_mark < last_flushed):
        verdict.violate(
            f"the subscription's mark is {final_mark}, behind the last "
            f"acknowledgement flushed {last_flushed}"
        )
    if mark > delivered_max or mark == -2:
        verdict.violate(
            f"the subscription's mark {final_mark} is past every record delivered: records skipped"
        )
    return verdict


def _consecutive(
    verdict: Verdict,
    who: str,
    reads: list[Op],
    positions: dict[tuple[int, int], int],
    at: dict[tuple[int, int], str],
    start: int | None,
) -> None:
    previous = None if start is None else start - 1
    for op in reads:
        pos = (op.ledger, op.entry)
        i = positions.get(pos)
        if i is None:
            verdict.violate(f"{who} read {op.ledger}:{op.entry}, not in the final log")
            return
        if at[pos] != op.value:
            verdict.violate(f"{who} read {op.ledger}:{op.entry} differently from the final log")
            return
        if previous is not None and i != previous + 1:
            verdict.violate(
                f"{who} went from index {previous} to {i} of the log: "
                f"{'records skipped' if i > previous else 'out of order'}"
            )
            return
        previous = i


def _pos(pos: tuple[int, int]) -> str:
    return f"{pos[0]}:{pos[1]}"
