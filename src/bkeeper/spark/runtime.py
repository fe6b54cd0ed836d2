"""One bkeeper client per Spark Python process, and the work done with it (no pyspark).

Spark reuses its Python workers across tasks and queries, so a client made for one task is
kept in a module-level table (:func:`runtime`, keyed by metadata URI, client settings and
password; at most ``RUNTIMES_MAX``) and serves every later task of that process. Each
:class:`Runtime` runs an event loop on its own thread; the blocking methods here submit work
to it. Nothing here is pickled: data source objects hold only options and plans.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import logging
import threading
from collections.abc import Coroutine, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from bkeeper.client import BookKeeper, ClientConfig
from bkeeper.client.entry import Entry
from bkeeper.client.read_handle import ReadHandle
from bkeeper.client.sync import LoopThread
from bkeeper.client.sync import ReadHandle as SyncReadHandle
from bkeeper.common.errors import (
    BKeeperError,
    CallTimeoutError,
    ConnectionLossError,
    LedgerNotFoundError,
    LogDeletedError,
    LogError,
    LogExistsError,
    LogNotFoundError,
    LogTruncatedError,
    SessionExpiredError,
)
from bkeeper.namedlog import LogConfig, NamedLogs, PendingLedgers, WatchedLogs
from bkeeper.namedlog.core import (
    CHUNK_FORMAT_VERSION,
    Incomplete,
    Reassembly,
    batch_record_count,
    decode_chunk,
)
from bkeeper.spark.errors import explained
from bkeeper.spark.log_view import LogView
from bkeeper.spark.options import client_config
from bkeeper.spark.plan import EntrySpan

if TYPE_CHECKING:  # imported by read tasks only (see bkeeper.spark.source's docstring)
    import pyarrow as pa

__all__ = ["Runtime", "runtime"]

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
        #: Log metadata kept behind watches: a stream's driver looks at its logs at every
        #: trigger, ~100 times a second while no record comes (docs/spark.md).
        self._watched = WatchedLogs(self.logs.store)
        self.view = LogView(self.logs, self._watched)

    def call(self, coro: Coroutine[Any, Any, T], timeout_s: float = CALL_TIMEOUT_S) -> T:
        return self._loop.call(coro, timeout_s)

    def close(self) -> None:
        if not self.alive:
            return
        self.alive = False
        with contextlib.suppress(Exception):
            self.call(self._watched.aclose(), 30)
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
        from bkeeper.spark.arrow import record_batch

        pending: list[Entry] = []
        records = 0

        def batches_of(group: list[Entry]) -> Iterator[pa.RecordBatch]:
            first = span.first_index if group[0].entry_id == span.first else 0
            end = span.end_index if group[-1].entry_id == span.last else 0
            batch = record_batch(
                span.log,
                span.ledger_id,
                group,
                include_properties,
                first_index=first,
                end_index=end,
            )
            for low in range(0, batch.num_rows, rows_per_batch):
                yield batch.slice(low, rows_per_batch)

        for entry in self._span_entries(handle, span):
            pending.append(entry)
            records += batch_record_count(entry.payload)
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
                        yield Entry(
                            span.ledger_id,
                            entry_id,
                            entry.lac,
                            entry.length,
                            memoryview(whole.data),
                        )
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
        return PendingLedgers(self.bk.cluster.store, self.logs.store, job_id, self.logs.clock)

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
        return self._end_job(job_id, committed=False)

    def commit_job(self, job_id: str) -> list[int]:
        """Mark a one-off job committed, then clean it (see PendingLedgers)."""
        return self._end_job(job_id, committed=True)

    def _end_job(self, job_id: str, *, committed: bool) -> list[int]:
        async def run() -> list[int]:
            pending = self.pending(job_id)
            await (pending.mark_committed() if committed else pending.mark_aborted())
            return await pending.clean(self.bk.delete_ledger)

        return self.call(run())

    def job_ended(self, job_id: str) -> bool:
        """Whether a one-off job was aborted or committed (see PendingLedgers)."""
        return self.call(self.pending(job_id).ended())

    def clean(self, job_id: str) -> list[int]:
        """Delete the ledgers ``job_id`` registered that are in no log (see PendingLedgers)."""
        return self.call(self.pending(job_id).clean(self.bk.delete_ledger))

    def delete_ledgers(self, ledger_ids: list[int]) -> None:
        async def run() -> None:
            for ledger_id in ledger_ids:
                with contextlib.suppress(LedgerNotFoundError):
                    await self.bk.delete_ledger(ledger_id)

        self.call(run())


def _incomplete(span: EntrySpan, skipped: Incomplete) -> None:
    log.warning("log %s: %s", span.log, skipped)
