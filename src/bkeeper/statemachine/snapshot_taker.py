"""Taking and restoring the snapshots of one member: the leader takes one when its core says
it is due (every ``snapshot_every_commands`` commands or ``snapshot_every_bytes`` command
bytes), records it with the position it covers (:mod:`bkeeper.statemachine.snapshot_store`)
and truncates the log before it (keeping ``retain_ledgers`` ledgers); a member that starts,
or whose reader truncation passed, restores the latest one.
"""

from __future__ import annotations

import asyncio
import io
import logging

from bkeeper.common.errors import BKeeperError, StateMachineError
from bkeeper.namedlog import NamedLog, NamedLogs, Position
from bkeeper.statemachine.core import MemberCore
from bkeeper.statemachine.protocol import RsmConfig, StateMachine
from bkeeper.statemachine.snapshot_store import SnapshotStore

__all__ = ["SnapshotTaker"]

log = logging.getLogger(__name__)

#: Times a restore reads the latest record again when its snapshot was replaced meanwhile.
RESTORE_ATTEMPTS_MAX = 10


class SnapshotTaker:
    """Takes and restores the snapshots of one member (module doc); the member's core
    holds the position applied and the counts since the last snapshot."""

    def __init__(
        self,
        logs: NamedLogs,
        store: SnapshotStore,
        machine: StateMachine,
        config: RsmConfig,
        core: MemberCore[Position],
    ) -> None:
        self._logs = logs
        self.store = store
        self._machine = machine
        self._config = config
        self._core = core
        #: Snapshots this member wrote and restored.
        self.written = 0
        self.restored = 0

    async def restore(self) -> bool:
        """Restore the latest snapshot if it is past what this member applied."""
        core = self._core
        for _ in range(RESTORE_ATTEMPTS_MAX):
            info = await self.store.latest()
            if info is None or (core.applied is not None and info.position <= core.applied):
                return False
            data = await self.store.read(info)
            if data is None:
                continue  # replaced meanwhile
            self._machine.restore_snapshot(io.BytesIO(data))
            core.restored(info.position)
            self.restored += 1
            log.info("%s: restored the snapshot at %s", self._config.log_name, info.position)
            return True
        raise StateMachineError(f"{self._config.log_name}: snapshots kept being replaced")

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

    async def take(self) -> Position | None:
        """Write a snapshot of the state now and truncate the log before it; the position
        it covers (None when a newer one is recorded already or nothing is applied)."""
        core = self._core
        try:
            if core.applied is None:
                return None
            out = io.BytesIO()
            position = core.applied
            capture = getattr(self._machine, "snapshot_writer", None)
            if capture is not None:  # the state captured now, written off the event loop
                await asyncio.to_thread(capture(), out)
            else:
                self._machine.write_snapshot(out)  # synchronous: the state at core.applied
            core.snapshot_captured()
            info = await self.store.write(out.getvalue(), position)
            if info is None:
                return None
            self.written += 1
            named = self._logs.log(self._config.log_name)
            dropped = await named.truncate(await self._truncation_point(named, position))
            log.info("%s: snapshot at %s, %d ledgers truncated", named.name, position, dropped)
            return position
        except BKeeperError as exc:
            log.warning("%s: snapshot failed: %s", self._config.log_name, exc)
            return None
        finally:
            core.snapshot_finished()
