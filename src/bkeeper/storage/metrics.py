"""The storage engine's metrics, registered in the owner's :class:`MetricSet`.

Updated per batch on the threads that do the work: each journal thread per group
(:class:`JournalMetrics`: fsync latency, entries and bytes per group, how long the group's
oldest record waited), the flusher thread per flush (:class:`FlushMetrics`). What is cheaper
to read than to keep (write cache, entry logs, index, disk space, journal queue depth) is
read when collected, by one hook under the engine lock (:func:`register_gauges`).
Without a metric set (``Storage.open(metrics=None)``) none of this runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from bkeeper.common.clock import Clock
from bkeeper.common.metrics import BYTES_BUCKETS, COUNT_BUCKETS, Gauge, MetricSet
from bkeeper.storage.disk_space import DiskState

__all__ = ["FlushMetrics", "JournalMetrics", "StorageReadings", "StorageStats", "register_gauges"]


class JournalMetrics:
    """One journal's histograms (merged with the other journals' when collected)."""

    __slots__ = ("fsync_latency", "group_bytes", "group_entries", "queue_wait")

    def __init__(self, metrics: MetricSet) -> None:
        self.fsync_latency = metrics.histogram(
            "bkeeper_journal_fsync_latency_seconds", "Time of each journal fdatasync."
        )
        self.group_entries = metrics.histogram(
            "bkeeper_journal_group_commit_entries",
            "Records written and made durable together (one group commit).",
            COUNT_BUCKETS,
        )
        self.group_bytes = metrics.histogram(
            "bkeeper_journal_group_commit_bytes",
            "Bytes of each group commit.",
            BYTES_BUCKETS,
        )
        self.queue_wait = metrics.histogram(
            "bkeeper_journal_queue_wait_seconds",
            "Per group: how long its oldest record waited in the queue before the group was cut.",
        )


class FlushMetrics:
    """Moves of the write cache to entry logs (the flusher thread)."""

    __slots__ = ("clock", "flush_bytes", "flush_latency")

    def __init__(self, metrics: MetricSet, clock: Clock) -> None:
        self.clock = clock
        self.flush_latency = metrics.histogram(
            "bkeeper_flush_latency_seconds",
            "Time of each write-cache flush: entry-log write, fdatasync and indexing.",
        )
        self.flush_bytes = metrics.counter(
            "bkeeper_flush_bytes_total",
            "Bytes written to entry logs by write-cache flushes (records and their headers).",
        )


@dataclass(frozen=True)
class StorageStats:
    ledgers: int
    journal_groups_written: int
    journal_groups_cut: dict[str, int]
    journal_file_id: int
    write_cache_bytes: int
    read_cache_bytes: int
    checkpoints: int
    limbo: bool
    limbo_ledgers: int
    disk_state: DiskState
    disk_checks: int


@dataclass(frozen=True)
class StorageReadings:
    """What the engine tells cheaply, read at once under its lock."""

    write_cache_bytes: int
    added_bytes: int
    journal_queue_records: int
    ledgers: int
    index_entries: int
    entry_logs: int
    entry_log_bytes: int
    disks: tuple[tuple[str, int, int], ...]  # (directory, total, free)


def register_gauges(metrics: MetricSet, read: Callable[[], StorageReadings]) -> None:
    """Gauges (and the added-bytes counter) refreshed from one ``read()`` per collection."""
    gauges: dict[str, Gauge] = {
        "write_cache_bytes": metrics.gauge(
            "bkeeper_write_cache_bytes", "Bytes of entries in the write cache (not yet flushed)."
        ),
        "journal_queue_records": metrics.gauge(
            "bkeeper_journal_queue_depth", "Records queued for the journal, not yet written."
        ),
        "ledgers": metrics.gauge("bkeeper_index_ledgers", "Ledgers the bookie holds."),
        "index_entries": metrics.gauge(
            "bkeeper_index_entries", "Entry locations in the index (entries flushed to entry logs)."
        ),
        "entry_logs": metrics.gauge("bkeeper_entry_logs", "Entry log files."),
        "entry_log_bytes": metrics.gauge(
            "bkeeper_entry_log_bytes", "Bytes of entries in entry logs (live or not yet collected)."
        ),
    }
    added = metrics.counter(
        "bkeeper_bookie_added_bytes_total",
        "Bytes of entry bodies the bookie took into its write cache.",
    )
    disk_gauges: dict[str, tuple[Gauge, Gauge]] = {}

    def refresh() -> None:
        readings = read()
        for name, gauge in gauges.items():
            gauge.value = getattr(readings, name)
        added.value = readings.added_bytes
        for directory, total, free in readings.disks:
            pair = disk_gauges.get(directory)
            if pair is None:
                pair = disk_gauges[directory] = (
                    metrics.gauge(
                        "bkeeper_disk_total_bytes",
                        "Size of the filesystem holding the directory.",
                        dir=directory,
                    ),
                    metrics.gauge(
                        "bkeeper_disk_free_bytes",
                        "Free bytes of the filesystem holding the directory.",
                        dir=directory,
                    ),
                )
            pair[0].value, pair[1].value = total, free

    metrics.on_collect(refresh)
