"""Where a subscription stands in its log, read from the log: its backlog, the ends of the
sealed ledgers its acks touch, and whether a position is one of the log's records (an
operator's ack must be)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from bkeeper.common.errors import PositionNotInLogError
from bkeeper.namedlog.core.records import Position
from bkeeper.namedlog.core.spans import earliest
from bkeeper.namedlog.core.subscription_state import SubscriptionState
from bkeeper.namedlog.handle import LogHandle

__all__ = ["Backlog", "backlog", "check_in_log", "ledger_ends"]


@dataclass(frozen=True)
class Backlog:
    """What a subscription has not consumed yet: records (those acked out of order
    included) and their payload bytes as the ledgers count them, up to the log's end now."""

    entries: int
    bytes: int


async def backlog(named: LogHandle, state: SubscriptionState) -> Backlog:
    """The backlog of ``state`` in ``named`` now (a ledger read per partly consumed or open
    ledger; sealed ones are counted from their metadata)."""
    meta = await named.metadata()
    walk = named.context.walk
    start = state.resume_from
    entries = size = 0
    for ledger in meta.ledgers:
        if ledger.ledger_id < start.ledger_id:
            continue
        end = await walk.ledger_end(ledger.ledger_id)
        first = start.entry_id if ledger.ledger_id == start.ledger_id else 0
        if end is None or end.last < first:
            continue
        entries += end.last - first + 1
        handle = await walk.open(ledger.ledger_id)
        if handle is None:
            continue
        try:
            if end.sealed:
                upto = handle.metadata.length
            else:
                upto = (await handle.read_entry(end.last)).length
            before = (await handle.read_entry(first - 1)).length if first > 0 else 0
        finally:
            await handle.close()
        size += upto - before
    return Backlog(entries, size)


async def ledger_ends(named: LogHandle, ledger_ids: Iterable[int]) -> dict[int, tuple[int, int]]:
    """For each sealed ledger of ``ledger_ids`` in the log with a ledger after it: (its last
    entry id, that next ledger's id)."""
    meta = await named.metadata()
    ids = [x.ledger_id for x in meta.ledgers]
    index = {ledger_id: i for i, ledger_id in enumerate(ids)}
    ends: dict[int, tuple[int, int]] = {}
    for ledger_id in set(ledger_ids):
        i = index.get(ledger_id)
        if i is None or i + 1 >= len(ids):
            continue
        end = await named.context.walk.ledger_end(ledger_id)
        if end is not None and end.sealed:
            ends[ledger_id] = (end.last, ids[i + 1])
    return ends


async def check_in_log(named: LogHandle, position: Position) -> None:
    """``PositionNotInLogError`` naming the log, ``position`` and the range the log holds,
    unless a record of ``named`` can be at ``position``: its ledger is listed (not another
    log's, nor truncated away), it is not past the log's last record, nor past its sealed
    ledger's last entry, nor past the records of its batch."""
    meta = await named.metadata()
    last = await named.last_position()
    first = earliest(meta)
    ids = [ledger.ledger_id for ledger in meta.ledgers]
    held = f"it holds {first} .. {last}" if last is not None else "it has no record yet"

    def refuse(why: str) -> PositionNotInLogError:
        return PositionNotInLogError(f"position {position} {why} ({held})")

    if last is None or position > last:
        raise refuse(f"is past the last record of log {named.name!r}")
    if position.ledger_id not in ids:
        gone = meta.truncated_before
        if ids and position.ledger_id < ids[0] and gone is not None and position < gone:
            raise refuse(f"was truncated away from log {named.name!r}")
        raise refuse(
            f"is not in log {named.name!r}: ledger {position.ledger_id} is not one of its ledgers"
        )
    walk = named.context.walk
    if position.ledger_id != last.ledger_id:
        end = await walk.ledger_end(position.ledger_id)
        if end is None or position.entry_id > end.last:
            ends = "is gone" if end is None else f"ends at entry {end.last}"
            raise refuse(f"is not in log {named.name!r}: ledger {position.ledger_id} {ends}")
    if position.index > 0:
        batch = await walk.last_record(position.ledger_id, position.entry_id)
        if position.index > batch.index:
            raise refuse(
                f"is not in log {named.name!r}: entry {position.ledger_id}:{position.entry_id} "
                f"holds {batch.index + 1} {'record' if batch.index == 0 else 'records'}"
            )
