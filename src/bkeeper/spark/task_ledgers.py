"""The ledgers one Spark write task makes (:class:`TaskLedgers`), on the process's
:class:`~bkeeper.spark.runtime.Runtime`: records packed into batches or cut into chunks,
appended to a ledger per log, sealed at the task's end; ``bkeeper.spark.sink`` commits them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from bkeeper.client.write_handle import WriteHandle
from bkeeper.common.errors import BKeeperError, ConfigError, LogNotFoundError
from bkeeper.namedlog import LogConfig, create_ledger, encode_record
from bkeeper.namedlog.core import (
    CHUNK_HEAD,
    check_log_name,
    codec_id,
    encode_batch,
    encode_chunks,
)
from bkeeper.spark.runtime import Runtime

__all__ = ["TaskLedgers"]

#: Appends a write task keeps in flight per ledger.
WRITE_IN_FLIGHT_MAX = 2_000

#: A row to write: (log, payload, key, properties).
Row = tuple[str, bytes, bytes | None, Mapping[str, bytes] | None]


@dataclass
class TaskLedgers:
    """The ledgers one write task made, per log, in order; see ``bkeeper.spark.sink``.

    With ``config.batching`` records are packed into record batches (up to
    ``batch_max_records`` records or ``batch_max_bytes`` bytes of envelopes per entry,
    compressed with ``compression``; a batch of one record, or a record larger than
    ``batch_max_bytes``, is written as a single-record entry). Each log's open batch is
    appended when full and at :meth:`seal`. A record larger than ``config.chunk_bytes`` is
    written as its chunks (consecutive entries, as the log writer writes them: see
    :mod:`bkeeper.namedlog.core.chunks`), after the log's open batch."""

    runtime: Runtime
    roll_bytes: int
    job_id: str
    config: LogConfig = field(default_factory=LogConfig)
    ledgers: dict[str, list[int]] = field(default_factory=dict)
    records: int = 0
    _open: dict[str, WriteHandle] = field(default_factory=dict)
    _pending: list[asyncio.Future[int]] = field(default_factory=list)
    #: Per log: the envelopes of the batch being filled, and their bytes.
    _batch: dict[str, list[bytes]] = field(default_factory=dict)
    _batch_bytes: dict[str, int] = field(default_factory=dict)

    def write(
        self, rows: Iterator[tuple[str, bytes, bytes | None, Mapping[str, bytes] | None]]
    ) -> None:
        """Append rows (log, payload, key, properties) to this task's ledgers."""
        self.runtime.call(self._write(list(rows)))

    async def _write(self, rows: list[Row]) -> None:
        now = self.runtime.logs.clock.wall_ms()
        config = self.config
        max_records = config.batch_max_records if config.batching else 1
        max_bytes = config.batch_max_bytes
        for name, payload, key, properties in rows:
            data = encode_record(payload, now, key, properties)
            self.records += 1
            if len(data) > config.chunk_bytes:  # a large record: its chunks, alone
                await self._flush(name)
                await self._append(name, data, chunked=True)
                continue
            if max_records == 1:
                await self._append(name, data)
                continue
            batch = self._batch.setdefault(name, [])
            size = self._batch_bytes.get(name, 0)
            if batch and (len(batch) >= max_records or size + len(data) > max_bytes):
                await self._flush(name)
                batch, size = self._batch.setdefault(name, []), 0
            batch.append(data)
            self._batch_bytes[name] = size + len(data)
        await self._drain()

    async def _flush(self, name: str) -> None:
        """Append the batch being filled for ``name`` (one entry)."""
        batch = self._batch.pop(name, [])
        self._batch_bytes.pop(name, None)
        if len(batch) == 1:
            await self._append(name, batch[0])
        elif batch:
            await self._append(name, encode_batch(batch, codec_id(self.config.compression)))

    async def _append(self, name: str, data: bytes, *, chunked: bool = False) -> None:
        """Append ``data`` as the next entry of ``name``'s ledger, or (``chunked``) a large
        record's chunks as the next entries, in one call (a ledger rolls only between
        records; a chunk with its head fits one entry of the client's frames)."""
        handle = self._open.get(name)
        if handle is None or handle.length >= self.roll_bytes:
            handle = await self._next_ledger(name)
        if not chunked:
            self._pending.append(await handle.append_async(data))
            return
        size = max(1, min(self.config.chunk_bytes, handle.max_entry_bytes - CHUNK_HEAD.size))
        chunks = encode_chunks(data, size)
        if len(chunks) > handle.pending_adds_max:
            raise ConfigError(
                f"a record of {len(data)} bytes makes {len(chunks)} chunks of {size} bytes: "
                f"more than the client's pending_adds_max ({handle.pending_adds_max})"
            )
        self._pending.append(await handle.append_many_async(chunks))
        if len(self._pending) >= WRITE_IN_FLIGHT_MAX:
            await self._drain()

    async def _drain(self) -> None:
        pending, self._pending = self._pending, []
        await asyncio.gather(*pending)

    async def _next_ledger(self, name: str) -> WriteHandle:
        if name not in self.ledgers:
            check_log_name(name)  # a bad name in a log column fails the task, naming it
        old = self._open.pop(name, None)
        if old is not None:
            await self._drain()
            await old.close()
        try:  # the log's stored ensemble and quorums (docs/logs.md, Log settings)
            handle = await self.runtime.logs.log(name).new_ledger()
        except LogNotFoundError:  # a log column's new name: created at the commit
            handle = await create_ledger(self.runtime.bk, self.runtime.logs.config)
        self.ledgers.setdefault(name, []).append(handle.ledger_id)
        self._open[name] = handle
        # Registered before any record goes in, so a job that dies leaves nothing unknown.
        await self.runtime.pending(self.job_id).add(name, handle.ledger_id)
        return handle

    def where(self) -> str:
        """Where this task writes, for an error message: the logs, and the ledger each
        is being written to with its bookies (``log 'a' (ledger 7 on bookies x, y)``)."""
        if not self.ledgers:
            return "write task (making its first ledger)"
        parts = []
        for name in self.ledgers:
            handle = self._open.get(name)
            if handle is None:
                parts.append(f"log {name!r}")
                continue
            bookies = ", ".join(str(b) for b in handle.metadata.last_ensemble)
            parts.append(f"log {name!r} (ledger {handle.ledger_id} on bookies {bookies})")
        return "write task of " + ", ".join(parts)

    def seal(self) -> dict[str, list[int]]:
        """Seal every ledger; the ledger ids per log."""

        async def run() -> None:
            for name in list(self._batch):
                await self._flush(name)
            await self._drain()
            for handle in self._open.values():
                await handle.close()
            self._open.clear()

        self.runtime.call(run())
        return self.ledgers

    def discard(self) -> None:
        """Delete every ledger this task made (after a failure)."""

        self._batch.clear()
        self._batch_bytes.clear()

        async def run() -> None:
            for handle in self._open.values():
                with contextlib.suppress(BKeeperError):
                    await handle.close()
            self._open.clear()

        with contextlib.suppress(BaseException):
            self.runtime.call(run(), 60)
            ids = [i for ids in self.ledgers.values() for i in ids]
            self.runtime.delete_ledgers(ids)
            self.runtime.unregister(self.job_id, ids)
