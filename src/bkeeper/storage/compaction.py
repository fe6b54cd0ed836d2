"""Garbage collection and compaction of entry logs (the shell around :mod:`.garbage`).

A pass (:meth:`Compactor.collect`, blocking, one at a time) plans from the ledgers maps
(:mod:`bkeeper.storage.ledgers_map`), then:

* **removes** each log with no live bytes, after a checkpoint has persisted the deletions of
  its ledgers (so the index on disk points into it no more);
* **compacts** each log L below the threshold, in steps that keep every acknowledged entry
  readable whenever the process dies:

  1. copy L's live records (those the in-memory index points at) to ``<C>.compacting``, a
     new log whose ledgers map names L as its source; fdatasync it (map included);
  2. rename it to ``<C>.log`` and fsync the directory: the copy is committed;
  3. point the index at C for every entry it still points at in L (compare and set under
     the engine lock, entry by entry, so a newer add or a deletion meanwhile wins);
  4. checkpoint: the index on disk points at C;
  5. remove L and fsync the directory.

  A crash before 2 leaves a ``.compacting`` file, removed as debris at the next open; after
  2, the next open finds C naming L while L still exists and finishes 3-5 itself
  (:func:`finish_interrupted`). Before 4, a log the index still points into is not removed:
  a damaged record ends the scan (its length cannot be trusted), so the live records past it
  were not copied; the log is kept and left alone by later passes of the process (an error
  says so; reads find the damaged entry and the integrity check repairs it). Reads that
  looked a location up in L just before L went retry the lookup (the engine does that on
  ``FileNotFoundError``).

Copies are throttled to ``compaction_rate_bytes_per_s`` (0: no fixed rate), and a pass
works at most ``compaction_time_share`` of the time (a pause after each chunk, as long as the
chunk took at the default 0.5), so that requests do not wait behind it for the GIL or for the
disk; the index swap lets threads waiting for the engine lock in between its chunks.
On a full disk a copy that does not fit is abandoned (its ``.compacting`` file removed) and
the pass ends, having removed what it could first.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from array import array
from collections.abc import Callable

from bkeeper.common.clock import Clock, default_clock
from bkeeper.common.errors import DiskFullError
from bkeeper.common.threads import OS_THREADS, Event, Threads
from bkeeper.storage.compaction_pacing import CompactionThrottle, on_a_lower_priority_thread
from bkeeper.storage.config import StorageConfig
from bkeeper.storage.dirs import LedgerDirs
from bkeeper.storage.disk_space import DiskState
from bkeeper.storage.engine import EngineState, let_waiters_in
from bkeeper.storage.entry_log import (
    EntryLogReader,
    EntryLogWriter,
    LogIds,
    location_of,
)
from bkeeper.storage.filesystem import FileSystem, numbered_file_number, remove_gently
from bkeeper.storage.flusher import Flusher
from bkeeper.storage.garbage import EntryLogUsage, GcPlan, GcResult, plan_collection
from bkeeper.storage.index_file import LocationRun
from bkeeper.storage.ledger_state import StoredLedger
from bkeeper.storage.ledgers_map import EntryLogRegistry, ScannedChunk, scan_chunks, scan_entry_log

__all__ = ["COMPACTING_SUFFIX", "Compactor", "Moves", "finish_interrupted", "swap"]

log = logging.getLogger(__name__)

COMPACTING_SUFFIX = ".compacting"
#: The copy is fdatasynced every this many bytes: one large fdatasync at the end would hold
#: up the journal's on the same disk (as a large flush would). Measured on this machine's
#: disk, a journal's fdatasync p99 while another thread writes flat out: 20 ms with syncs of
#: 4 MiB, 8.6 ms with syncs of 1 MiB, 1.1 ms with syncs of 1 MiB and a pause as long as each
#: sync took (docs/benchmarks.md).
_SYNC_BYTES = 1024 * 1024
#: While a pass runs, Python switches threads at least this often (the default is 5 ms):
#: the pass's thread works in Python between its reads and writes, and the server's event
#: loop must not wait long for its turn.
_SWITCH_INTERVAL_S = 0.0005
#: Index entries are swapped to the copy this many at a time under the engine lock (which
#: every add takes): about 1 ms of holding it.
_CHUNK_ENTRIES = 256


class Moves:
    """Entries to move in the index, from ``old`` to ``new`` locations: parallel arrays."""

    def __init__(self) -> None:
        self.ledger_ids: array[int] = array("q")
        self.entry_ids: array[int] = array("q")
        self.old: array[int] = array("Q")
        self.new: array[int] = array("Q")

    def add(self, ledger_id: int, entry_id: int, old: int, new: int) -> None:
        self.ledger_ids.append(ledger_id)
        self.entry_ids.append(entry_id)
        self.old.append(old)
        self.new.append(new)

    def __len__(self) -> int:
        return len(self.new)


class Compactor:
    """Runs garbage-collection passes over the engine's entry logs."""

    def __init__(
        self,
        fs: FileSystem,
        dirs: LedgerDirs,
        config: StorageConfig,
        engine: EngineState,
        flusher: Flusher,
        registry: EntryLogRegistry,
        reader: EntryLogReader,
        log_ids: LogIds,
        checkpoint: Callable[[], None],
        clock: Clock | None = None,
        threads: Threads | None = None,
    ) -> None:
        """``dirs`` says where each log is, where a copy goes, and how full the ledger
        directories are; ``checkpoint`` is the engine's (which also rolls large journal
        files, so that a pass after mass deletions frees journal space too); ``clock`` times
        passes and throttles copying; ``threads`` runs passes (the OS's by default)."""
        self._clock: Clock = clock if clock is not None else default_clock()
        self._threads: Threads = threads if threads is not None else OS_THREADS
        self._fs = fs
        self._dirs = dirs
        self._config = config
        self._engine = engine
        self._flusher = flusher
        self._registry = registry
        self._reader = reader
        self._log_ids = log_ids
        self._checkpoint = checkpoint
        self._pass_lock = threading.Lock()
        #: Logs whose copy is committed and indexed but not yet checkpointed (a checkpoint
        #: failed for lack of space): removed after the next checkpoint that succeeds.
        self._removable: list[int] = []
        #: Logs a compaction could not copy whole (a damaged record stopped its scan, and
        #: live entries lie past it): kept, and not compacted again by this process.
        self._kept: set[int] = set()

    def remove_logs(self, log_ids: list[int]) -> None:
        """Remove logs the index on disk no longer points into (after a checkpoint)."""
        for log_id in log_ids:
            self._remove(log_id)

    def usage(self) -> list[EntryLogUsage]:
        engine = self._engine
        metas = self._registry.snapshot()
        with engine.lock:
            ledgers = engine.ledgers
            return [EntryLogUsage(m.log_id, m.total_bytes, m.live_bytes(ledgers)) for m in metas]

    def collect(self, *, minor: bool, major: bool, stop: Event | None = None) -> GcResult:
        """One pass: see the module docstring."""
        stop = stop if stop is not None else self._threads.event()
        with self._pass_lock:
            started = self._clock.monotonic()
            tally = _Tally()
            error = ""
            switch_interval = sys.getswitchinterval()
            sys.setswitchinterval(min(switch_interval, _SWITCH_INTERVAL_S))
            try:
                on_a_lower_priority_thread(
                    lambda: self._collect(minor, major, stop, tally), self._threads
                )
            except DiskFullError as exc:
                error = str(exc)
                log.warning("garbage collection stopped: %s", exc)
            finally:
                sys.setswitchinterval(switch_interval)
            return GcResult(
                minor=minor,
                major=major,
                logs_removed=tally.removed,
                logs_compacted=tally.compacted,
                bytes_freed=tally.freed - tally.copied,
                bytes_copied=tally.copied,
                entries_copied=tally.entries,
                duration_s=self._clock.monotonic() - started,
                stopped=stop.is_set() or bool(error),
                error=error,
            )

    def _collect(self, minor: bool, major: bool, stop: Event, tally: _Tally) -> None:
        plan = self._plan(minor, major, exclude=frozenset())
        current = self._flusher.current_log_id
        if current in plan.remove or current in plan.compact:
            # The log being written is garbage too (writes stopped after its ledgers were
            # deleted): end it, so that it can go like the others.
            self._flusher.roll_log()
        plan = self._plan(minor, major, exclude=frozenset({self._flusher.current_log_id}))
        if not plan.remove and not plan.compact and not self._removable:
            return
        # The deletions that emptied these logs reach the index file first.
        self._checkpoint()
        for log_id in [*self._removable, *plan.remove]:
            if self._closed(log_id):
                tally.freed += self._remove(log_id)
                tally.removed += 1
        self._removable.clear()
        for log_id in plan.compact:
            if stop.is_set():
                break
            if self._closed(log_id) and log_id not in self._kept:
                self._compact(log_id, stop, tally)
        # The first checkpoint had large journal files start new ones: this one drops them,
        # so that what the deletions freed in the journals goes now, not a checkpoint later.
        self._checkpoint()

    def _closed(self, log_id: int) -> bool:
        """Whether nothing will be appended to the log again: it is not the one being
        written (a log that is not current now never becomes current: new logs take new
        ids)."""
        return log_id != self._flusher.current_log_id

    def _plan(self, minor: bool, major: bool, exclude: frozenset[int]) -> GcPlan:
        config = self._config
        return plan_collection(
            self.usage(),
            exclude=exclude,
            minor_threshold=config.minor_compaction_threshold if minor else None,
            major_threshold=config.major_compaction_threshold if major else None,
            disk_full=self._dirs.state is not DiskState.WRITABLE,
        )

    # -- one log ---------------------------------------------------------------------------
    def _compact(self, log_id: int, stop: Event, tally: _Tally) -> None:
        writer = EntryLogWriter(
            self._fs,
            self._dirs,
            self._log_ids,
            self._config.entry_log_bytes_max,
            suffix=COMPACTING_SUFFIX,
            sources=(log_id,),
        )
        started = self._clock.monotonic()
        copied = Moves()
        copied_bytes = 0
        partial: str | None = None  # the copy's path, once it exists
        unsynced = 0
        throttle = CompactionThrottle(
            self._config.compaction_rate_bytes_per_s,
            self._config.compaction_time_share,
            stop,
            self._clock,
        )
        try:
            chunk_from = self._clock.monotonic()
            for chunk in scan_chunks(self._fs, self._dirs.log_path(log_id)):
                if stop.is_set():
                    writer.abandon()
                    self._remove_partial(partial)
                    return
                size = self._copy_live(log_id, chunk, writer, copied)
                if size:
                    partial = writer.current_path
                    tally.copied += size
                    copied_bytes += size
                    unsynced += size
                if unsynced >= _SYNC_BYTES:
                    writer.sync()  # small fdatasyncs: the journal's are not held up behind one
                    unsynced = 0
                throttle.spent(size, self._clock.monotonic() - chunk_from)
                chunk_from = self._clock.monotonic()
            new_id = writer.current_log_id
            writer.close()
        except OSError as exc:
            writer.abandon()
            self._remove_partial(partial)
            directory = os.path.dirname(partial) if partial is not None else None
            if self._dirs.explains(exc, directory):
                self._dirs.report_no_space(directory)
                raise DiskFullError(f"no space left to compact entry log {log_id}: {exc}") from exc
            raise
        copied_at = self._clock.monotonic()
        if new_id >= 0:
            assert partial is not None
            self._commit(writer, partial, new_id)
            swap(self._engine, copied)
            tally.entries += len(copied)
        swapped_at = self._clock.monotonic()
        meta = self._registry.get(log_id)
        left = _entries_left_in(self._engine, log_id, [] if meta is None else list(meta.ledgers))
        if left:
            # The scan ends at a damaged record (it cannot trust its length); what lies past
            # it was not copied and must not go with the log. Reads find the damaged entry
            # (and the integrity check repairs it); the rest stays readable where it is.
            self._kept.add(log_id)
            log.error(
                "entry log %d not compacted: a damaged record stopped its scan, and %d live "
                "entries lie past it; the log is kept (%d entries copied before it)",
                log_id,
                left,
                len(copied),
            )
            return
        try:
            self._checkpoint()
        except DiskFullError:
            self._removable.append(log_id)  # the next pass removes it after its checkpoint
            raise
        checkpointed_at = self._clock.monotonic()
        freed = self._remove(log_id)
        tally.freed += freed
        tally.compacted += 1
        log.info(
            "entry log %d compacted into %s: %d entries, %d bytes copied, %d bytes freed; "
            "copy %.3f s, index %.3f s, checkpoint %.3f s, removal %.3f s",
            log_id,
            new_id if new_id >= 0 else "nothing",
            len(copied),
            copied_bytes,
            freed,
            copied_at - started,
            swapped_at - copied_at,
            checkpointed_at - swapped_at,
            self._clock.monotonic() - checkpointed_at,
        )

    def _copy_live(
        self, log_id: int, chunk: ScannedChunk, writer: EntryLogWriter, copied: Moves
    ) -> int:
        """Copy the records of ``chunk`` the index points at, each run of adjacent ones as
        one slice of bytes (no re-encoding); note where each went. Returns the bytes copied."""
        engine = self._engine
        base_location = location_of(log_id, 0)
        live: list[tuple[int, int, int, int]] = []
        with engine.lock:
            ledgers = engine.ledgers
            for record in chunk.records:
                state = ledgers.get(record[2])
                if (
                    state is not None
                    and state.locations.get(record[3]) == base_location + record[0]
                ):
                    live.append(record)
        view, base = memoryview(chunk.data), chunk.base
        copied_bytes = 0
        at = 0
        while at < len(live):
            run_start = run_end = live[at][0]
            end = at
            sizes: dict[int, int] = {}
            while end < len(live) and live[end][0] == run_end:
                _, length, ledger_id, _ = live[end]
                run_end += 8 + length
                sizes[ledger_id] = sizes.get(ledger_id, 0) + 8 + length
                end += 1
            new_offset = writer.append_raw(view[run_start - base : run_end - base], sizes)
            shift = location_of(writer.current_log_id, new_offset) - run_start
            for offset, _, ledger_id, entry_id in live[at:end]:
                copied.add(ledger_id, entry_id, base_location + offset, shift + offset)
            copied_bytes += run_end - run_start
            at = end
        return copied_bytes

    def _commit(self, writer: EntryLogWriter, partial: str, new_id: int) -> None:
        target = self._dirs.log_path(new_id)
        self._fs.rename(partial, target)
        self._fs.fsync_dir(os.path.dirname(target))
        self._registry.put(writer.meta)

    def _remove(self, log_id: int) -> int:
        """Remove a log nothing points into any more, gently (a large file freed at once
        stalls every fsync on the disk); reads that raced the removal look up again."""
        path = self._dirs.log_path(log_id)
        self._reader.forget(log_id)
        config = self._config
        size = remove_gently(
            self._fs,
            path,
            config.journal_remove_step_bytes,
            config.journal_remove_pause_ms / 1000.0,
        )
        self._fs.fsync_dir(os.path.dirname(path))
        self._dirs.forget(log_id)
        self._registry.remove(log_id)
        return size

    def _remove_partial(self, path: str | None) -> None:
        """Remove an abandoned copy (and its record in the dirs)."""
        if path is None:
            return
        log_id = numbered_file_number(os.path.basename(path), COMPACTING_SUFFIX)
        if self._fs.exists(path):
            self._fs.remove(path)
            self._fs.fsync_dir(os.path.dirname(path))
        if log_id is not None:
            self._dirs.forget(log_id)


def swap(engine: EngineState, moves: Moves) -> int:
    """Point the index at ``new`` for each entry it still points at ``old`` (compare and
    set, under the lock a chunk at a time); the changes join the next checkpoint. Returns
    how many moved. Entries come grouped by ledger (as a log holds them): the ledger is
    looked up once per group, and each group's changes make one location run."""
    ledger_ids, entry_ids, old, new = moves.ledger_ids, moves.entry_ids, moves.old, moves.new
    moved = 0
    for start in range(0, len(new), _CHUNK_ENTRIES):
        runs: list[tuple[StoredLedger, LocationRun]] = []
        with engine.lock:
            ledgers = engine.ledgers
            current = -1
            state: StoredLedger | None = None
            for i in range(start, min(start + _CHUNK_ENTRIES, len(new))):
                ledger_id = ledger_ids[i]
                if ledger_id != current:
                    current = ledger_id
                    state = ledgers.get(ledger_id)
                    if state is not None:
                        get, put = state.locations.get, state.locations.set
                        run = LocationRun(ledger_id, array("q"), array("Q"))
                        runs.append((state, run))
                if state is None:
                    continue
                entry_id = entry_ids[i]
                if get(entry_id) != old[i]:
                    continue
                put(entry_id, new[i])
                run.entry_ids.append(entry_id)
                run.locations.append(new[i])
            engine.pending.runs.extend(item for item in runs if item[1].entry_ids)
        moved += sum(len(run.entry_ids) for _, run in runs)
        if start + _CHUNK_ENTRIES < len(new):
            let_waiters_in()  # between chunks: the lock is not fair
    return moved


def finish_interrupted(
    fs: FileSystem, dirs: LedgerDirs, engine: EngineState, registry: EntryLogRegistry
) -> list[int]:
    """At open, after replay: for each committed compaction log whose source logs still
    exist, point the index at its copies (step 3). Returns the source logs to remove once
    the checkpoint that ends the open has persisted that (steps 4-5)."""
    present = set(dirs.log_ids())
    sources: list[int] = []
    for meta in registry.snapshot():
        left = [s for s in meta.sources if s in present]
        if not left:
            continue
        moves = Moves()
        by_key = _locations_in(engine, left)
        for record in scan_entry_log(fs, dirs.log_path(meta.log_id)):
            previous = by_key.get((record.ledger_id, record.entry_id))
            if previous is not None:
                location = location_of(meta.log_id, record.offset)
                moves.add(record.ledger_id, record.entry_id, previous, location)
        moved = swap(engine, moves)
        log.info(
            "finishing the compaction of entry logs %s into %s: %d entries moved",
            left,
            meta.log_id,
            moved,
        )
        still = _locations_in(engine, left)
        for source in left:
            behind = sum(1 for _ledger, location in still.items() if location >> 32 == source)
            if behind:  # not all copied (a damaged record stopped the copy): keep it
                log.error(
                    "entry log %d kept: %d live entries in it were not copied to %d",
                    source,
                    behind,
                    meta.log_id,
                )
            else:
                sources.append(source)
    return sources


def _entries_left_in(engine: EngineState, log_id: int, ledger_ids: list[int]) -> int:
    """How many entries of ``ledger_ids`` the index still points at in ``log_id`` (the lock
    taken per ledger)."""
    left = 0
    for ledger_id in ledger_ids:
        with engine.lock:
            state = engine.ledgers.get(ledger_id)
            if state is not None:
                left += sum(
                    1 for _, location in state.locations.items() if location >> 32 == log_id
                )
    return left


def _locations_in(engine: EngineState, log_ids: list[int]) -> dict[tuple[int, int], int]:
    wanted = set(log_ids)
    found: dict[tuple[int, int], int] = {}
    with engine.lock:
        for state in engine.ledgers.values():
            for entry_id, location in state.locations.items():
                if location >> 32 in wanted:
                    found[(state.ledger_id, entry_id)] = location
    return found


class _Tally:
    def __init__(self) -> None:
        self.removed = 0
        self.compacted = 0
        self.freed = 0
        self.copied = 0
        self.entries = 0
