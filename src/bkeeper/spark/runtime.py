"""One bkeeper client per Spark Python process, and the work done with it (no pyspark).

Spark reuses its Python workers across tasks and queries, so a client made for one task is
kept in a module-level table (:func:`runtime`, keyed by metadata URI, client settings and
password; at most ``RUNTIMES_MAX``) and serves every later task of that process. Each
:class:`Runtime` runs an event loop on its own thread; the blocking methods here submit work
to it. Nothing here is pickled: data source objects hold only options and plans.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import threading
from collections.abc import Coroutine, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from bkeeper.client import BookKeeper, ClientConfig
from bkeeper.client.entry import Entry
from bkeeper.client.read_handle import ReadHandle
from bkeeper.client.sync import LoopThread
from bkeeper.client.sync import ReadHandle as SyncReadHandle
from bkeeper.client.write_handle import WriteHandle
from bkeeper.common.errors import (
    BKeeperError,
    CallTimeoutError,
    ConfigError,
    ConnectionLossError,
    LedgerNotFoundError,
    LogDeletedError,
    LogError,
    LogExistsError,
    LogNotFoundError,
    LogTruncatedError,
    SessionExpiredError,
)
from bkeeper.namedlog import LogConfig, NamedLogs, PendingLedgers, create_ledger, encode_record
from bkeeper.namedlog.core import (
    CHUNK_FORMAT_VERSION,
    CHUNK_HEAD,
    Incomplete,
    Reassembly,
    check_log_name,
    codec_id,
    decode_chunk,
    encode_batch,
    encode_chunks,
)
from bkeeper.spark.errors import explained
from bkeeper.spark.options import client_config
from bkeeper.spark.plan import EntrySpan, LogView

if TYPE_CHECKING:  # imported by read tasks only (see bkeeper.spark.source's docstring)
    import pyarrow as pa

__all__ = ["Runtime", "TaskLedgers", "runtime"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Clients one Python process keeps (one per distinct cluster and settings).
RUNTIMES_MAX = 16
#: Longest one blocking call into the client may take.
CALL_TIMEOUT_S = 600.0
#: Young-generation threshold of the garbage collector in processes that read through this
#: module (Python's default is 700). Reads make a few short-lived objects per entry, none in
#: cycles; with the default, collections cost as much as the reading itself.
GC_YOUNG_THRESHOLD = 50_000
#: Appends a write task keeps in flight per ledger.
WRITE_IN_FLIGHT_MAX = 2_000

#: A row to write: (log, payload, key, properties).
Row = tuple[str, bytes, bytes | None, Mapping[str, bytes] | None]

_runtimes: dict[tuple[Any, ...], Runtime] = {}
_runtimes_lock = threading.Lock()


def runtime(metadata: str, client: tuple[tuple[str, Any], ...], log_config: LogConfig) -> Runtime:
    """This process's client for these settings (made on first use, then reused)."""
    key = (metadata, client, log_config)
    with _runtimes_lock:
        if not _runtimes:
            _tune_gc()
        found = _runtimes.get(key)
        if found is not None and found.alive:
            return found
        if found is not None:
            del _runtimes[key]
        if len(_runtimes) >= RUNTIMES_MAX:
            _runtimes.pop(next(iter(_runtimes))).close()
        made = Runtime(metadata, client_config(client), log_config)
        _runtimes[key] = made
        return made


def _tune_gc() -> None:
    """Freeze what is loaded (modules, Spark's worker state) out of the collector's reach,
    and collect the young generation less often (see ``GC_YOUNG_THRESHOLD``)."""
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(max(GC_YOUNG_THRESHOLD, gc.get_threshold()[0]), middle, old)


class Runtime:
    """A started client with named logs and a planning view, behind blocking calls."""

    def __init__(self, metadata: str, config: ClientConfig, log_config: LogConfig) -> None:
        self._loop = LoopThread()
        self.alive = True
        try:
            self.bk = self.call(BookKeeper(metadata, config).start())
        except (ConnectionLossError, CallTimeoutError, SessionExpiredError) as exc:
            self._loop.stop()
            # The client names a socket address; the user gave a metadata URI (which holds
            # no secret: ZooKeeper credentials come from a file it names).
            raise explained(exc, f"cannot reach the metadata service {metadata}") from exc
        except BaseException:
            self._loop.stop()
            raise
        self.logs = NamedLogs(self.bk, log_config)
        self.view = LogView(self.logs)

    def call(self, coro: Coroutine[Any, Any, T], timeout_s: float = CALL_TIMEOUT_S) -> T:
        return self._loop.call(coro, timeout_s)

    def close(self) -> None:
        if not self.alive:
            return
        self.alive = False
        with contextlib.suppress(Exception):
            self.call(self.bk.close(), 30)
        self._loop.stop()

    # -- reading -------------------------------------------------------------------------
    def read_span(
        self,
        span: EntrySpan,
        *,
        include_properties: bool,
        rows_per_batch: int,
        fail_on_data_loss: bool,
    ) -> Iterator[pa.RecordBatch]:
        """The records of ``span`` (entries of one record or record batches; from the first
        entry's ``first_index``, before the last entry's ``end_index``) as Arrow batches of
        at most ``rows_per_batch`` rows. A failure of the client is raised saying which log,
        ledger and bookies, and what to do (:func:`bkeeper.spark.errors.explained`)."""
        handle: ReadHandle | None = None
        try:
            handle = self.call(self._open(span, fail_on_data_loss))
            if handle is not None:
                yield from self._read_open(handle, span, include_properties, rows_per_batch)
        except LogError:
            raise  # says which log already
        except BKeeperError as exc:
            doing = f"log {span.log!r}: cannot read ledger {span.ledger_id} (entries "
            doing += f"{span.first}..{span.last})"
            if handle is not None:
                bookies = handle.metadata.ensemble_for(max(span.first, 0))
                doing += f" from its bookies {', '.join(str(b) for b in bookies)}"
            raise explained(exc, doing) from exc

    def _read_open(
        self, handle: ReadHandle, span: EntrySpan, include_properties: bool, rows_per_batch: int
    ) -> Iterator[pa.RecordBatch]:
        from bkeeper.spark.arrow import entry_records, record_batch

        pending: list[Entry] = []
        records = 0

        def batches_of(group: list[Entry]) -> Iterator[pa.RecordBatch]:
            first = span.first_index if group[0].entry_id == span.first else 0
            end = span.end_index if group[-1].entry_id == span.last else 0
            batch = record_batch(span.log, span.ledger_id, group, include_properties,
                                 first_index=first, end_index=end)  # fmt: skip
            for low in range(0, batch.num_rows, rows_per_batch):
                yield batch.slice(low, rows_per_batch)

        for entry in self._span_entries(handle, span):
            pending.append(entry)
            records += entry_records(entry.payload)
            if records >= rows_per_batch:
                yield from batches_of(pending)
                pending, records = [], 0
        if pending:
            yield from batches_of(pending)

    def _span_entries(self, handle: ReadHandle, span: EntrySpan) -> Iterator[Entry]:
        """The entries of ``span`` to decode, a chunked record (:mod:`bkeeper.namedlog.core.chunks`)
        as one entry at its last chunk, holding its whole envelope. A chunked record is read
        by the span holding its last chunk, reading its earlier chunks across the span's
        start if need be, and by no other: the chunks of one that ends past the span are
        passed over (the next span reads it). One that its writer cut short (the ledger is
        sealed and ends before its last chunk) is skipped with a warning."""
        reader = SyncReadHandle(self._loop, handle, CALL_TIMEOUT_S)
        chunks = Reassembly(span.ledger_id, functools.partial(_incomplete, span))
        later = -1  # entries up to this one are chunks of a record a later span reads
        with contextlib.closing(
            reader.read_batches(span.first, span.last, unconfirmed=True)
        ) as batches:
            for batch in batches:
                for entry in batch:
                    payload, entry_id = entry.payload, entry.entry_id
                    if entry_id <= later:
                        continue
                    if (not payload or payload[0] != CHUNK_FORMAT_VERSION) and chunks.idle:
                        yield entry
                        continue
                    if chunks.fresh and entry_id == span.first:
                        later = self._read_back(handle, span, entry, chunks)
                        if entry_id <= later:
                            continue
                    whole = chunks.feed(entry_id, payload)
                    if whole is not None and whole.chunks == 1:
                        yield entry
                    elif whole is not None:
                        yield Entry(span.ledger_id, entry_id, entry.lac, entry.length,
                                    memoryview(whole.data))  # fmt: skip
        if handle.is_closed and span.last == handle.metadata.last_entry_id:
            chunks.end(f"ledger {span.ledger_id} ends before its last chunk (its writer stopped)")

    def _read_back(
        self, handle: ReadHandle, span: EntrySpan, entry: Entry, chunks: Reassembly
    ) -> int:
        """``entry``, the span's first, may be a later chunk of a record: when that record
        ends in this span, feed its earlier chunks (before the span) to ``chunks``; when it
        ends past the span, return its last chunk's entry id (else -1)."""
        chunk = decode_chunk(entry.payload, span.ledger_id, entry.entry_id)
        if chunk is None or chunk.chunk_index == 0:
            return -1
        first = entry.entry_id - chunk.chunk_index
        last = first + chunk.chunk_count - 1
        if last > span.last:
            return last
        for entry_id in range(max(first, 0), entry.entry_id):
            earlier = self.call(handle.read_entry(entry_id))
            chunks.feed(entry_id, earlier.payload)
        return -1

    async def _open(self, span: EntrySpan, fail_on_data_loss: bool) -> ReadHandle | None:
        try:
            return await self.bk.open_ledger(
                span.ledger_id, self.logs.config.password, recovery=False
            )
        except LedgerNotFoundError:
            pass
        # Gone after it was planned: why (read only on this path, never per entry).
        where = f"ledger {span.ledger_id} (entries {span.first}..{span.last})"
        try:
            listed = await self.logs.log(span.log).metadata()
        except LogNotFoundError:
            message = (
                f"log {span.log!r} was deleted while this query read it: {where} went with "
                "it, and every record of the log; recreate the log to write to it again, "
                "and start readers afresh (a new checkpoint): its old positions mean nothing"
            )
            if fail_on_data_loss:
                raise LogDeletedError(message) from None
            log.warning("%s (failOnDataLoss=false: skipping it)", message)
            return None
        if any(ledger.ledger_id == span.ledger_id for ledger in listed.ledgers):
            why = (
                "deleted from the metadata while the log still lists it (deleted by hand? "
                "the log has lost those records)"
            )
        else:
            why = "the log was truncated past it after this read was planned"
        message = f"log {span.log!r}: {where} is gone: {why}"
        if fail_on_data_loss:
            raise LogTruncatedError(message + "; failOnDataLoss=false skips it") from None
        log.warning("%s; skipping it (failOnDataLoss=false)", message)
        return None

    # -- writing -------------------------------------------------------------------------
    def ensure_log(self, name: str, create: bool, refusal: str | None = None) -> None:
        """Create the log ``name`` if missing; with ``create`` false, fail if it is (saying
        ``refusal`` when given: why it is not created)."""

        async def run() -> None:
            if create:
                with contextlib.suppress(LogExistsError):
                    await self.logs.create(name)
                return
            try:
                await self.logs.log(name).metadata()
            except LogNotFoundError:
                why = refusal or "createLog=false: create the log first or leave the option out"
                raise LogNotFoundError(f"no log named {name!r}, and {why}") from None

        self.call(run())

    def log_exists(self, name: str) -> bool:
        """Whether the log ``name`` exists now."""

        async def run() -> bool:
            try:
                await self.logs.log(name).metadata()
            except LogNotFoundError:
                return False
            return True

        return self.call(run())

    def pending(self, job_id: str) -> PendingLedgers:
        return PendingLedgers(self.bk.cluster.store, self.logs.store, job_id)

    def append_ledgers(
        self, name: str, ledger_ids: list[int], writer_id: str | None, batch_id: int | None
    ) -> bool:
        """Append ``ledger_ids`` to the log (False: the batch was there already)."""
        return self.call(
            self.logs.log(name).append_ledgers(ledger_ids, writer_id=writer_id, batch_id=batch_id)
        )

    def unregister(self, job_id: str, ledger_ids: list[int]) -> None:
        self.call(self.pending(job_id).remove(ledger_ids))

    def abort_job(self, job_id: str) -> list[int]:
        """Mark a one-off job aborted, then clean it (see PendingLedgers)."""

        async def run() -> list[int]:
            pending = self.pending(job_id)
            await pending.mark_aborted()
            return await pending.clean(self.bk.delete_ledger)

        return self.call(run())

    def job_aborted(self, job_id: str) -> bool:
        return self.call(self.pending(job_id).aborted())

    def clean(self, job_id: str) -> list[int]:
        """Delete the ledgers ``job_id`` registered that are in no log (see PendingLedgers)."""
        return self.call(self.pending(job_id).clean(self.bk.delete_ledger))

    def delete_ledgers(self, ledger_ids: list[int]) -> None:
        async def run() -> None:
            for ledger_id in ledger_ids:
                with contextlib.suppress(LedgerNotFoundError):
                    await self.bk.delete_ledger(ledger_id)

        self.call(run())


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


def _incomplete(span: EntrySpan, skipped: Incomplete) -> None:
    log.warning("log %s: %s", span.log, skipped)
