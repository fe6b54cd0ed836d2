"""Snapshots of a :class:`~bkeeper.statemachine.machine.ReplicatedStateMachine` (its base
:class:`Snapshotting`): the leader takes one every ``snapshot_every_commands`` commands or
``snapshot_every_bytes`` command bytes, records it with the position it covers
(:mod:`bkeeper.statemachine.snapshots`) and truncates the log before it (keeping
``retain_ledgers`` ledgers); a member that starts, or whose reader truncation passed,
restores the latest one.
"""

from __future__ import annotations

import asyncio
import io
import logging

from bkeeper.common.errors import BKeeperError, StateMachineError
from bkeeper.namedlog import NamedLog, NamedLogs, Position
from bkeeper.statemachine.protocol import RsmConfig, StateMachine
from bkeeper.statemachine.snapshots import SnapshotStore

__all__ = ["Snapshotting"]

log = logging.getLogger(__name__)


class Snapshotting:
    """Taking and restoring snapshots (module doc); the machine sets the state."""

    _config: RsmConfig
    _logs: NamedLogs
    _machine: StateMachine
    _leading: asyncio.Event
    snapshots: SnapshotStore
    applied: Position | None
    _since_snapshot: tuple[int, int]
    _snapshotting: asyncio.Future[Position | None] | None
    snapshots_written: int
    snapshots_restored: int

    async def _restore(self) -> bool:
        """Restore the latest snapshot if it is past what this member applied."""
        for _ in range(10):
            info = await self.snapshots.latest()
            if info is None or (self.applied is not None and info.position <= self.applied):
                return False
            data = await self.snapshots.read(info)
            if data is None:
                continue  # replaced meanwhile
            self._machine.restore_snapshot(io.BytesIO(data))
            self.applied = info.position
            self.snapshots_restored += 1
            log.info("%s: restored the snapshot at %s", self._config.log_name, info.position)
            return True
        raise StateMachineError(f"{self._config.log_name}: snapshots kept being replaced")

    def _maybe_snapshot(self) -> None:
        config = self._config
        count, size = self._since_snapshot
        due = (config.snapshot_every_commands and count >= config.snapshot_every_commands) or (
            config.snapshot_every_bytes and size >= config.snapshot_every_bytes
        )
        if (
            due
            and self._leading.is_set()
            and self._snapshotting is None
            and self.applied is not None
        ):
            self._snapshotting = asyncio.ensure_future(self.snapshot())

    async def _truncation_point(self, named: NamedLog, covered: Position) -> Position:
        """Where to truncate after a snapshot covering ``covered``: right after it, or at
        the start of the ``retain_ledgers``-th ledger before its ledger."""
        retain = self._config.retain_ledgers
        if not retain:
            return Position(covered.ledger_id, covered.entry_id + 1)
        ids = [ledger.ledger_id for ledger in (await named.metadata()).ledgers]
        index = next((i for i, x in enumerate(ids) if x >= covered.ledger_id), len(ids))
        if index < retain:
            return Position(ids[0], 0) if ids else Position(0, 0)
        return Position(ids[index - retain], 0)

    async def snapshot(self) -> Position | None:
        """Write a snapshot of the state now and truncate the log before it; the position
        it covers (None when a newer one is recorded already or nothing is applied)."""
        try:
            if self.applied is None:
                return None
            out = io.BytesIO()
            position = self.applied
            capture = getattr(self._machine, "snapshot_writer", None)
            if capture is not None:  # the state captured now, written off the event loop
                await asyncio.to_thread(capture(), out)
            else:
                self._machine.write_snapshot(out)  # synchronous: the state at self.applied
            self._since_snapshot = (0, 0)
            info = await self.snapshots.write(out.getvalue(), position)
            if info is None:
                return None
            self.snapshots_written += 1
            named = self._logs.log(self._config.log_name)
            dropped = await named.truncate(await self._truncation_point(named, position))
            log.info("%s: snapshot at %s, %d ledgers truncated", named.name, position, dropped)
            return position
        except BKeeperError as exc:
            log.warning("%s: snapshot failed: %s", self._config.log_name, exc)
            return None
        finally:
            self._snapshotting = None
