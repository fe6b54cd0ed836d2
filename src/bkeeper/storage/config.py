"""Configuration of the storage engine: one frozen dataclass, validated on creation.

Every limit has its unit in its name. :class:`~bkeeper.common.errors.ConfigError` names the
offending field.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from bkeeper.common.errors import ConfigError
from bkeeper.common.validate import (
    check_int_in_range,
    check_non_negative_ints,
    check_number_in_range,
    check_positive_ints,
)

__all__ = ["StorageConfig"]

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB

#: An entry log location packs the byte offset into 32 bits (as Apache BookKeeper does).
ENTRY_LOG_BYTES_LIMIT = 4 * GIB - 1


@dataclass(frozen=True)
class StorageConfig:
    """Limits and switches of one bookie's storage engine.

    Group commit: the journal thread writes everything queued as one group (one write and one
    fdatasync). When it has been idle it writes a new record at once; while busy it starts the
    next group no sooner than ``journal_max_group_wait_ms`` after the previous one started,
    unless ``journal_group_bytes_max`` or ``journal_group_entries_max`` is reached first. The
    queue between the caller and the journal thread holds at most
    ``journal_queue_entries_max`` records and ``journal_queue_bytes_max`` bytes; beyond that
    adds fail with ``TooManyRequestsError``.

    A checkpoint asks a journal whose current file holds ``journal_checkpoint_roll_bytes``
    to start a new file, so that the next checkpoint can delete the old one even when no more
    records come. Journal files a checkpoint no longer needs are cut down
    ``journal_remove_step_bytes`` at a time, ``journal_remove_pause_ms`` apart, before they
    are removed (a large file freed at once stalls every fsync on the disk).

    The bookie checkpoints every ``BookieConfig.checkpoint_interval_ms``, and also as soon as
    ``checkpoint_journal_bytes`` (0: never by size) have been journaled since the last
    checkpoint: what a restart after a crash replays stays under that much whatever the
    write rate. A checkpoint also ends the entry log being written once it holds
    ``entry_log_checkpoint_roll_bytes`` (0: never; logs still roll at
    ``entry_log_bytes_max``), writing its ledgers map: the log a crash leaves without a map,
    which the next open reads whole, stays small too.

    The write cache (entries not yet in an entry log) holds at most ``write_cache_bytes_max``;
    a background flush starts when ``write_cache_flush_bytes`` (at most half the cache; None:
    1 MiB, or half the cache if smaller) are in use: small, frequent flushes keep each
    entry-log fsync short, so the journal's fsyncs on the same disk are not held up behind a
    large one. The read cache keeps recently flushed
    entries for tailing readers, at most ``read_cache_bytes_max``.

    Disk space (see :mod:`bkeeper.storage.disk_space`): at ``disk_usage_threshold`` (a
    fraction of the data directory's filesystem in use) the engine reports the disk full and
    the bookie turns read-only; below ``disk_usage_lwm_threshold`` it is writable again. A
    read-only bookie still takes recovery and high-priority adds while more than
    ``disk_high_priority_free_bytes_min`` bytes are free. A warning is logged when a
    filesystem's usage crosses ``disk_usage_warn_threshold``.

    Directories (see :mod:`bkeeper.storage.dirs`): entry logs go to ``ledger_dirs`` (empty:
    ``<data_dir>/current/ledgers``), each new log to the writable one with the most free
    space; the index file and the checkpoint live in the first. There is one journal, with its
    own thread and group commit, per entry of ``journal_dirs`` (empty:
    ``<data_dir>/current/journal``); a ledger's records always go to the journal of its id
    modulo their number. Every directory's filesystem is watched (directories on one
    filesystem share one check): a full ledger directory takes no new log until its usage is
    below the low-water mark; the engine reports itself full (the bookie turns read-only) when
    every ledger directory is full, or any with ``readonly_on_any_dir_full``, or when a
    journal directory is full.

    Garbage collection (see :mod:`bkeeper.storage.compaction`): a minor compaction copies
    out the live entries of entry logs whose live ratio is below
    ``minor_compaction_threshold``, a major one those below ``major_compaction_threshold``
    (a threshold <= 0 disables its kind); copying runs at most
    ``compaction_rate_bytes_per_s`` (0: unthrottled), and a pass works at most
    ``compaction_time_share`` of the time (after each chunk it read, copied and synced it
    pauses ``1 / share - 1`` times as long as the chunk took; 1.0: no pause), so that the
    event loop and the journal's fdatasyncs on the same disk do not wait behind it. With
    ``gc_allowed_on_full_disk`` the bookie collects garbage at once when its disk fills
    (compaction is how a full bookie frees space), least live bytes first.
    """

    data_dir: str
    journal_max_group_wait_ms: float = 1.0
    journal_group_bytes_max: int = 512 * KIB
    journal_group_entries_max: int = 10_000
    journal_queue_entries_max: int = 50_000
    journal_queue_bytes_max: int = 64 * MIB
    journal_file_bytes_max: int = 512 * MIB
    journal_skip_corrupt_records: bool = False
    journal_remove_step_bytes: int = 32 * MIB
    journal_remove_pause_ms: int = 20
    journal_checkpoint_roll_bytes: int = 64 * MIB
    checkpoint_journal_bytes: int = 128 * MIB
    entry_log_checkpoint_roll_bytes: int = 128 * MIB
    write_cache_bytes_max: int = 64 * MIB
    write_cache_flush_bytes: int | None = None
    read_cache_bytes_max: int = 32 * MIB
    entry_log_bytes_max: int = GIB
    entry_log_read_handles_max: int = 64
    index_compaction_bytes_min: int = 64 * MIB
    disk_usage_threshold: float = 0.95
    disk_usage_lwm_threshold: float = 0.90
    disk_high_priority_free_bytes_min: int = 100 * MIB
    disk_usage_warn_threshold: float = 0.90
    ledger_dirs: tuple[str, ...] = ()
    journal_dirs: tuple[str, ...] = ()
    readonly_on_any_dir_full: bool = False
    minor_compaction_threshold: float = 0.2
    major_compaction_threshold: float = 0.8
    compaction_rate_bytes_per_s: int = 64 * MIB
    compaction_time_share: float = 0.5
    gc_allowed_on_full_disk: bool = True

    def __post_init__(self) -> None:
        if not self.data_dir:
            raise ConfigError("data_dir: a data directory is required")
        check_number_in_range("journal_max_group_wait_ms", self.journal_max_group_wait_ms, 0, 1000)
        check_positive_ints(
            self,
            "journal_group_bytes_max",
            "journal_group_entries_max",
            "journal_queue_entries_max",
            "journal_queue_bytes_max",
            "journal_file_bytes_max",
            "write_cache_bytes_max",
            "read_cache_bytes_max",
            "entry_log_bytes_max",
            "entry_log_read_handles_max",
            "index_compaction_bytes_min",
            "journal_remove_step_bytes",
            "journal_checkpoint_roll_bytes",
        )
        flush = self.write_cache_flush_bytes
        if flush is not None and (
            isinstance(flush, bool)
            or not isinstance(flush, int)
            or flush <= 0
            or flush * 2 > self.write_cache_bytes_max
        ):
            raise ConfigError(
                f"write_cache_flush_bytes: at most half of write_cache_bytes_max "
                f"({self.write_cache_bytes_max // 2}), got {flush!r}"
            )
        if self.entry_log_bytes_max > ENTRY_LOG_BYTES_LIMIT:
            raise ConfigError(
                f"entry_log_bytes_max: at most {ENTRY_LOG_BYTES_LIMIT} (32-bit offsets), "
                f"got {self.entry_log_bytes_max}"
            )
        self._check_disk_thresholds()
        check_non_negative_ints(
            self,
            "disk_high_priority_free_bytes_min",
            "compaction_rate_bytes_per_s",
            "checkpoint_journal_bytes",
            "entry_log_checkpoint_roll_bytes",
        )
        self._check_compaction_thresholds()
        share = self.compaction_time_share
        if isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share <= 1:
            raise ConfigError(f"compaction_time_share: a fraction in (0, 1], got {share!r}")
        if not isinstance(self.gc_allowed_on_full_disk, bool):
            raise ConfigError("gc_allowed_on_full_disk: must be a bool")
        check_int_in_range("journal_remove_pause_ms", self.journal_remove_pause_ms, 0, 1000)
        for name in ("journal_skip_corrupt_records", "readonly_on_any_dir_full"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name}: must be a bool")
        self._check_dirs()

    def _check_disk_thresholds(self) -> None:
        threshold, lwm = self.disk_usage_threshold, self.disk_usage_lwm_threshold
        warn = self.disk_usage_warn_threshold
        for name in (
            "disk_usage_threshold",
            "disk_usage_lwm_threshold",
            "disk_usage_warn_threshold",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f"{name}: must be a fraction, got {value!r}")
        if not 0.0 < lwm <= threshold <= 1.0:
            raise ConfigError(
                "disk_usage_lwm_threshold and disk_usage_threshold must satisfy "
                f"0 < lwm <= threshold <= 1, got {lwm!r} and {threshold!r}"
            )
        if not 0.0 < warn <= threshold:
            raise ConfigError(
                "disk_usage_warn_threshold must satisfy 0 < warn <= disk_usage_threshold, "
                f"got {warn!r} and {threshold!r}"
            )

    def _check_dirs(self) -> None:
        seen: dict[str, str] = {}
        for name in ("ledger_dirs", "journal_dirs"):
            dirs = getattr(self, name)
            if not isinstance(dirs, tuple) or not all(isinstance(d, str) and d for d in dirs):
                raise ConfigError(f"{name}: must be a tuple of directory paths, got {dirs!r}")
        for name, dirs in (
            ("ledger_dirs", self.ledger_dir_paths),
            ("journal_dirs", self.journal_dir_paths),
        ):
            for path in dirs:
                key = os.path.normpath(os.path.abspath(path))
                if key in seen:
                    raise ConfigError(
                        f"{name}: {path!r} is given twice (also in {seen[key]}): every ledger "
                        "and journal directory must be distinct"
                    )
                seen[key] = name

    @property
    def ledger_dir_paths(self) -> tuple[str, ...]:
        """The ledger directories in use: ``ledger_dirs``, or the one under ``data_dir``."""
        return self.ledger_dirs or (os.path.join(self.data_dir, "current", "ledgers"),)

    @property
    def journal_dir_paths(self) -> tuple[str, ...]:
        """The journal directories in use: ``journal_dirs``, or the one under ``data_dir``."""
        return self.journal_dirs or (os.path.join(self.data_dir, "current", "journal"),)

    def _check_compaction_thresholds(self) -> None:
        minor, major = self.minor_compaction_threshold, self.major_compaction_threshold
        for name, value in (
            ("minor_compaction_threshold", minor),
            ("major_compaction_threshold", major),
        ):
            if isinstance(value, bool) or not isinstance(value, int | float) or value > 1.0:
                raise ConfigError(
                    f"{name}: must be a fraction at most 1 (<= 0 disables), got {value!r}"
                )
        if minor > 0 and major > 0 and minor > major:
            raise ConfigError(
                "minor_compaction_threshold must not exceed major_compaction_threshold, "
                f"got {minor!r} and {major!r}"
            )

    @property
    def journal_max_group_wait_s(self) -> float:
        return self.journal_max_group_wait_ms / 1000.0

    @property
    def flush_bytes(self) -> int:
        """Write-cache bytes that start a background flush."""
        if self.write_cache_flush_bytes is not None:
            return self.write_cache_flush_bytes
        return min(MIB, self.write_cache_bytes_max // 2)
