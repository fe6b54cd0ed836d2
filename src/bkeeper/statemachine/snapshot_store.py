"""Snapshots of a replicated state machine, kept in ledgers (bkeeper data, not local files).

A snapshot is the state's bytes (as the machine's ``write_snapshot`` wrote them) in a ledger of
its own, in entries of at most ``chunk_bytes``, plus one record in the metadata store naming
the ledger and the log position the state covers (every record up to and including it is in
the state). The record lives at ``<cluster parent>/snapshots/<log>`` and is replaced by
compare-and-set, so it only ever moves forward; the replaced snapshot's ledger is deleted
once the new record is written.

Record format (JSON): ``{"format": 1, "ledger_id": L, "position": "LEDGER:ENTRY",
"size_bytes": N, "chunks": K, "ctime_ms": T}``.

Limits: ``chunk_bytes`` per entry; ``SNAPSHOT_BYTES_MAX`` per snapshot; ``RECORD_RETRIES_MAX``
compare-and-set rounds when recording one.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
from dataclasses import dataclass

from bkeeper.common.cas import cas_update
from bkeeper.common.errors import (
    BKeeperError,
    LedgerNotFoundError,
    MetadataVersionError,
    NodeExistsError,
    NoNodeError,
    StateMachineError,
)
from bkeeper.meta.store import NodeStore, join_path
from bkeeper.namedlog import (
    LogConfig,
    NamedLogs,
    Position,
    create_ledger,
    discard_ledger,
    logs_root,
)

__all__ = ["SNAPSHOT_BYTES_MAX", "SnapshotInfo", "SnapshotStore", "snapshot_path"]

log = logging.getLogger(__name__)

FORMAT = 1
#: The largest snapshot written or read back (a bound on memory: a snapshot is held whole).
SNAPSHOT_BYTES_MAX = 4 * 1024 * 1024 * 1024
#: Compare-and-set rounds on the snapshot record before giving up.
RECORD_RETRIES_MAX = 20
#: Bytes per snapshot entry.
CHUNK_BYTES = 512 * 1024


def snapshot_path(ledgers_root: str, log_name: str) -> str:
    """Where the snapshot record of ``log_name`` lives."""
    return join_path(logs_root(ledgers_root).rpartition("/")[0], "snapshots", log_name)


@dataclass(frozen=True)
class SnapshotInfo:
    """One recorded snapshot: its ledger and the last log position its state covers."""

    ledger_id: int
    position: Position
    size_bytes: int
    chunks: int
    ctime_ms: int

    def encode(self) -> bytes:
        doc = {
            "format": FORMAT,
            "ledger_id": self.ledger_id,
            "position": str(self.position),
            "size_bytes": self.size_bytes,
            "chunks": self.chunks,
            "ctime_ms": self.ctime_ms,
        }
        return json.dumps(doc, sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes, where: str) -> SnapshotInfo:
        try:
            doc = json.loads(data)
            if doc.get("format") != FORMAT:
                raise ValueError(f"format {doc.get('format')!r}")
            return cls(
                int(doc["ledger_id"]),
                Position.parse(str(doc["position"])),
                int(doc["size_bytes"]),
                int(doc["chunks"]),
                int(doc["ctime_ms"]),
            )
        except (ValueError, KeyError, TypeError, BKeeperError) as exc:
            raise StateMachineError(f"snapshot record {where} is not valid: {exc}") from exc


class SnapshotStore:
    """Writes and reads the snapshots of one log (see the module docstring)."""

    def __init__(
        self,
        logs: NamedLogs,
        store: NodeStore,
        log_name: str,
        config: LogConfig | None = None,
        *,
        chunk_bytes: int = CHUNK_BYTES,
    ) -> None:
        self._logs = logs
        self._store = store
        self._config = config or logs.config
        self._chunk_bytes = chunk_bytes
        self.path = snapshot_path(logs.bk.cluster.root, log_name)

    async def latest(self) -> SnapshotInfo | None:
        """The recorded snapshot, or None when the log has none."""
        info, _version = await self._read()
        return info

    async def _read(self) -> tuple[SnapshotInfo | None, int]:
        try:
            data, version = await self._store.get(self.path)
        except NoNodeError:
            return None, -1
        return SnapshotInfo.decode(data, self.path), version

    async def write(self, state: bytes, position: Position) -> SnapshotInfo | None:
        """Store ``state`` (covering the log up to ``position``) and record it; None when a
        snapshot at or past ``position`` is recorded already (this one is discarded)."""
        if len(state) > SNAPSHOT_BYTES_MAX:
            raise StateMachineError(
                f"snapshot of {len(state)} bytes is over SNAPSHOT_BYTES_MAX={SNAPSHOT_BYTES_MAX}"
            )
        bk = self._logs.bk
        handle = await create_ledger(bk, self._config)
        try:
            pending = [
                await handle.append_async(state[at : at + self._chunk_bytes])
                for at in range(0, len(state), self._chunk_bytes)
            ]
            for future in pending:
                await future
            await handle.close()
            info = SnapshotInfo(
                handle.ledger_id, position, len(state), len(pending), self._logs.clock.wall_ms()
            )
            replaced = await self._record(info)
        except _MaybeRecordedError as kept:
            # Deleting the ledger could leave the record naming a ledger that is gone.
            log.warning(
                "snapshot record %s: recording ledger %d failed (%s) and whether it went in "
                "is unknown: the ledger is kept",
                self.path,
                handle.ledger_id,
                kept.error,
            )
            raise kept.error from None
        except BaseException:
            await discard_ledger(bk, handle)
            raise
        if replaced is False:
            await discard_ledger(bk, handle)
            return None
        if replaced is not None:
            with contextlib.suppress(LedgerNotFoundError):
                await bk.delete_ledger(replaced)
        return info

    async def _record(self, info: SnapshotInfo) -> int | bool | None:
        """Record ``info``: the ledger id of the snapshot it replaced (None: none), or False
        when the recorded one is at or past it already."""

        async def attempt(read: tuple[SnapshotInfo | None, int]) -> int | bool | None:
            current, version = read
            if current is not None and current.position >= info.position:
                return False
            try:
                if current is None:
                    await self._store.create(self.path, info.encode(), make_parents=True)
                else:
                    await self._store.set(self.path, info.encode(), version)
            except NodeExistsError as exc:  # made meanwhile: read it again
                raise MetadataVersionError(str(exc)) from exc
            except MetadataVersionError:
                raise
            except asyncio.CancelledError as exc:  # the caller went away: unknown
                raise _MaybeRecordedError(exc) from exc
            except BKeeperError as exc:  # maybe applied, its answer lost (ConnectionLoss): look
                await self._check_recorded(info, exc)
            return None if current is None else current.ledger_id

        return await cas_update(
            self._read,
            attempt,
            what=f"snapshot record {self.path}",
            attempts_max=RECORD_RETRIES_MAX,
        )

    async def _check_recorded(self, info: SnapshotInfo, error: BKeeperError) -> None:
        """A write of ``info`` failed with ``error``, maybe after it was applied: return
        when the record names its ledger now; raise ``error`` when it does not, and
        :class:`_MaybeRecordedError` when that cannot be told."""
        try:
            now, _version = await self._read()
        except asyncio.CancelledError as cancelled:
            raise _MaybeRecordedError(cancelled) from error
        except BKeeperError:
            raise _MaybeRecordedError(error) from error
        if now is None or now.ledger_id != info.ledger_id:
            raise error
        log.info("snapshot record %s: recorded (its answer was lost: %s)", self.path, error)

    async def read(self, info: SnapshotInfo) -> bytes | None:
        """The state bytes of ``info``; None when its ledger is gone (a newer snapshot
        replaced it: read :meth:`latest` again)."""
        try:
            handle = await self._logs.bk.open_ledger(
                info.ledger_id, self._config.password, recovery=False
            )
        except LedgerNotFoundError:
            return None
        out = io.BytesIO()
        try:
            if handle.last_add_confirmed >= 0:
                async for entries in handle.read_batches(0, handle.last_add_confirmed):
                    for entry in entries:
                        out.write(entry.payload)
        finally:
            await handle.close()
        data = out.getvalue()
        if len(data) != info.size_bytes:
            raise StateMachineError(
                f"snapshot ledger {info.ledger_id} holds {len(data)} bytes, "
                f"its record says {info.size_bytes}"
            )
        return data


class _MaybeRecordedError(Exception):
    """Recording a snapshot failed with ``error`` in a way that may have recorded it."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error
