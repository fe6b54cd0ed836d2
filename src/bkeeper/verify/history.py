"""What each operation of a run did, as Jepsen records it: an ``invoke`` when a client starts
it and one completion: ``ok`` (it happened), ``fail`` (it certainly did not) or ``info``
(unknown: a timeout, a lost connection; it may have happened). Faults are recorded too.

A :class:`History` keeps the operations in memory (a run's are few enough: at most
``HISTORY_OPS_MAX``) and writes them as JSON lines for a person or a later checker.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from bkeeper.common.clock import Clock, SystemClock
from bkeeper.common.errors import ConfigError

__all__ = ["HISTORY_OPS_MAX", "History", "Op", "OpType"]

OpType = Literal["invoke", "ok", "fail", "info"]

#: Operations one history holds at most (a run past it stops its workload with an error).
HISTORY_OPS_MAX = 5_000_000


@dataclass(frozen=True, slots=True)
class Op:
    """One event: ``process`` (a client task) did ``f`` on ``ledger``/``entry`` with
    ``value`` (a digest of the payload, or what was read), at ``time_s`` into the run."""

    index: int
    time_s: float
    process: str
    type: OpType
    f: str
    ledger: int = -1
    entry: int = -1
    value: str = ""
    error: str = ""


class History:
    """The operations of one run, in the order they happened."""

    def __init__(self, limit: int = HISTORY_OPS_MAX, clock: Clock | None = None) -> None:
        self._ops: list[Op] = []
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._start = self._clock.monotonic()
        self._limit = limit

    def add(
        self,
        process: str,
        type_: OpType,
        f: str,
        *,
        ledger: int = -1,
        entry: int = -1,
        value: str = "",
        error: str = "",
    ) -> Op:
        if len(self._ops) >= self._limit:
            raise ConfigError(f"history: more than {self._limit} operations in one run")
        op = Op(
            len(self._ops),
            round(self._clock.monotonic() - self._start, 6),
            process,
            type_,
            f,
            ledger,
            entry,
            value,
            error,
        )
        self._ops.append(op)
        return op

    def __iter__(self) -> Iterator[Op]:
        return iter(self._ops)

    def __len__(self) -> int:
        return len(self._ops)

    def count(self, f: str, type_: OpType) -> int:
        return sum(1 for op in self._ops if op.f == f and op.type == type_)

    def write(self, path: Path) -> None:
        """The history as JSON lines, one operation per line."""
        with path.open("w", encoding="utf-8") as out:
            for op in self._ops:
                out.write(json.dumps(asdict(op), separators=(",", ":")) + "\n")

    @staticmethod
    def read(path: Path) -> list[Op]:
        return [Op(**json.loads(line)) for line in path.read_text("utf-8").splitlines() if line]
