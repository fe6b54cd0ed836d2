"""A member's reader of its log: the next record to apply, restoring a snapshot when
truncation passed the reader, and a new reader when the old one is stuck.

:class:`LogTail` owns the one :class:`~bkeeper.namedlog.LogReader` of a member. It reads
after what the member applied (``applied()``, the core's position): when truncation passed
the reader (it skipped deleted ledgers, or it moved to another ledger while the log's
truncation point lies past what was applied), it restores the latest snapshot (which covers
what was skipped) and reads on after it. :meth:`LogTail.check_stall` replaces a reader that
returns nothing while the log's confirmed end lies past what was applied.

A record is never lost between the reader and the member: when the check at a ledger switch
fails (the metadata store away), the record is held and returned by the next call once the
check passes (``bkeeper verify --sim``, kv seed 11: a follower lost the first record of a new
ledger to a ZooKeeper cut and kept a stale value for good).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from bkeeper.common.errors import BKeeperError, StateMachineError
from bkeeper.namedlog import EARLIEST, LogReader, LogWalk, NamedLog, Position, Record

__all__ = ["LogTail"]

#: The machine's logger: operators and ``bkeeper verify`` look for "follower stalled" there.
log = logging.getLogger("bkeeper.statemachine.machine")


class LogTail:
    """The reader of one member (module doc)."""

    def __init__(
        self,
        log_name: str,
        walk: LogWalk,
        stall_s: float,
        applied: Callable[[], Position | None],
        restore: Callable[[], Awaitable[bool]],
    ) -> None:
        self._log_name = log_name
        self._walk = walk
        self._stall_s = stall_s
        self._applied = applied
        self._restore = restore
        self._reader: LogReader | None = None
        #: A record read whose check failed (the store away): returned once checked. The
        #: reader has moved past it, so dropping it would lose it (the member's state would
        #: silently part from the others').
        self._held: Record | None = None
        #: The member led: its reader stopped where catch-up ended; open a new one.
        self.behind = False
        #: Readers replaced because they returned nothing while the log held more.
        self.restarts = 0

    async def open(self, named: NamedLog) -> None:
        if self._reader is None:
            self._reader = await self._open(named)

    async def close(self) -> None:
        reader, self._reader = self._reader, None
        self._held = None  # the next reader reads on after what was applied
        if reader is not None:
            await reader.close()

    async def _open(self, named: NamedLog) -> LogReader:
        start: str | Position = EARLIEST
        applied = self._applied()
        if applied is not None:
            start = Position(applied.ledger_id, applied.entry_id + 1)
        return await named.open_reader(start)

    async def next_record(self, named: NamedLog, timeout_s: float) -> Record | None:
        """The next record to apply, or None (module doc)."""
        if self.behind or self._reader is None:
            # This member led (its reader stopped where catch-up ended, and the log up to
            # what it applied may be truncated since), or opening a reader failed last time:
            # read on after what it applied.
            self.behind = False
            await self.close()
            self._reader = await self._open(named)
        reader = self._reader
        record, self._held = self._held, None
        passed = False
        if record is None:
            skipped = reader.skipped_ledgers
            record = await reader.next(timeout_s)
            passed = reader.skipped_ledgers != skipped
        applied = self._applied()
        if (
            record is not None
            and not passed
            and applied is not None
            and record.position.ledger_id != applied.ledger_id  # a ledger switch: check
        ):
            self._held = record  # until the check is done (it may fail: module doc)
            truncated_before = (await named.metadata()).truncated_before
            self._held = None
            passed = _truncated_past(applied, truncated_before)
        if not passed:
            return record
        await self.close()
        # Without a snapshot past what was applied, only ledgers already applied may have
        # been skipped: then read on after what was applied.
        if not await self._restore() and (
            applied is None or _truncated_past(applied, (await named.metadata()).truncated_before)
        ):
            raise StateMachineError(
                f"{self._log_name}: the log was truncated past position {applied} "
                "and no later snapshot is recorded"
            )
        self._reader = await self._open(named)
        return None

    async def check_stall(self, named: NamedLog) -> None:
        """The reader returned nothing for ``stall_s``. If the log's confirmed end lies past
        what this member applied, the reader is stuck (a follower applied nothing more,
        silently, while the leader served on): log where it stood, and read on with a new
        reader from what was applied."""
        try:
            end = await _confirmed_end(named, self._walk)
        except BKeeperError as exc:  # the store or the bookies are away: look again later
            log.debug("%s: could not read the log's end: %s", self._log_name, exc)
            return
        applied = self._applied()
        if end is None or (applied is not None and end <= applied[:2]):
            return
        reader, self._reader = self._reader, None
        self._held = None
        self.restarts += 1
        log.warning(
            "%s: follower stalled: its reader returned nothing for %g s while the log's "
            "confirmed end (%d, %d) lies past what it applied (%s); reading on with a new "
            "reader. The reader stood %s",
            self._log_name,
            self._stall_s,
            *end,
            applied,
            "(none)" if reader is None else reader.describe(),
        )
        if reader is not None:
            await reader.close()


def _truncated_past(applied: Position, mark: Position | None) -> bool:
    """The log's truncation point ``mark`` lies past the record after ``applied``."""
    return mark is not None and Position(applied.ledger_id, applied.entry_id + 1) < mark


async def _confirmed_end(named: NamedLog, walk: LogWalk) -> tuple[int, int] | None:
    """(ledger, entry) of the log's last confirmed entry (:meth:`LogWalk.ledger_end
    <bkeeper.namedlog.LogWalk.ledger_end>` of its last ledger that holds one); None when
    the log holds none."""
    for ledger in reversed((await named.metadata()).ledgers):
        end = await walk.ledger_end(ledger.ledger_id)
        if end is not None and end.last >= 0:
            return ledger.ledger_id, end.last
    return None
