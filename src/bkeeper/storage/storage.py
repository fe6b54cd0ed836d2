"""The bookie storage engine's public face: :class:`Storage`.

Threads: the caller (the server's event loop) adds, fences and reads; the journal thread
writes and fdatasyncs groups and calls ``on_durable``; the flusher thread moves the write
cache to entry logs; checkpoints run on whichever thread calls :meth:`Storage.checkpoint`.
The engine's threads, and the conditions and events they wait on, come from the ``threads``
port given to :meth:`Storage.open` (:mod:`bkeeper.common.threads`; OS threads by default).
Shared state is guarded by one lock held for a few dict operations at a time.

Blocking: :meth:`Storage.open`, :meth:`checkpoint`, :meth:`close` and :meth:`abort` block.
Writes never block: they validate, update memory and queue a journal record; their
``token`` comes back through ``on_durable(tokens, error)`` once the record is durable.
Reads answer from memory (write cache, read cache) or, for older entries, with a positional
read of an entry log: :meth:`read_entry_nowait` says None instead of touching the disk.

Disk space (:mod:`bkeeper.storage.disk_space`, :mod:`bkeeper.storage.disk_set`): the engine
keeps a current view of the free space of every filesystem holding one of its directories
(re-checked as it writes, and by :meth:`check_disk`, which its owner calls periodically) and
reports its :class:`DiskState` to ``on_disk_state``. On a full disk it
opens without creating files, keeps serving reads, refuses writes with ``DiskFullError`` only
while a write has actually failed for lack of space, and writes again once space is freed.

Never "absent" when unsure: a ledger that may have lost acknowledged entries is in *limbo*
(journal replay found damaged records of it: a corrupt record in the journal's last group,
or skipped corrupt records with ``journal_skip_corrupt_records``; or :meth:`mark_limbo`).
For it every answer that would be "no such entry" raises ``DataUnknownError`` instead, and
so does every read of its last entry (entry -1: the last entry it holds may not be the
last one written). A ledger in limbo is fenced too. When replay cannot tell which ledgers
damaged records belonged to, the whole engine is in limbo: "no such ledger" is unknown as
well. Limbo is persisted by checkpoints (the one that ends :meth:`open` included) and lasts
across restarts until :meth:`clear_limbo` (per ledger, once it is repaired; or for the whole
engine). A torn journal tail does not cause limbo: only the group being written when the
process died can be torn, and nothing in it was acknowledged.

Reads, and damaged entry-log records: :mod:`bkeeper.storage.reads` (:class:`StorageReads`,
which :class:`Storage` extends).
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable

from bkeeper.common.clock import Clock, default_clock
from bkeeper.common.errors import (
    BadRequestError,
    DiskFullError,
    NoSuchLedgerError,
    UnauthorizedAccessError,
)
from bkeeper.common.metrics import MetricSet
from bkeeper.common.threads import OS_THREADS, Event, Threads
from bkeeper.storage.add_batch import AddBatch, add_batch_locked, entry_lac
from bkeeper.storage.compaction import Compactor
from bkeeper.storage.config import StorageConfig
from bkeeper.storage.dirs import LedgerDirs, StorageLayout
from bkeeper.storage.disk_set import DiskSet
from bkeeper.storage.disk_space import DiskState
from bkeeper.storage.engine import EngineState
from bkeeper.storage.entry_log import EntryLogReader, LogIds
from bkeeper.storage.filesystem import BytesLike, FileSystem, OsFileSystem
from bkeeper.storage.flusher import Flusher
from bkeeper.storage.garbage import EntryLogUsage, GcResult
from bkeeper.storage.journal import DurableCallback
from bkeeper.storage.journal_format import RecordKind, ledger_record
from bkeeper.storage.journal_replay import ReplayOutcome
from bkeeper.storage.journal_set import JournalSet
from bkeeper.storage.ledger_state import StoredLedger
from bkeeper.storage.ledgers_map import EntryLogRegistry
from bkeeper.storage.metrics import FlushMetrics, StorageReadings, StorageStats, register_gauges
from bkeeper.storage.open_report import OpenReport
from bkeeper.storage.reads import StorageReads
from bkeeper.storage.recovery import recover, remove_files_of_failed_open

__all__ = ["Storage", "StorageStats"]

log = logging.getLogger(__name__)

_LEDGER_ID = struct.Struct(">q")


def _ignore(tokens: list[object], error: BaseException | None) -> None:
    pass


class Storage(StorageReads):
    """A bookie's storage: journal, write cache, entry logs, location index, ledger state."""

    def __init__(
        self,
        config: StorageConfig,
        fs: FileSystem,
        engine: EngineState,
        flusher: Flusher,
        journals: JournalSet,
        replay: ReplayOutcome,
        disks: DiskSet,
        dirs: LedgerDirs,
        registry: EntryLogRegistry,
        log_ids: LogIds,
        clock: Clock,
        threads: Threads = OS_THREADS,
    ) -> None:
        """Use :meth:`open`."""
        self.config = config
        self.replay_outcome = replay
        #: What :meth:`open` did (set once it returns).
        self.open_report: OpenReport | None = None
        self._fs = fs
        self._disk = disks
        self._engine = engine
        self._flusher = flusher
        self._journal = journals
        # A ledger's records go to journal ledger_id % count (one list index per call).
        self._journals = journals.journals
        self._journal_count = len(journals.journals)
        self._ledger_dirs = dirs  # where each entry log is
        self._reader = EntryLogReader(fs, dirs, config.entry_log_read_handles_max)
        self._registry = registry
        self._journal_bytes_checkpointed = 0  # journal bytes written before the last checkpoint
        self._compactor = Compactor(
            fs, dirs, config, engine, flusher, registry, self._reader, log_ids, self.checkpoint,
            clock, threads,
        )  # fmt: skip

    @classmethod
    def open(
        cls,
        config: StorageConfig,
        fs: FileSystem | None = None,
        on_durable: DurableCallback | None = None,
        on_disk_state: Callable[[DiskState], None] | None = None,
        clock: Clock | None = None,
        metrics: MetricSet | None = None,
        threads: Threads | None = None,
    ) -> Storage:
        """Load the last checkpoint, replay the journal, checkpoint, start the threads.

        ``on_durable(tokens, error)`` is called from the journal thread once per fsync
        group with the tokens of that group in order (``error`` None on success).
        ``on_disk_state(state)`` is called from any thread when the disk state changes
        (read :attr:`disk_state` once ``open`` returns for the state to start with).
        ``metrics``: the owner's metric set, to register the engine's metrics in
        (:mod:`bkeeper.storage.metrics`); None keeps none. ``threads``: what the journals,
        the flusher and compaction passes run on and wait with
        (:mod:`bkeeper.common.threads`; None: OS threads).
        On a full disk the checkpoint at open is deferred (the journal is kept); if the
        open fails, the files it created are removed.
        """
        fs = fs if fs is not None else OsFileSystem()
        clock = clock if clock is not None else default_clock()
        threads = threads if threads is not None else OS_THREADS
        layout = StorageLayout.of(config)
        layout.makedirs(fs)
        disks = DiskSet(fs, layout.journal_dirs, layout.ledger_dirs, config, clock)
        if on_disk_state is not None:
            disks.add_listener(on_disk_state)
        dirs = LedgerDirs(fs, layout.ledger_dirs, disks)
        started = clock.monotonic()
        recovered = recover(fs, config, layout, dirs, clock, threads)
        engine, flusher = recovered.engine, recovered.flusher
        journals = JournalSet(
            fs,
            layout,
            config,
            engine.lock,
            on_durable or _ignore,
            recovered.next_journal_file_id,
            disks,
            clock,
            metrics,
            threads,
        )
        journals.start()
        storage = cls(
            config,
            fs,
            engine,
            flusher,
            journals,
            recovered.replay,
            disks,
            dirs,
            recovered.registry,
            recovered.log_ids,
            clock,
            threads,
        )
        if metrics is not None:
            flusher.metrics = FlushMetrics(metrics, clock)
            register_gauges(metrics, storage.readings)
        try:
            flusher.start(journals.marks_locked, journals.fail)
            try:
                # The journal files it retires are removed (gently) once the open returned.
                flusher.checkpoint(full=recovered.compact_index, defer_removal=True)
                storage._compactor.remove_logs(recovered.compacted_sources)
            except DiskFullError as exc:
                log.warning("checkpoint at open deferred, the journal is kept: %s", exc)
                engine.flush_wanted.set()  # the flusher writes the replayed entries once it can
        except BaseException:
            storage.abort()
            remove_files_of_failed_open(fs, layout, recovered.root, recovered.files_before)
            raise
        storage.open_report = recovered.report(clock.monotonic() - started)
        log.info(
            "storage open in %.2f s: %s; %d entries in the index, %d entry logs (%d scanned)",
            storage.open_report.seconds,
            "clean stop"
            if recovered.clean_stop
            else f"{recovered.replay.records} records replayed",
            recovered.index_entries,
            recovered.entry_logs,
            recovered.entry_logs_scanned,
        )
        return storage

    # -- writes ------------------------------------------------------------------------
    def add_entry(
        self,
        ledger_id: int,
        entry_id: int,
        master_key: bytes,
        body: BytesLike,
        *,
        recovery: bool = False,
        token: object | None = None,
    ) -> None:
        """Add an entry (a batch of one for :meth:`add_entries`): readable at once,
        ``token`` reported durable later.

        Raises UnauthorizedAccessError (key mismatch), LedgerFencedError (fenced and not a
        recovery add), TooManyRequestsError (journal queue or write cache full),
        BadRequestError (body does not name this ledger and entry), DiskFullError (a
        write failed for lack of space and none is free yet) and BookieIOError (journal
        failed or storage closed).
        """
        lac = entry_lac(ledger_id, entry_id, body)
        if type(body) is not bytes:
            body = bytes(body)
        batch = AddBatch.of_one(ledger_id, entry_id, lac, master_key, body, recovery)
        with self._engine.lock:
            add_batch_locked(
                self._engine, self._journals, batch, self._ledger_for_write_locked, token
            )
        if batch.refused:
            raise batch.refused[0][1]

    def add_entries(self, batch: AddBatch) -> None:
        """Add many entries at once: the one add body (:mod:`bkeeper.storage.add_batch`),
        with one hold of the lock and one journal append per journal touched. The batch is
        its own token, reported durable by each of the ``batch.parts`` journals it was queued
        to. Entries refused (for the reasons :meth:`add_entry` raises) are listed in
        ``batch.refused`` and not added."""
        with self._engine.lock:
            add_batch_locked(
                self._engine, self._journals, batch, self._ledger_for_write_locked, batch
            )

    def fence(self, ledger_id: int, master_key: bytes, *, token: object | None = None) -> None:
        """Fence the ledger (creating it with this key if unknown); durable via ``token``."""
        record = ledger_record(RecordKind.FENCE, ledger_id)
        with self._engine.lock:
            state = self._ledger_for_write_locked(ledger_id, master_key)
            self._journal.for_ledger(ledger_id).append_locked(record, b"", token)
            self._engine.fence_locked(state)

    def set_explicit_lac(
        self, ledger_id: int, master_key: bytes, lac_body: bytes, *, token: object | None = None
    ) -> None:
        """Keep ``lac_body`` (a WRITE_LAC body: ledgerId | LAC | digest) as explicit LAC."""
        lac_body = bytes(lac_body)
        if len(lac_body) < 16 or _LEDGER_ID.unpack_from(lac_body)[0] != ledger_id:
            raise BadRequestError(f"ledger {ledger_id}: bad explicit LAC body")
        record = ledger_record(RecordKind.EXPLICIT_LAC, ledger_id, lac_body)
        with self._engine.lock:
            state = self._ledger_for_write_locked(ledger_id, master_key)
            self._journal.for_ledger(ledger_id).append_locked(record, b"", token)
            self._engine.set_explicit_lac_locked(state, lac_body)

    def force_ledger(self, ledger_id: int, *, token: object | None = None) -> None:
        """``token`` is reported once everything of the ledger queued before it is durable."""
        record = ledger_record(RecordKind.FORCE_LEDGER, ledger_id)
        with self._engine.lock:
            self._journal.for_ledger(ledger_id).append_locked(record, b"", token)

    def delete_ledger(self, ledger_id: int, *, token: object | None = None) -> None:
        """Forget the ledger at once (reads say no such ledger); durable via ``token``.

        On a disk with no room the journal takes no record, yet deleting is how a full
        bookie frees space: with no ``token`` the ledger is then forgotten in memory only and
        the next checkpoint persists that (the index records deletions); a crash before it
        brings the ledger back, and garbage collection deletes it again (its metadata is
        gone). With a ``token`` the caller wants durability now: DiskFullError."""
        record = ledger_record(RecordKind.DELETE_LEDGER, ledger_id)
        with self._engine.lock:
            try:
                self._journal.for_ledger(ledger_id).append_locked(record, b"", token)
            except DiskFullError:
                if token is not None:
                    raise
                log.info("ledger %d deleted in memory (no room for its journal record)", ledger_id)
            self._engine.delete_locked(ledger_id)

    def _ledger_for_write_locked(self, ledger_id: int, master_key: bytes) -> StoredLedger:
        engine = self._engine
        state = engine.ledgers.get(ledger_id)
        if state is not None and state.master_key == master_key:
            return state
        if state is not None and state.master_key:
            raise UnauthorizedAccessError(f"ledger {ledger_id}: wrong master key")
        if ledger_id < 0:
            raise BadRequestError(f"bad ledger id {ledger_id}")
        key = bytes(master_key)
        record = ledger_record(RecordKind.MASTER_KEY, ledger_id, key)
        self._journal.for_ledger(ledger_id).append_locked(record, b"", None)
        if state is None:
            return engine.create_locked(ledger_id, key)
        state.master_key = key  # the key was lost with a skipped journal record: adopt
        engine.mark_dirty_locked(state)
        return state

    # -- limbo (what it reads: StorageReads) ---------------------------------------------
    def mark_limbo(self, ledger_id: int, master_key: bytes) -> None:
        """Put the ledger into limbo (creating it with ``master_key`` if unknown) and fence
        it. The fence is journaled; the limbo is persisted by the next checkpoint."""
        record = ledger_record(RecordKind.FENCE, ledger_id)
        with self._engine.lock:
            state = self._ledger_for_write_locked(ledger_id, master_key)
            self._journal.for_ledger(ledger_id).append_locked(record, b"", None)
            self._engine.set_limbo_locked(state, True)

    def clear_limbo(self, ledger_id: int | None = None) -> None:
        """Answer "absent" again for the ledger (once it is repaired), or, with no ledger, end
        the limbo of the whole engine (the ledgers in limbo stay so); persisted by the next
        checkpoint. NoSuchLedgerError if the ledger is unknown."""
        with self._engine.lock:
            if ledger_id is None:
                self._engine.limbo = False
                return
            state = self._engine.ledgers.get(ledger_id)
            if state is None:
                raise NoSuchLedgerError(f"no ledger {ledger_id}")
            self._engine.set_limbo_locked(state, False)

    # -- garbage collection ---------------------------------------------------------------
    def collect_garbage(self, *, minor: bool, major: bool, stop: Event | None = None) -> GcResult:
        """One garbage-collection pass (blocking; one at a time): checkpoint, remove entry
        logs holding no live ledger, then compact logs whose live ratio is below
        ``minor_compaction_threshold`` (if ``minor``) or ``major_compaction_threshold`` (if
        ``major``), throttled by ``compaction_rate_bytes_per_s``; on a full disk the logs
        with the fewest live bytes go first. ``stop`` ends it early (between records).
        See :mod:`bkeeper.storage.compaction`."""
        return self._compactor.collect(minor=minor, major=major, stop=stop)

    def entry_log_usage(self) -> list[EntryLogUsage]:
        """Every entry log's record bytes and live bytes, by log id."""
        return self._compactor.usage()

    # -- lifecycle ---------------------------------------------------------------------
    def checkpoint(self) -> None:
        """Flush the write cache, persist index and journal marks, drop old journals; then
        ask journals whose file holds ``journal_checkpoint_roll_bytes`` to start a new one, so
        that the next checkpoint can drop it even if no more records come."""
        written = self._journal.bytes_written  # before the marks: never counts too much
        self._flusher.checkpoint()
        self._journal_bytes_checkpointed = written
        self._journal.roll_large_files(self.config.journal_checkpoint_roll_bytes)

    @property
    def journal_idle(self) -> bool:
        """No journal record queued or being made durable (:attr:`JournalSet.idle`)."""
        return self._journal.idle

    @property
    def journal_bytes_since_checkpoint(self) -> int:
        """Journal bytes written since the last :meth:`checkpoint` began (at most that much
        is replayed after a crash, beside what that checkpoint could not cover)."""
        return self._journal.bytes_written - self._journal_bytes_checkpointed

    @property
    def checkpoint_due(self) -> bool:
        """Whether ``checkpoint_journal_bytes`` were journaled since the last checkpoint (the
        owner then checkpoints without waiting for its interval)."""
        limit = self.config.checkpoint_journal_bytes
        return limit > 0 and self.journal_bytes_since_checkpoint >= limit

    def close(self) -> None:
        """Make everything queued durable (callbacks fired), checkpoint, stop threads. On a
        full disk the checkpoint is left to the next open (the journal holds everything)."""
        self._journal.close()
        try:
            if not self._journal.failed:
                # Marked clean: the next open says so (nothing past the marks to replay).
                self._flusher.checkpoint(clean=True)
        except DiskFullError as exc:
            log.warning("checkpoint at close skipped, the next start replays the journal: %s", exc)
        finally:
            self._flusher.close()
            self._reader.close()

    def abort(self) -> None:
        """Stop the threads at once without writing what is queued (as if the process died;
        for tests and fatal errors)."""
        self._journal.abort()
        self._flusher.abort()
        self._reader.close()

    def disk_usage(self) -> tuple[int, int]:
        """``(total, free)`` bytes of the ledger directories' filesystems (each counted
        once)."""
        return self._disk.usage()

    def check_disk(self) -> DiskState:
        """Check the free space of every filesystem holding a directory of the engine now
        (its owner calls this periodically, to see space taken or freed by others); returns
        the disk state."""
        return self._disk.check()

    @property
    def disk_state(self) -> DiskState:
        """WRITABLE, FULL (the bookie should be read-only) or NO_ROOM (writes refused)."""
        return self._disk.state

    @property
    def room_for_high_priority(self) -> bool:
        """Whether recovery and high-priority adds may still be taken on a full disk."""
        return self._disk.room_for_high_priority

    def readings(self) -> StorageReadings:
        """What the metrics read when collected: one short hold of the lock, one statvfs
        per filesystem (each directory is reported, with its filesystem's figures)."""
        engine = self._engine
        with engine.lock:
            cache = engine.write_cache
            write_cache_bytes = cache.active_bytes + cache.flushing_bytes
            added_bytes = cache.taken_bytes + cache.active_bytes
            queued = self._journal.queued_records
            states = list(engine.ledgers.values())  # counted outside the lock: adds go on
        index_entries = sum(len(state.locations) for state in states)
        logs, log_bytes = self._registry.totals()
        disks: list[tuple[str, int, int]] = []
        for space in self._disk.spaces:
            total, free = self._fs.disk_usage(space.path)
            disks.extend((path, total, free) for path in self._disk.dirs_of(space))
        return StorageReadings(
            write_cache_bytes=write_cache_bytes,
            added_bytes=added_bytes,
            journal_queue_records=queued,
            ledgers=len(states),
            index_entries=index_entries,
            entry_logs=logs,
            entry_log_bytes=log_bytes,
            disks=tuple(disks),
        )

    def stats(self) -> StorageStats:
        engine = self._engine
        with engine.lock:
            cache = engine.write_cache
            return StorageStats(
                ledgers=len(engine.ledgers),
                journal_groups_written=self._journal.groups_written,
                journal_groups_cut=dict(self._journal.groups_cut),
                journal_file_id=self._journal.file_id,
                write_cache_bytes=cache.active_bytes + cache.flushing_bytes,
                read_cache_bytes=engine.read_cache.size_bytes,
                checkpoints=self._flusher.checkpoints,
                limbo=engine.limbo,
                limbo_ledgers=sum(1 for state in engine.ledgers.values() if state.limbo),
                disk_state=self._disk.state,
                disk_checks=self._disk.checks,
            )
