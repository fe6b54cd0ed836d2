"""Flushes and checkpoints: write cache -> entry logs -> location index -> checkpoint file.

A *flush* swaps the active write cache out (under the lock), appends its entries sorted by
(ledger, entry) to the current entry log with one write, fdatasyncs it, then (under the lock,
in short chunks) records their locations in the in-memory index, moves the bodies to the
read cache and drops the flushed batch. The owned flusher thread runs one whenever the write
cache holds ``write_cache_flush_bytes``; one flush runs at a time (``_flush_lock``).

A *checkpoint* (blocking, on the caller's thread) makes a restart cheap and lets old journal
files go:

1. read the journal marks M (one per journal, at one instant): every record before M was
   queued before now, so its effect is in the write cache or already flushed;
2. flush (so every entry before M is in a synced entry log);
3. take the changes collected since the previous checkpoint (deleted ledgers, ledgers whose
   persisted fields changed, location runs) and append them to the index file, fdatasync;
4. atomically replace the checkpoint file with (M, index generation, index length, limbo);
5. delete journal files wholly before M (after the flush lock is released, large ones cut
   down in steps first, so that no single filesystem transaction frees hundreds of MiB).

The index file may hold effects of records after M (taken in step 3); replaying those
records again is idempotent, so that is harmless. If a step fails, the taken changes are put
back for the next checkpoint and the index file is cut back to its last committed length
(a new index generation or checkpoint temp file is removed).

No room (see :mod:`bkeeper.storage.disk_space`): a flush that fails for lack of space cuts
the entry log back to what was synced and keeps its batch in the write cache (still
readable); the next flush writes that batch first. The flusher thread then waits until the
disk has room again and retries. A checkpoint that fails so raises ``DiskFullError``.
"""

from __future__ import annotations

import logging
import threading
from array import array
from collections.abc import Callable

from bkeeper.common.errors import DiskFullError, StorageError
from bkeeper.common.threads import OS_THREADS, Threads
from bkeeper.storage.checkpoint_file import CheckpointRecord, JournalMark, write_checkpoint
from bkeeper.storage.config import StorageConfig
from bkeeper.storage.dirs import LedgerDirs, StorageLayout
from bkeeper.storage.disk_space import DiskState
from bkeeper.storage.engine import EngineState, PendingCheckpoint, let_waiters_in
from bkeeper.storage.entry_log import EntryLogWriter, LogIds
from bkeeper.storage.filesystem import FileSystem, WritableFile, remove_gently
from bkeeper.storage.index_file import (
    INDEX_HEADER_BYTES,
    IndexDelta,
    LocationRun,
    encode_delta,
    encode_index_header,
)
from bkeeper.storage.journal_set import journal_files_before
from bkeeper.storage.ledger_state import StoredLedger
from bkeeper.storage.ledgers_map import EntryLogRegistry
from bkeeper.storage.metrics import FlushMetrics

__all__ = ["Flusher", "StorageLayout", "live_index_bytes"]

log = logging.getLogger(__name__)


#: A new index generation is written and fdatasynced this many bytes at a time.
_INDEX_SYNC_BYTES = 4 * 1024 * 1024
#: Flushed entries are indexed under the lock this many at a time, so that the caller's
#: thread never waits long for the lock.
_APPLY_CHUNK_ENTRIES = 2048
#: A ledger's entries in one flush: its state, entry ids ascending, their bodies.
_Run = tuple[StoredLedger, list[int], list[bytes]]


class Flusher:
    """Owns the entry log writer, the index file, the flusher thread and checkpoints."""

    def __init__(
        self,
        fs: FileSystem,
        layout: StorageLayout,
        config: StorageConfig,
        engine: EngineState,
        log_ids: LogIds,
        index: tuple[int, int],
        disk: LedgerDirs | None = None,
        registry: EntryLogRegistry | None = None,
        threads: Threads | None = None,
    ) -> None:
        """``threads`` makes the flusher's thread and its wait for room (the OS's by default;
        the one the engine's ``flush_wanted`` came from)."""
        threads = threads if threads is not None else OS_THREADS
        self._fs = fs
        self._disk = disk
        self._layout = layout
        self._config = config
        self._engine = engine
        where = disk if disk is not None else layout.ledgers
        self._writer = EntryLogWriter(fs, where, log_ids, config.entry_log_bytes_max, registry)
        self._flush_lock = threading.Lock()
        self._journal_removal_lock = threading.Lock()
        #: Files a ``defer_removal`` checkpoint retired, for the thread to remove (engine lock).
        self._removals: list[str] = []
        self._index_generation, self._index_bytes = index
        self._index_file: WritableFile | None = None
        self._journal_marks: Callable[[], tuple[JournalMark, ...]] = tuple
        self._on_failure: Callable[[BaseException], None] = lambda exc: None
        self._stopping = False
        self._old_index: str | None = None
        self._thread = threads.thread(self._run, "bkeeper-flusher")
        self._room = threads.event()  # set while the disk has room (or when stopping)
        self._room.set()
        self.checkpoints = 0
        #: Set by the storage's owner when it keeps metrics (flush time and bytes, per flush).
        self.metrics: FlushMetrics | None = None
        if disk is not None:
            disk.add_listener(self._on_disk_state)
            self._on_disk_state(disk.state)

    def _on_disk_state(self, state: DiskState) -> None:
        if state is DiskState.NO_ROOM:
            self._room.clear()
        else:
            self._room.set()

    def start(
        self,
        journal_marks: Callable[[], tuple[JournalMark, ...]],
        on_failure: Callable[[BaseException], None],
    ) -> None:
        self._journal_marks = journal_marks
        self._on_failure = on_failure
        self._thread.start()

    @property
    def current_log_id(self) -> int:
        """The entry log being written (-1: none open); never collected."""
        return self._writer.current_log_id

    def roll_log(self) -> None:
        """End the current entry log (it gets its ledgers map); the next flush starts a new
        one. Garbage collection does this when the log being written is itself garbage."""
        with self._flush_lock:
            self._writer.close()

    # -- flush -------------------------------------------------------------------------
    def flush(self) -> None:
        """Write everything in the write cache to entry logs (blocking)."""
        with self._flush_lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        metrics = self.metrics
        if metrics is None:
            self._flush_batches_locked()
            return
        started, written = metrics.clock.monotonic(), self._writer.bytes_written
        self._flush_batches_locked()
        metrics.flush_latency.observe(metrics.clock.monotonic() - started)
        metrics.flush_bytes.value += self._writer.bytes_written - written

    def _flush_batches_locked(self) -> None:
        engine = self._engine
        with engine.lock:
            left = bool(engine.write_cache.flushing) or engine.write_cache.flushing_bytes > 0
        if left:
            self._write_batch(swap=False)  # the batch of a flush that failed for lack of space
        self._write_batch(swap=True)

    def _write_batch(self, swap: bool) -> None:
        """Write the flushing batch (swapped in from the active map first if ``swap``) to
        the entry log, sync, index it and drop it from the write cache."""
        engine = self._engine
        with engine.lock:
            if swap:
                engine.write_cache.swap(engine.ledgers)
            work = list(engine.write_cache.flushing.values())
        work.sort(key=lambda item: item[0].ledger_id)
        # One run per ledger (its entries in id order): written, indexed and cached per run,
        # with no object per entry.
        runs: list[_Run] = []
        for state, entries in work:
            ids = sorted(entries)
            runs.append((state, ids, [entries[i] for i in ids]))
        try:
            locations = self._writer.append_runs([(s.ledger_id, bodies) for s, _, bodies in runs])
            self._writer.sync()
        except Exception as exc:
            error = self._write_failed(exc)
            if error is exc:
                raise
            raise error from exc
        self._apply_flush(runs, locations)  # the writer told each directory its bytes

    def _write_failed(self, exc: Exception) -> Exception:
        """Cut the entry log back after a failed write: DiskFullError when the disk has no
        room (the batch stays for the next flush), else the failure itself."""
        try:
            self._writer.discard_unsynced()
            no_room = self._disk is not None and self._disk.explains(exc)
        except Exception as repair:
            log.error("entry log write failed (%s) and could not be cut back: %s", exc, repair)
            return StorageError(f"entry log write failed and could not be cut back: {repair}")
        if not no_room:
            return exc
        assert self._disk is not None
        self._disk.report_no_space()
        return DiskFullError(
            f"no space left on the data disk for the entry log ({exc}): the write cache keeps "
            "its entries until space is freed"
        )

    def _apply_flush(self, runs: list[_Run], locations: list[list[int]]) -> None:
        """Index the runs just written and move them to the read cache, at most
        ``_APPLY_CHUNK_ENTRIES`` entries per hold of the lock."""
        engine = self._engine
        index_runs: list[tuple[StoredLedger, LocationRun]] = []
        chunk = _APPLY_CHUNK_ENTRIES
        held = 0
        for (state, ids, bodies), places in zip(runs, locations, strict=True):
            for start in range(0, len(ids), chunk):
                if held:
                    let_waiters_in()  # between chunks: the lock is not fair
                end = start + chunk
                chunk_ids = ids[start:end]
                with engine.lock:
                    if not state.deleted:
                        state.locations.set_many(chunk_ids, places[start:end])
                        engine.read_cache.put_run(state.ledger_id, chunk_ids, bodies[start:end])
                held += 1
            run = LocationRun(state.ledger_id, array("q", ids), array("Q", places))
            index_runs.append((state, run))
        with engine.lock:
            engine.pending.runs.extend(index_runs)
            engine.write_cache.finish_flush()

    # -- checkpoint --------------------------------------------------------------------
    def checkpoint(
        self, full: bool = False, *, clean: bool = False, defer_removal: bool = False
    ) -> tuple[JournalMark, ...]:
        """Flush, persist the index and the journal marks; see the module docstring.

        ``full`` writes the whole index as a new generation; so does any checkpoint once the
        index file is over ``index_compaction_bytes_min`` and twice its live content (ledger
        deletions and compaction leave it growing by deltas). ``clean``: the last checkpoint
        of a clean stop, once every journal is closed (:mod:`bkeeper.storage.checkpoint_file`).
        ``defer_removal``: the files it retires are removed by the flusher's thread, after
        the call returns (the checkpoint that ends an open: the bookie serves meanwhile).
        Returns the marks persisted.
        """
        engine = self._engine
        with self._flush_lock:
            if self._stopping:
                raise StorageError("storage is closed: no checkpoint")
            with engine.lock:
                marks = self._journal_marks()
            self._flush_locked()
            self._roll_large_log()
            with engine.lock:
                pending = engine.take_pending_locked()
                states = list(engine.ledgers.values())
                limbo = engine.limbo
            full = full or self._index_wants_snapshot(states)
            try:
                delta = _snapshot(engine, states) if full else _delta(pending)
                self._persist(delta, marks, limbo, full, clean)
            except BaseException as exc:
                with engine.lock:
                    engine.restore_pending_locked(pending)
                home = self._layout.ledgers  # the index and the checkpoint file
                if self._disk is not None and self._disk.explains(exc, home):
                    self._disk.report_no_space(home)
                    raise DiskFullError(
                        f"no space left on the data disk for the checkpoint ({exc})"
                    ) from exc
                raise
            self.checkpoints += 1
            old_files = self._old_index_and_journals(marks)
        if defer_removal and old_files:
            with self._engine.lock:
                self._removals.extend(old_files)
            self._engine.flush_wanted.set()  # wakes the thread, which removes them
        else:
            self._remove_gently(old_files)
        return marks

    def _roll_large_log(self) -> None:
        """End the log being written once it holds ``entry_log_checkpoint_roll_bytes`` (its
        ledgers map written): a crash leaves only the log written since without a map, and
        the next open reads that one whole (a log of 1 GiB took seconds)."""
        limit = self._config.entry_log_checkpoint_roll_bytes
        path = self._writer.current_path
        if limit > 0 and path is not None and self._fs.size(path) >= limit:
            self._writer.close()

    def _index_wants_snapshot(self, states: list[StoredLedger]) -> bool:
        size = self._index_bytes
        return size > self._config.index_compaction_bytes_min and size > 2 * live_index_bytes(
            states
        )

    def _persist(
        self,
        delta: IndexDelta,
        marks: tuple[JournalMark, ...],
        limbo: bool,
        full: bool,
        clean: bool = False,
    ) -> None:
        data = encode_delta(delta)
        if full or self._index_file is None:
            self._start_index_generation(data)
        elif data:
            self._append_index(data)
        layout = self._layout
        generation, size = self._index_generation, self._index_bytes
        record = CheckpointRecord(marks, generation, size, limbo, layout.ledger_keys, clean)
        write_checkpoint(self._fs, self._layout.checkpoint, record)

    def _start_index_generation(self, data: bytes) -> None:
        old_generation = self._index_generation
        generation = old_generation + 1
        path = self._layout.index(generation)
        if self._fs.exists(path):
            self._fs.remove(path)
        file = self._fs.open_append(path)
        try:
            file.write(encode_index_header(generation))
            for at in range(0, len(data), _INDEX_SYNC_BYTES):  # no one large fdatasync
                file.write(data[at : at + _INDEX_SYNC_BYTES])
                file.sync()
            file.sync()
            self._fs.fsync_dir(self._layout.ledgers)
        except BaseException:
            file.close()
            self._fs.remove(path)
            self._fs.fsync_dir(self._layout.ledgers)
            raise
        if self._index_file is not None:
            self._index_file.close()
        self._index_file = file
        self._index_generation = generation
        self._index_bytes = INDEX_HEADER_BYTES + len(data)
        self._old_index = self._layout.index(old_generation) if old_generation else None

    def _append_index(self, data: bytes) -> None:
        file = self._index_file
        assert file is not None
        try:
            file.write(data)
            file.sync()
        except BaseException:
            file.close()
            path = self._layout.index(self._index_generation)
            self._fs.truncate(path, self._index_bytes)
            self._index_file = self._fs.open_append(path)
            raise
        self._index_bytes += len(data)

    def open_index(self) -> None:
        """Continue the committed index file, cutting debris after its committed length."""
        path = self._layout.index(self._index_generation)
        if self._fs.size(path) > self._index_bytes:
            self._fs.truncate(path, self._index_bytes)
        self._index_file = self._fs.open_append(path)

    def _old_index_and_journals(self, marks: tuple[JournalMark, ...]) -> list[str]:
        """The index generation the checkpoint replaced (if any) and the journal files
        wholly before their journal's mark, which no replay reads any more: to be removed."""
        old: list[str] = []
        if self._old_index is not None:
            old.append(self._old_index)
            self._old_index = None
        return old + journal_files_before(self._fs, self._layout, marks)

    def _remove_gently(self, paths: list[str]) -> None:
        """Remove old journal files and the replaced index generation outside the flush
        lock, gently (see
        :func:`~bkeeper.storage.filesystem.remove_gently`)."""
        step = self._config.journal_remove_step_bytes
        pause_s = self._config.journal_remove_pause_ms / 1000.0
        with self._journal_removal_lock:
            for path in paths:
                remove_gently(self._fs, path, step, pause_s, lambda: self._stopping)

    def _remove_deferred(self) -> None:
        """The flusher thread: remove what a ``defer_removal`` checkpoint retired."""
        with self._engine.lock:
            paths, self._removals = self._removals, []
        if not paths:
            return
        try:
            self._remove_gently(paths)
        except OSError as exc:  # not the flusher's failure: the files stay before the marks
            log.warning("old files not removed now (a later checkpoint or start will): %s", exc)

    # -- thread ------------------------------------------------------------------------
    def _run(self) -> None:
        wanted = self._engine.flush_wanted
        while True:
            wanted.wait()
            if self._stopping:
                return
            wanted.clear()
            try:
                self._remove_deferred()
                self.flush()
            except DiskFullError as exc:
                log.warning("flush deferred until the data disk has room: %s", exc)
                self._room.wait()
                wanted.set()
            except Exception as exc:
                log.exception("background flush failed; storage stops accepting writes")
                self._on_failure(exc)
                return

    def close(self) -> None:
        """Stop the flusher thread and close files (the caller checkpoints first). A
        checkpoint running on another thread finishes first; later ones fail."""
        self._stop_thread()
        with self._flush_lock:
            self._writer.close()
            self._close_index()

    def abort(self) -> None:
        """Stop the flusher thread and drop file handles without syncing anything."""
        self._stop_thread()
        with self._flush_lock:
            self._writer.abandon()
            self._close_index()

    def _stop_thread(self) -> None:
        self._stopping = True
        self._engine.flush_wanted.set()
        self._room.set()
        if self._thread.is_alive() and not self._thread.is_current():
            self._thread.join()

    def _close_index(self) -> None:
        if self._index_file is not None:
            self._index_file.close()
            self._index_file = None


def _delta(pending: PendingCheckpoint) -> IndexDelta:
    """The changes since the last checkpoint."""
    return IndexDelta(
        tuple(pending.deleted),
        tuple(s.snapshot() for s in pending.dirty),
        tuple(run for state, run in pending.runs if not state.deleted),
    )


def _snapshot(engine: EngineState, states: list[StoredLedger]) -> IndexDelta:
    """Every ledger of ``states`` as it is now, each copied under the lock on its own (so
    the lock is never held for the whole index), read outside it. A change made meanwhile
    may or may not be in it: it is in the changes the next checkpoint appends too, and
    applying one twice is harmless."""
    snapshots = []
    runs = []
    for state in sorted(states, key=lambda s: s.ledger_id):
        with engine.lock:
            if state.deleted:
                continue
            snapshot = state.snapshot()
            locations = state.locations.copy()
        snapshots.append(snapshot)
        items = list(locations.items())
        if items:
            ids = array("q", (entry_id for entry_id, _ in items))
            places = array("Q", (location for _, location in items))
            runs.append(LocationRun(state.ledger_id, ids, places))
    return IndexDelta((), tuple(snapshots), tuple(runs))


def live_index_bytes(states: list[StoredLedger]) -> int:
    """A rough size of a full index snapshot of ``states``."""
    return sum(64 + 16 * len(s.locations) for s in states)
