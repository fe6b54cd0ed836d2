"""The bookie's garbage collector: give back the disk space of deleted ledgers.

A pass:

1. scan and compare (:mod:`bkeeper.server.gc_scan`), when the bookie has metadata: delete
   the local data of the ledgers whose metadata is gone, confirming each with at most
   ``gc_metadata_reads_per_s`` metadata reads a second;
2. ``Storage.collect_garbage`` on a worker thread: checkpoint, remove the entry logs that
   hold no live ledger, and run the compactions the schedule chooses
   (:mod:`bkeeper.server.gc_schedule`: minor and major at their intervals, forced ones, all
   of them at every pass on a full disk when ``StorageConfig.gc_allowed_on_full_disk``).

When: every ``gc_wait_ms`` (+-25%, :data:`GC_WAIT_JITTER`) after the previous pass ended;
at once on :meth:`run_now`; promptly when the storage reports its disk FULL or NO_ROOM
(when compaction is allowed on a full disk: it is how a full bookie frees space); and, while
the disk stays full, as soon as the metadata of a ledger it holds may be gone
(``deletions``, :mod:`bkeeper.server.gc_wake`: deleting ledgers to free a full bookie waited
up to 75 s for the next pass). After every pass ``after_pass`` is called (the bookie checks
its disk then, and turns writable at once when the pass freed enough). One pass
at a time: a :meth:`run_now` while a pass runs waits for the next pass, which starts as soon
as that one ends and forces the kinds asked for (several callers share it). At most
``GC_WAITERS_MAX`` callers wait at once.

Errors: a scan that fails (the metadata store down) deletes nothing more, is logged in one
line, is named in the pass's report (``scan_error``) and is tried again at the next pass;
the collection still runs (it frees what earlier scans deleted). A collection that fails is
logged; the callers waiting for that pass get its error; the next pass tries again. No GC
failure stops the bookie.

Metrics (``metrics``, optional): each pass that ran is counted by the kind of compaction it
ran (``major``, ``minor``, or ``gc`` for none), with its duration and the bytes it freed.

Stop (:meth:`request_stop`, on the bookie's shutdown): the scan ends between two reads, the
storage's collection sees its stop event and returns early (``GcResult.stopped``), and
:meth:`run` returns; callers still waiting get ``StorageError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
import threading
from asyncio import FIRST_COMPLETED
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from bkeeper.common.clock import Clock, default_clock
from bkeeper.common.errors import BKeeperError, StorageError, TooManyRequestsError
from bkeeper.common.metrics import MetricSet
from bkeeper.common.tasks import within
from bkeeper.server.config import BookieConfig
from bkeeper.server.gc_scan import (
    LedgerMetadataReader,
    LocalLedgers,
    ReadLimiter,
    ScanOutcome,
    one_line,
    scan_and_compare,
)
from bkeeper.server.gc_schedule import CompactionPlan, CompactionSchedule
from bkeeper.storage import DiskState
from bkeeper.storage.garbage import EntryLogUsage, GcResult

__all__ = ["GC_WAITERS_MAX", "DeletionWatch", "GarbageCollector", "GcReport", "GcStorage"]

#: Each wait between passes is ``gc_wait_ms`` times a random factor within 1 +- this, so that
#: bookies started together (a sandbox, a rolling restart) do not collect, and compact, at
#: the same moment: on shared cores and disks their compactions would add up.
GC_WAIT_JITTER = 0.25

log = logging.getLogger(__name__)

#: While the disk is full, a pass woken by a ledger's metadata changing starts no sooner than
#: this after the previous pass ended.
DELETION_WAKE_MIN_S = 0.5

#: Most :meth:`GarbageCollector.run_now` callers waiting at once; more get
#: ``TooManyRequestsError``.
GC_WAITERS_MAX = 1024


class _StoppedError(StorageError):
    """The bookie is stopping: the pass ended before its collection."""


class DeletionWatch(Protocol):
    """What wakes the collector of a full bookie
    (:class:`bkeeper.server.gc_wake.LedgerDeletionWatch`)."""

    async def wait_change(self, ledger_ids: Iterable[int]) -> None: ...


class GcStorage(LocalLedgers, Protocol):
    """What the collector needs of the storage engine (:class:`bkeeper.storage.Storage`)."""

    def collect_garbage(
        self, *, minor: bool, major: bool, stop: threading.Event | None = None
    ) -> GcResult: ...

    def entry_log_usage(self) -> list[EntryLogUsage]: ...

    @property
    def disk_state(self) -> DiskState: ...


@dataclass(frozen=True)
class GcReport:
    """One pass: ledgers deleted by the scan, metadata reads it made, why the scan ended
    early (``scan_error``, empty when it did not), when the pass started (wall clock), then
    every field of the storage's :class:`~bkeeper.storage.garbage.GcResult`."""

    ledgers_deleted: int
    metadata_reads: int
    scan_error: str
    started_wall_ms: int
    minor: bool
    major: bool
    logs_removed: int
    logs_compacted: int
    bytes_freed: int
    bytes_copied: int
    entries_copied: int
    duration_s: float
    stopped: bool
    error: str

    @classmethod
    def of(cls, scan: ScanOutcome, started_wall_ms: int, result: GcResult) -> GcReport:
        return cls(
            ledgers_deleted=len(scan.deleted),
            metadata_reads=scan.metadata_reads,
            scan_error=scan.error,
            started_wall_ms=started_wall_ms,
            **dataclasses.asdict(result),
        )

    def as_dict(self) -> dict[str, object]:
        """JSON-able, every field."""
        return dataclasses.asdict(self)


class GarbageCollector:
    """The GC of one bookie: ``run()`` is its loop (a task of the bookie)."""

    def __init__(
        self,
        config: BookieConfig,
        storage: GcStorage,
        metadata: LedgerMetadataReader | None,
        *,
        allowed_on_full_disk: bool = True,
        clock: Clock | None = None,
        metrics: MetricSet | None = None,
        deletions: DeletionWatch | None = None,
        after_pass: Callable[[], object] | None = None,
    ) -> None:
        self._config = config
        self._deletions = deletions
        self._after_pass = after_pass
        self._metrics = None if metrics is None else _GcMetrics(metrics)
        self._storage = storage
        self._metadata = metadata
        self._allowed_on_full_disk = allowed_on_full_disk
        self._clock: Clock = default_clock() if clock is None else clock
        self._schedule = CompactionSchedule(
            config.minor_compaction_interval_ms / 1000.0,
            config.major_compaction_interval_ms / 1000.0,
            self._clock.monotonic(),
        )
        self._limiter = ReadLimiter(config.gc_metadata_reads_per_s, self._clock, self._pause)
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self._stop_collecting = threading.Event()
        self._waiters: list[asyncio.Future[GcReport]] = []
        self._force_minor = False
        self._force_major = False
        self.running = False
        self.passes = 0
        self.failures = 0
        self.last_pass: GcReport | None = None
        self.ledgers_deleted_total = 0
        self.logs_removed_total = 0
        self.logs_compacted_total = 0
        self.bytes_freed_total = 0

    # -- control -----------------------------------------------------------------------
    async def run_now(self, *, major: bool = False, minor: bool = False) -> GcReport:
        """Run a pass now (the next one, if one is under way) forcing the kinds named, and
        wait for it: its report, or the error that failed it."""
        if self._stopping.is_set():
            raise StorageError("the garbage collector is stopped")
        if len(self._waiters) >= GC_WAITERS_MAX:
            raise TooManyRequestsError(
                f"{GC_WAITERS_MAX} callers already wait for a garbage collection (GC_WAITERS_MAX)"
            )
        done: asyncio.Future[GcReport] = asyncio.get_running_loop().create_future()
        self._waiters.append(done)
        self._force_major = self._force_major or major
        self._force_minor = self._force_minor or minor
        self._wake.set()
        return await done

    def suspend(self, *, major: bool, minor: bool) -> None:
        """Stop scheduling the compactions named (a forced one still runs)."""
        self._schedule.suspend(major=major, minor=minor)
        log.info("compaction suspended: major %s, minor %s", *self._suspended())

    def resume(self, *, major: bool, minor: bool) -> None:
        """Schedule the compactions named again."""
        self._schedule.resume(major=major, minor=minor)
        log.info("compaction resumed; suspended now: major %s, minor %s", *self._suspended())

    def on_disk_state(self, state: DiskState) -> None:
        """The storage's disk changed state (called on the event loop): a full disk gets a
        pass at once, when compaction may run there."""
        if state is not DiskState.WRITABLE and self._allowed_on_full_disk:
            self._wake.set()

    def request_stop(self) -> None:
        """End the pass under way early and the loop after it (idempotent)."""
        self._stopping.set()
        self._stop_collecting.set()
        self._wake.set()

    def status(self) -> dict[str, object]:
        """JSON-able state and counters (the keys of the admin channel's GC status)."""
        usage = self._storage.entry_log_usage()
        suspended_major, suspended_minor = self._suspended()
        return {
            "running": self.running,
            "suspended_major": suspended_major,
            "suspended_minor": suspended_minor,
            "passes": self.passes,
            "last_pass": None if self.last_pass is None else self.last_pass.as_dict(),
            "ledgers_deleted_total": self.ledgers_deleted_total,
            "logs_removed_total": self.logs_removed_total,
            "logs_compacted_total": self.logs_compacted_total,
            "bytes_freed_total": self.bytes_freed_total,
            "entry_logs": len(usage),
            "entry_log_bytes": sum(log_usage.total_bytes for log_usage in usage),
            "live_bytes": sum(log_usage.live_bytes for log_usage in usage),
            "gc_wait_ms": self._config.gc_wait_ms,
            "disk_state": self._storage.disk_state.value,
        }

    # -- the loop ----------------------------------------------------------------------
    async def run(self) -> None:
        """Passes until :meth:`request_stop`; never raises for a failed pass."""
        try:
            while not self._stopping.is_set():
                wait_s = self._config.gc_wait_ms / 1000.0
                wait_s *= random.uniform(1 - GC_WAIT_JITTER, 1 + GC_WAIT_JITTER)
                await self._wait_for_work(wait_s)
                if self._stopping.is_set():
                    break
                self._wake.clear()
                await self._pass()
        finally:
            waiters, self._waiters = self._waiters, []
            _fail(waiters, StorageError("the garbage collector stopped before the pass ran"))

    async def _wait_for_work(self, wait_s: float) -> None:
        """Until woken, ``wait_s`` passed, or (disk full) a ledger held here may be deleted."""
        full = self._storage.disk_state is not DiskState.WRITABLE and self._allowed_on_full_disk
        if self._deletions is None or not full:
            with contextlib.suppress(TimeoutError):
                await within(self._wake.wait(), wait_s)
            return
        woken = asyncio.ensure_future(self._wake.wait())
        changed = asyncio.ensure_future(self._wait_deletion())
        try:
            await asyncio.wait({woken, changed}, timeout=wait_s, return_when=FIRST_COMPLETED)
        finally:
            for task in (woken, changed):
                task.cancel()
            outcomes = await asyncio.gather(woken, changed, return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, Exception):  # a bug (cancelled tasks give BaseException)
                raise outcome

    async def _wait_deletion(self) -> None:
        assert self._deletions is not None
        # Passes woken so come at most every DELETION_WAKE_MIN_S: a ledger the scan cannot
        # delete yet (its metadata read refused) must not make passes back to back.
        with contextlib.suppress(TimeoutError):
            await within(self._stopping.wait(), DELETION_WAKE_MIN_S)
        if self._stopping.is_set():
            return
        try:
            await self._deletions.wait_change(self._storage.ledger_ids())
        except BKeeperError as exc:  # the metadata store away: the periodic pass stays
            log.warning("garbage collection: cannot watch ledger deletions: %s", one_line(exc))
            await self._stopping.wait()
            return
        log.info("garbage collection: ledger metadata changed while the disk is full")

    async def _pass(self) -> None:
        waiters, self._waiters = self._waiters, []
        force_minor, force_major = self._force_minor, self._force_major
        self._force_minor = self._force_major = False
        self.running = True
        started = self._clock.monotonic()
        try:
            report = await self._collect(force_minor, force_major)
        except _StoppedError as exc:
            log.info("garbage collection: %s", exc)
            _fail(waiters, exc)
            return
        except Exception as exc:
            self.failures += 1
            if isinstance(exc, BKeeperError):
                log.error("garbage collection failed: %s", one_line(exc))
            else:  # a bug: its traceback
                log.exception("garbage collection failed")
            _fail(waiters, exc)
            return
        except BaseException:  # cancelled: the callers must not wait forever
            _fail(waiters, StorageError("the garbage collector was cancelled during the pass"))
            raise
        finally:
            self.running = False
            self._check_after_pass()
        self._count(report, self._clock.monotonic() - started)
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(report)

    def _check_after_pass(self) -> None:
        if self._after_pass is None:
            return
        try:
            self._after_pass()
        except Exception:  # the disk monitor checks again within its interval
            log.exception("could not check the disk after garbage collection")

    async def _collect(self, force_minor: bool, force_major: bool) -> GcReport:
        started, started_wall_ms = self._clock.monotonic(), self._clock.wall_ms()
        scan = await self._scan()
        if scan.error:
            log.warning(
                "garbage collection: %s (%d ledgers deleted before that); tried again in %d ms",
                scan.error,
                len(scan.deleted),
                self._config.gc_wait_ms,
            )
        if self._stopping.is_set():
            raise _StoppedError("the garbage collector stopped during the pass")
        plan = self._schedule.plan(
            started,
            force_minor=force_minor,
            force_major=force_major,
            disk_full=self._storage.disk_state is not DiskState.WRITABLE,
            allowed_on_full_disk=self._allowed_on_full_disk,
        )
        result = await asyncio.to_thread(self._collect_in_thread, plan)
        if not result.stopped:
            self._schedule.completed(plan, started)
        return GcReport.of(scan, started_wall_ms, result)

    def _collect_in_thread(self, plan: CompactionPlan) -> GcResult:
        return self._storage.collect_garbage(
            minor=plan.minor, major=plan.major, stop=self._stop_collecting
        )

    async def _scan(self) -> ScanOutcome:
        if self._metadata is None:  # a bookie without metadata cannot tell what is deleted
            return ScanOutcome(0, 0, (), 0)
        return await scan_and_compare(self._storage, self._metadata, self._limiter, self._stopping)

    async def _pause(self, seconds: float) -> None:
        """The rate limiter's wait: cut short by a stop."""
        with contextlib.suppress(TimeoutError):
            await within(self._stopping.wait(), seconds)

    def _count(self, report: GcReport, pass_s: float) -> None:
        if self._metrics is not None:
            self._metrics.count(report, pass_s)
        self.passes += 1
        self.last_pass = report
        self.ledgers_deleted_total += report.ledgers_deleted
        self.logs_removed_total += report.logs_removed
        self.logs_compacted_total += report.logs_compacted
        self.bytes_freed_total += report.bytes_freed
        did_something = report.ledgers_deleted or report.logs_removed or report.logs_compacted
        log.log(
            logging.INFO if did_something else logging.DEBUG,
            "garbage collection: %d ledgers deleted, %d entry logs removed, %d compacted "
            "(%s), %d bytes freed; the pass took %.3f s",
            report.ledgers_deleted,
            report.logs_removed,
            report.logs_compacted,
            "major" if report.major else "minor" if report.minor else "no compaction",
            report.bytes_freed,
            pass_s,
        )

    def _suspended(self) -> tuple[bool, bool]:
        return self._schedule.suspended_major, self._schedule.suspended_minor


class _GcMetrics:
    def __init__(self, metrics: MetricSet) -> None:
        self.runs = {
            kind: metrics.counter(
                "bkeeper_gc_runs_total",
                "Garbage-collection passes, by the compaction they ran (major, minor; gc: none).",
                kind=kind,
            )
            for kind in ("major", "minor", "gc")
        }
        self.reclaimed = metrics.counter(
            "bkeeper_gc_reclaimed_bytes_total",
            "Disk bytes freed by garbage collection and compaction.",
        )
        self.duration = metrics.histogram(
            "bkeeper_gc_duration_seconds", "Time of each garbage-collection pass."
        )

    def count(self, report: GcReport, pass_s: float) -> None:
        kind = "major" if report.major else "minor" if report.minor else "gc"
        self.runs[kind].value += 1
        self.reclaimed.value += report.bytes_freed
        self.duration.observe(pass_s)


def _fail(waiters: list[asyncio.Future[GcReport]], error: BaseException) -> None:
    for waiter in waiters:
        if not waiter.done():
            waiter.set_exception(error)
