"""Opening the engine: load the last checkpoint, then replay the journal on top of it.

Order: make the directories; remove debris (``*.tmp``, index files of other generations);
read the checkpoint file (none: a fresh engine); check that no directory holding data was
dropped from the configuration (:mod:`bkeeper.storage.dirs`,
:mod:`bkeeper.storage.journal_set`); load the index it names, cutting debris after its
committed length; replay every journal from its mark (see
:mod:`bkeeper.storage.journal_replay`), applying each record with the same transitions as
the live calls (:mod:`bkeeper.storage.engine`) and flushing whenever the write cache wants a
flush. The ledgers whose records replay found damaged (skipped, or kept as suspect tail data)
enter limbo, or the whole engine when they cannot be told. The caller then starts the
journal (its next file is created by the first write) and checkpoints at once, which
persists the limbo and lets the replayed journals be deleted.

On a full disk: when a replay flush fails for lack of space, replay goes on with the entries
held in the write cache; only a journal tail larger than ``write_cache_bytes_max`` makes the
open fail (``DiskFullError``). An open that fails removes every file it created (entry logs
of replay flushes, a new index generation), so failed starts do not eat the space freed for
the next one.
"""

from __future__ import annotations

import logging
import os
import struct
from dataclasses import dataclass

from bkeeper.common.clock import Clock, default_clock
from bkeeper.common.errors import DiskFullError
from bkeeper.common.threads import Threads
from bkeeper.storage.checkpoint_file import CheckpointRecord, read_checkpoint
from bkeeper.storage.compaction import COMPACTING_SUFFIX, finish_interrupted
from bkeeper.storage.config import StorageConfig
from bkeeper.storage.dirs import LedgerDirs, StorageLayout, check_ledger_dirs
from bkeeper.storage.engine import EngineState
from bkeeper.storage.entry_log import LogIds
from bkeeper.storage.filesystem import FileSystem
from bkeeper.storage.flusher import Flusher, live_index_bytes
from bkeeper.storage.index_file import index_file_generation, load_index
from bkeeper.storage.journal_format import JournalRecord, RecordKind
from bkeeper.storage.journal_replay import ReplayOutcome, replay_journal_dirs
from bkeeper.storage.journal_set import journal_starts, next_journal_file_id
from bkeeper.storage.ledgers_map import EntryLogRegistry, read_entry_log_meta
from bkeeper.storage.open_report import OpenReport, ReplayProgress, megabytes

__all__ = ["Recovered", "apply_record", "recover", "remove_files_of_failed_open"]

log = logging.getLogger(__name__)

_LAC = struct.Struct(">q")


@dataclass
class Recovered:
    """The engine state rebuilt at open, ready for a journal to be started."""

    engine: EngineState
    flusher: Flusher
    next_journal_file_id: int
    replay: ReplayOutcome
    compact_index: bool
    root: CheckpointRecord | None
    files_before: frozenset[str]
    registry: EntryLogRegistry
    log_ids: LogIds
    #: Source logs of compactions finished by this open: removed once its checkpoint is done.
    compacted_sources: list[int]
    #: The work done: the last stop was clean; entries of the index; logs, and those read
    #: whole (no ledgers map) with their bytes.
    clean_stop: bool = False
    index_entries: int = 0
    entry_logs: int = 0
    entry_logs_scanned: int = 0
    entry_log_bytes_scanned: int = 0

    def report(self, seconds: float) -> OpenReport:
        """What the open did, which took ``seconds``."""
        replay = self.replay
        return OpenReport(
            clean_stop=self.clean_stop,
            index_entries=self.index_entries,
            entry_logs=self.entry_logs,
            entry_logs_scanned=self.entry_logs_scanned,
            entry_log_bytes_scanned=self.entry_log_bytes_scanned,
            journal_files=replay.files,
            journal_bytes=replay.bytes,
            journal_records=replay.records,
            seconds=seconds,
        )


def recover(
    fs: FileSystem,
    config: StorageConfig,
    layout: StorageLayout,
    disk: LedgerDirs | None = None,
    clock: Clock | None = None,
    threads: Threads | None = None,
) -> Recovered:
    layout.makedirs(fs)
    if disk is not None:
        disk.check()
    root = read_checkpoint(fs, layout.checkpoint)
    check_ledger_dirs(fs, layout, root)
    generation = root.index_generation if root is not None else 0
    _remove_debris(fs, layout, generation)
    files_before = _files(fs, layout)
    try:
        clock = clock or default_clock()
        return _recover(fs, config, layout, disk, root, files_before, clock, threads)
    except BaseException:
        remove_files_of_failed_open(fs, layout, root, files_before)
        raise


def _recover(
    fs: FileSystem,
    config: StorageConfig,
    layout: StorageLayout,
    disk: LedgerDirs | None,
    root: CheckpointRecord | None,
    files_before: frozenset[str],
    clock: Clock,
    threads: Threads | None,
) -> Recovered:
    generation = root.index_generation if root is not None else 0
    starts = journal_starts(fs, layout, root)
    if root is not None:
        ledgers = load_index(fs, layout.index(generation), root.index_bytes)
        limbo, index = root.limbo, (generation, root.index_bytes)
    else:
        ledgers, limbo, index = {}, False, (0, 0)
    index_entries = sum(len(state.locations) for state in ledgers.values())
    engine = EngineState(
        ledgers,
        config.write_cache_bytes_max,
        config.read_cache_bytes_max,
        limbo,
        flush_bytes=config.flush_bytes,
        threads=threads,
    )
    dirs = disk if disk is not None else LedgerDirs(fs, layout.ledger_dirs)
    logs = dirs.log_ids()
    registry = EntryLogRegistry()
    scanned: list[int] = []
    for log_id in logs:
        path = dirs.log_path(log_id)
        meta, had_map = read_entry_log_meta(fs, path, log_id)
        registry.put(meta)
        if not had_map:
            scanned.append(fs.size(path))
    log_ids = LogIds(max(logs, default=0) + 1)
    flusher = Flusher(fs, layout, config, engine, log_ids, index, disk, registry, threads)
    if root is not None:
        flusher.open_index()
    flush_blocked: list[DiskFullError] = []

    def apply(record: JournalRecord) -> None:
        apply_record(engine, record)
        cache = engine.write_cache
        if flush_blocked:
            if cache.active_bytes + cache.flushing_bytes > cache.bytes_max:
                raise DiskFullError(
                    "no space left on the data disk to replay the journal: more than "
                    f"write_cache_bytes_max ({cache.bytes_max}) of it cannot be flushed; "
                    "free space and start again"
                ) from flush_blocked[0]
        elif cache.wants_flush():
            try:
                flusher.flush()
            except DiskFullError as exc:
                log.warning("replay goes on in the write cache: %s", exc)
                flush_blocked.append(exc)

    def known(ledger_id: int) -> bool:
        return ledger_id in engine.ledgers

    started = clock.monotonic()
    progress = ReplayProgress(clock.monotonic)
    skip_corrupt = config.journal_skip_corrupt_records
    replay = replay_journal_dirs(fs, starts, skip_corrupt, apply, known, progress)
    if replay.bytes_total:
        log.info(
            "replayed journal: %d records, %s in %.1f s",
            replay.records,
            megabytes(replay.bytes),
            clock.monotonic() - started,
        )
    # A clean stop's checkpoint with records after it: a run that could not checkpoint (a
    # full disk) journaled them, then stopped without a clean stop. Not clean then.
    clean = root is not None and root.clean and not replay.records
    if clean:
        log.info("the last stop was clean: no journal to replay")
    _enter_limbo(engine, replay)
    compacted_sources = finish_interrupted(fs, dirs, engine, registry)
    next_file_id = next_journal_file_id(fs, layout, root, starts)
    compact = index[1] > config.index_compaction_bytes_min and index[1] > 2 * live_index_bytes(
        list(engine.ledgers.values())
    )
    return Recovered(
        engine,
        flusher,
        next_file_id,
        replay,
        compact,
        root,
        files_before,
        registry,
        log_ids,
        compacted_sources,
        clean_stop=clean,
        index_entries=index_entries,
        entry_logs=len(logs),
        entry_logs_scanned=len(scanned),
        entry_log_bytes_scanned=sum(scanned),
    )


def remove_files_of_failed_open(
    fs: FileSystem, layout: StorageLayout, root: CheckpointRecord | None, before: frozenset[str]
) -> None:
    """Remove the files an open created before it failed, unless its checkpoint committed
    (then the checkpoint file names them)."""
    if read_checkpoint(fs, layout.checkpoint) != root:
        return
    for directory in layout.all_dirs:
        created = [n for n in fs.list_dir(directory) if os.path.join(directory, n) not in before]
        for name in created:
            log.info("removing %s, created by the failed open", name)
            fs.remove(os.path.join(directory, name))
        if created:
            fs.fsync_dir(directory)


def _files(fs: FileSystem, layout: StorageLayout) -> frozenset[str]:
    return frozenset(
        os.path.join(directory, name)
        for directory in layout.all_dirs
        for name in fs.list_dir(directory)
    )


def apply_record(engine: EngineState, record: JournalRecord) -> None:
    """Re-apply one journal record with the live transitions."""
    kind = record.kind
    with engine.lock:
        if kind is RecordKind.DELETE_LEDGER:
            engine.delete_locked(record.ledger_id)
            return
        if kind is RecordKind.FORCE_LEDGER:
            return
        state = engine.ledgers.get(record.ledger_id)
        if kind is RecordKind.MASTER_KEY:
            if state is None:
                engine.create_locked(record.ledger_id, record.data)
            elif not state.master_key:
                state.master_key = record.data
                engine.mark_dirty_locked(state)
            return
        if state is None:  # its key record was lost with a skipped record: key unknown
            state = engine.create_locked(record.ledger_id, b"")
        if kind is RecordKind.ADD_ENTRY:
            (lac,) = _LAC.unpack_from(record.data, 16)
            engine.add_locked(state, record.entry_id, lac, record.data)
        elif kind is RecordKind.FENCE:
            engine.fence_locked(state)
        elif kind is RecordKind.EXPLICIT_LAC:
            engine.set_explicit_lac_locked(state, record.data)


def _enter_limbo(engine: EngineState, replay: ReplayOutcome) -> None:
    with engine.lock:
        if replay.limbo_all:
            engine.limbo = True
        for ledger_id in replay.limbo_ledgers:
            state = engine.ledgers.get(ledger_id)
            if state is not None:  # None: deleted by a later record, nothing left to lose
                engine.set_limbo_locked(state, True)


def _remove_debris(fs: FileSystem, layout: StorageLayout, generation: int) -> None:
    for directory in layout.all_dirs:
        for name in fs.list_dir(directory):
            other_index = index_file_generation(name) not in (None, generation)
            if name.endswith((".tmp", COMPACTING_SUFFIX)) or other_index:
                fs.remove(os.path.join(directory, name))
