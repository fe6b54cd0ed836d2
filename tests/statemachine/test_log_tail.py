"""The member's reader of its log (:class:`bkeeper.statemachine.log_tail.LogTail`): a record
read is never lost between the reader and the member."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from bkeeper.common.errors import ConnectionLossError
from bkeeper.namedlog import Position, Record
from bkeeper.statemachine.log_tail import LogTail


class _Reader:
    def __init__(self, records: list[Record]) -> None:
        self.records = list(records)
        self.skipped_ledgers = 0
        self.closed = False

    async def next(self, timeout_s: float | None = None) -> Record | None:
        return self.records.pop(0) if self.records else None

    async def close(self) -> None:
        self.closed = True


@dataclass
class _Meta:
    truncated_before: Position | None = None


class _Named:
    """A log whose metadata read fails ``failures`` times (the store away)."""

    def __init__(self, records: list[Record], failures: int) -> None:
        self.records = records
        self.failures = failures
        self.opened: list[Any] = []

    async def open_reader(self, start: Any) -> _Reader:
        self.opened.append(start)
        return _Reader([r for r in self.records if start == "earliest" or r.position >= start])

    async def metadata(self) -> _Meta:
        if self.failures:
            self.failures -= 1
            raise ConnectionLossError("get /bkeeper/logs/x: disconnected (suspended)")
        return _Meta()


def _record(ledger_id: int, entry_id: int) -> Record:
    return Record(Position(ledger_id, entry_id, 0), 0, f"{ledger_id}:{entry_id}".encode())


def test_a_record_whose_ledger_switch_check_fails_is_returned_once_the_check_passes() -> None:
    """The first record of a new ledger is checked against the log's truncation point (a
    metadata read); when that read failed, the record was dropped (the reader had moved
    past it) and the member applied the next one: its state parted from the others' for
    good (``bkeeper verify --sim --seed 11 --workload kv --duration 10``)."""
    records = [_record(1, 0), _record(2, 0), _record(2, 1)]
    named = _Named(records, failures=1)
    applied: list[Position] = []

    async def restore() -> bool:
        return False

    tail = LogTail("x", None, 1.0, lambda: applied[-1] if applied else None, restore)  # type: ignore[arg-type]

    async def main() -> list[bytes]:
        got: list[bytes] = []
        await tail.open(named)  # type: ignore[arg-type]
        while len(got) < len(records):
            try:
                record = await tail.next_record(named, 0.1)  # type: ignore[arg-type]
            except ConnectionLossError:
                continue  # as the member does: try again
            assert record is not None
            got.append(record.payload)
            applied.append(record.position)
        return got

    assert asyncio.run(main()) == [b"1:0", b"2:0", b"2:1"]
    assert named.failures == 0
