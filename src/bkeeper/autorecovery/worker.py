"""Re-replication: copy what lost bookies held to new ones, then name them in the metadata.

:func:`replicate_ledger` repairs one ledger:

1. read its metadata and the registered bookies; the lost bookies are those given (the
   under-replication mark's), or else every ensemble member not registered;
2. an open ledger with a lost bookie in its last segment is fenced and sealed first
   (``open_ledger(recovery=True)``, with the password stored in its metadata) when
   ``fence_open``; otherwise nothing is done and the outcome says it ``awaits_fencing``;
3. plan (:func:`bkeeper.autorecovery.replicate.plan_repair`): per segment and lost bookie, a
   target and the entries it must receive;
4. copy each fragment: :func:`~bkeeper.autorecovery.entry_copy.copy_entries` reads from the
   surviving replicas, a :class:`~bkeeper.autorecovery.recovery_adds.RecoveryAddSink` pipelines
   recovery adds to the target (``entries_in_flight_max`` unanswered at most, throttled by
   ``rate_bytes_per_s``) and waits until the target made every one durable;
5. compare-and-set the metadata (:func:`~bkeeper.autorecovery.replicate.apply_plan` on the
   current version, at most ``metadata_retries_max`` rounds): a position is changed only if
   the lost bookie still holds it.

Expected failures (too few bookies, a source or target failing, metadata races lost) give an
outcome with ``done`` False and the reason; a ledger deleted meanwhile is done.

:class:`ReplicationWorker` runs the queue: it locks a marked ledger
(:class:`~bkeeper.meta.underreplication.UnderReplicationManager`), repairs it, and removes the
mark; ``ledgers_in_parallel`` at once. While the cluster's auto-recovery is disabled it stays
idle. An open ledger waiting for its writer is left (lock released, mark kept) until
``open_ledger_grace_period_ms`` after it was marked; a failed ledger until
``failed_ledger_retry_delay_ms`` later. Which ledgers wait is remembered in memory, at most
:data:`DEFERRED_LEDGERS_MAX` (past that the oldest is forgotten: it is only tried sooner).
The worker takes ledgers by scanning the queue (listings only, at most :data:`CANDIDATES_MAX`
ids per scan, leaving out the locked ones) and trying each lock in random order, skipping
those it works on or defers: the lock node is ephemeral, owned by the worker's metadata
session, so a worker that dies gives its ledgers back.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import random
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from bkeeper.autorecovery.config import AutoRecoveryConfig
from bkeeper.autorecovery.entry_copy import copy_entries
from bkeeper.autorecovery.recovery_adds import RecoveryAddSink, Throttle
from bkeeper.autorecovery.replicate import (
    Fragment,
    RepairPlan,
    apply_plan,
    last_segment_lost,
    lost_bookies,
    plan_repair,
)
from bkeeper.client.bookkeeper import BookKeeper
from bkeeper.client.read_handle import ReadHandle
from bkeeper.common.cas import cas_update
from bkeeper.common.clock import Clock, SystemClock
from bkeeper.common.errors import BKeeperError, LedgerNotFoundError
from bkeeper.meta.ledger_metadata import LedgerMetadata
from bkeeper.meta.store import Versioned
from bkeeper.meta.underreplication import UnderreplicatedLedger, UnderReplicationManager
from bkeeper.wire.digest import master_key

__all__ = [
    "CANDIDATES_MAX",
    "COPY_RANGES_IN_FLIGHT_MAX",
    "DEFERRED_LEDGERS_MAX",
    "ReplicationOutcome",
    "ReplicationWorker",
    "WorkerStatus",
    "replicate_ledger",
]

log = logging.getLogger(__name__)

#: Runs of consecutive entries one fragment copy reads at once (striped ledgers have many).
COPY_RANGES_IN_FLIGHT_MAX = 16
#: Ledgers a worker remembers as waiting (failed, or an open ledger in its grace period).
DEFERRED_LEDGERS_MAX = 100_000
#: Queued ledger ids one scan of the queue collects.
CANDIDATES_MAX = 10_000


@dataclass(frozen=True)
class ReplicationOutcome:
    ledger_id: int
    replaced: dict[int, dict[str, str]]  # segment first entry -> {old bookie: new bookie}
    entries_copied: int
    bytes_copied: int
    done: bool  # False: must be retried later (reason in ``reason``)
    reason: str = ""
    #: an open ledger's last segment lost a bookie and ``fence_open`` was False
    awaits_fencing: bool = False
    #: the plan (made also by a dry run); None when the ledger could not be planned
    plan: RepairPlan | None = None


async def replicate_ledger(
    bk: BookKeeper,
    ledger_id: int,
    lost: Collection[str] | None,
    config: AutoRecoveryConfig,
    *,
    fence_open: bool = True,
    dry_run: bool = False,
    throttle: Throttle | None = None,
    rng: random.Random | None = None,
    unless_back: bool = False,
) -> ReplicationOutcome:
    """Repair ``ledger_id`` (module doc). ``lost`` None: every ensemble member not registered
    (writable or read-only) is lost. ``dry_run``: plan only (``plan`` and ``replaced`` say
    what would be done). ``throttle``: shared with other copies (else one of this call's).
    ``unless_back``: a bookie of ``lost`` registered again (it came back, with its data:
    its cookie let it start) is not lost any more: nothing of it is copied."""
    repair = _LedgerRepair(bk, ledger_id, config, throttle, rng)
    try:
        return await repair.run(lost, fence_open, dry_run, unless_back)
    except LedgerNotFoundError:
        return repair.outcome(True, "the ledger was deleted")
    except BKeeperError as exc:
        if not await _exists(bk, ledger_id):
            return repair.outcome(True, "the ledger was deleted")
        return repair.outcome(False, str(exc) or type(exc).__name__)


async def _exists(bk: BookKeeper, ledger_id: int) -> bool:
    try:
        return await bk.cluster.ledgers.exists(ledger_id)
    except BKeeperError:
        return True  # cannot tell: keep it queued


class _LedgerRepair:
    """One call of :func:`replicate_ledger`: its steps and what they achieved."""

    def __init__(
        self,
        bk: BookKeeper,
        ledger_id: int,
        config: AutoRecoveryConfig,
        throttle: Throttle | None,
        rng: random.Random | None,
    ) -> None:
        self.bk = bk
        self.ledger_id = ledger_id
        self.config = config
        self.throttle = throttle or Throttle(
            config.rate_bytes_per_s, SystemClock(), config.bytes_in_flight_max
        )
        self.rng = rng
        self.plan: RepairPlan | None = None
        self.replaced: dict[int, dict[str, str]] = {}
        self.entries_copied = 0
        self.bytes_copied = 0

    def outcome(
        self, done: bool, reason: str = "", awaits_fencing: bool = False
    ) -> ReplicationOutcome:
        return ReplicationOutcome(
            self.ledger_id,
            self.replaced,
            self.entries_copied,
            self.bytes_copied,
            done,
            reason,
            awaits_fencing,
            self.plan,
        )

    async def run(
        self, lost: Collection[str] | None, fence_open: bool, dry_run: bool, unless_back: bool
    ) -> ReplicationOutcome:
        bk, ledger_id = self.bk, self.ledger_id
        versioned = await bk.cluster.ledgers.read(ledger_id)
        meta = versioned.value
        bookies = await bk.cluster.registry.bookies()
        if lost is None:
            lost = lost_bookies(meta, bookies.writable | bookies.read_only)
        lost = frozenset(lost)
        if unless_back:
            lost -= bookies.writable | bookies.read_only
        if lost and not meta.has_password:
            return self.outcome(
                False,
                f"ledger {ledger_id}: no password in its metadata (created with "
                "store_password_in_metadata off): cannot re-replicate it",
            )
        if last_segment_lost(meta, lost) and fence_open and not dry_run:
            fenced = await bk.open_ledger(ledger_id, meta.password, recovery=True)
            await fenced.close()
            log.info("ledger %d fenced and sealed for re-replication", ledger_id)
            versioned = await bk.cluster.ledgers.read(ledger_id)
            meta = versioned.value
        racks = dict(bk.config.racks) if bk.config.placement == "rackaware" else None
        plan = plan_repair(ledger_id, meta, lost, bookies.writable, racks=racks, rng=self.rng)
        self.plan = plan
        if dry_run:
            self.replaced = plan.replaced
            return self.outcome(not plan.needs_fencing, awaits_fencing=plan.needs_fencing)
        if plan.needs_fencing:
            reason = "an open ledger's last segment lost a bookie: waiting to fence it"
            return self.outcome(False, reason, awaits_fencing=True)
        if any(fragment.entry_ids for fragment in plan.fragments):
            handle = await bk.open_ledger(ledger_id, meta.password, recovery=False)
            try:
                for fragment in plan.fragments:
                    await self.copy(handle, meta, fragment)
            finally:
                await handle.close()
        return await self.update_metadata(versioned, plan)

    async def copy(self, handle: ReadHandle, meta: LedgerMetadata, fragment: Fragment) -> None:
        if not fragment.entry_ids:
            return
        sink = RecoveryAddSink(
            self.bk.pool,
            fragment.target,
            self.ledger_id,
            master_key(meta.password),
            in_flight_max=self.config.entries_in_flight_max,
            answer_timeout_s=self.bk.config.add_timeout_ms / 1000.0,
            throttle=self.throttle,
        )
        try:
            await copy_entries(
                handle, meta.password, fragment.entry_ids, sink, COPY_RANGES_IN_FLIGHT_MAX
            )
            await sink.drain()
        finally:
            sink.abandon()
            self.entries_copied += sink.entries_sent
            self.bytes_copied += sink.bytes_sent
        log.debug(
            "ledger %d segment %d: %d entries of %s copied to %s",
            self.ledger_id,
            fragment.segment,
            len(fragment.entry_ids),
            fragment.lost,
            fragment.target,
        )

    async def update_metadata(
        self, versioned: Versioned[LedgerMetadata], plan: RepairPlan
    ) -> ReplicationOutcome:
        ledgers = self.bk.cluster.ledgers
        ledger_id = self.ledger_id

        async def read() -> Versioned[LedgerMetadata]:
            return await ledgers.read(ledger_id)

        async def attempt(
            held: Versioned[LedgerMetadata],
        ) -> tuple[list[Fragment], list[Fragment]]:
            meta, applied, refused = apply_plan(held.value, plan.fragments)
            if applied:
                await ledgers.write(ledger_id, meta, held.version)
            return applied, refused

        applied, refused = await cas_update(
            read,
            attempt,
            what=f"ledger {ledger_id}: re-replication",
            attempts_max=self.bk.config.metadata_retries_max,
            current=versioned,
        )
        for fragment in applied:
            self.replaced.setdefault(fragment.segment, {})[fragment.lost] = fragment.target
        if refused:
            names = ", ".join(f"{f.target} (segment {f.segment})" for f in refused)
            return self.outcome(False, f"targets joined their ensembles meanwhile: {names}")
        if applied:
            log.info("ledger %d re-replicated: %s", ledger_id, self.replaced)
        return self.outcome(True)


@dataclass(frozen=True)
class WorkerStatus:
    """What a :class:`ReplicationWorker` is doing and has done since it started."""

    enabled: bool
    in_progress: tuple[int, ...]
    waiting: tuple[int, ...]  # ledgers deferred (failed, or open in their grace period)
    replicated: int  # ledgers whose mark this worker removed
    failures: int  # attempts that left the ledger marked
    entries_copied: int
    bytes_copied: int
    last_failure: str = ""
    bytes_in_flight: int = 0  # recovery adds sent, not answered yet (the throttle's window)


@dataclass
class _Counters:
    enabled: bool = True
    replicated: int = 0
    failures: int = 0
    entries_copied: int = 0
    bytes_copied: int = 0
    last_failure: str = ""
    first_seen_ms: dict[int, int] = field(default_factory=dict)


class ReplicationWorker:
    """Takes marked ledgers, repairs them, removes the marks (see the module doc)."""

    def __init__(
        self,
        bk: BookKeeper,
        urm: UnderReplicationManager,
        holder: str,
        config: AutoRecoveryConfig,
        *,
        clock: Clock | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self._bk = bk
        self._urm = urm
        self._holder = holder
        self._config = config
        self._clock: Clock = clock or SystemClock()
        self._rng = rng
        self._throttle = Throttle(config.rate_bytes_per_s, self._clock, config.bytes_in_flight_max)
        self._in_progress: set[int] = set()
        self._deferred: dict[int, float] = {}  # ledger -> monotonic time to try it again
        self._candidates: collections.deque[int] = collections.deque()
        self._counters = _Counters()
        self._changed = asyncio.Condition()
        self._scanning = asyncio.Lock()
        self._idle_until = 0.0  # event loop time: no lane looks for work before then

    @property
    def status(self) -> WorkerStatus:
        c = self._counters
        return WorkerStatus(
            c.enabled,
            tuple(sorted(self._in_progress)),
            tuple(sorted(self._deferred)),
            c.replicated,
            c.failures,
            c.entries_copied,
            c.bytes_copied,
            c.last_failure,
            self._throttle.bytes_in_flight,
        )

    async def wait_for(self, predicate: Callable[[WorkerStatus], bool]) -> WorkerStatus:
        """Wait until ``predicate(status)`` holds (checked after each change); the status."""
        async with self._changed:
            await self._changed.wait_for(lambda: predicate(self.status))
            return self.status

    async def run(self) -> None:
        """Until cancelled: take marked ledgers, repair them, remove their marks; in
        ``ledgers_in_parallel`` lanes, each taking its next ledger as it finishes one (taking
        costs metadata round trips: one taker for all lanes would be their bottleneck)."""
        async with asyncio.TaskGroup() as group:
            for lane in range(self._config.ledgers_in_parallel):
                group.create_task(self._lane(), name=f"replication lane {lane}")

    async def _lane(self) -> None:
        while True:
            entry = await self._next_ledger()  # in progress once taken
            await self._repair(entry)

    # -- taking ledgers ------------------------------------------------------------------
    async def _next_ledger(self) -> UnderreplicatedLedger:
        idle_s = self._config.idle_poll_interval_ms / 1000.0
        loop = asyncio.get_running_loop()  # the time asyncio.sleep counts in
        while True:
            # A lane that found nothing (or failed) idles every lane: they look again together,
            # after the interval, instead of each asking the metadata store on its own.
            if loop.time() >= self._idle_until:
                try:
                    enabled = await self._urm.is_enabled()
                    await self._set_enabled(enabled)
                    entry = await self._lock_candidate() if enabled else None
                except BKeeperError as exc:
                    log.warning("replication worker %s: cannot take: %s", self._holder, exc)
                    entry = None
                if entry is not None:
                    return entry
                self._idle_until = loop.time() + idle_s
            await asyncio.sleep(max(0.0, self._idle_until - loop.time()))

    async def _lock_candidate(self) -> UnderreplicatedLedger | None:
        if not self._candidates:
            async with self._scanning:  # one lane scans; the others wait for its candidates
                if not self._candidates:
                    await self._scan()
        while self._candidates:
            ledger_id = self._candidates.popleft()
            if self._skipped(ledger_id):
                continue
            # In progress from now on: no other lane may take it while its lock is being taken
            # (the lock is ours, so taking it again would succeed).
            self._in_progress.add(ledger_id)
            entry = None
            try:
                entry = await self._urm.lock(ledger_id, self._holder)
            finally:
                if entry is None:
                    self._in_progress.discard(ledger_id)
            if entry is not None:
                return entry
        return None

    async def _scan(self) -> None:
        """Queue candidates: the marked ledgers nobody holds, from listings only (a mark is
        read once its lock is taken), in random order so that workers scanning together do
        not all race for the same ledger first."""
        locked = await self._urm.locked_ids()
        found: list[int] = []
        async for ledger_id in self._urm.ledger_ids():
            if ledger_id not in locked and not self._skipped(ledger_id):
                found.append(ledger_id)
                if len(found) >= CANDIDATES_MAX:
                    break
        (self._rng if self._rng is not None else random.Random()).shuffle(found)
        self._candidates.extend(found)

    def _skipped(self, ledger_id: int) -> bool:
        if ledger_id in self._in_progress:
            return True
        retry_at = self._deferred.get(ledger_id)
        if retry_at is None:
            return False
        if retry_at > self._clock.monotonic():
            return True
        del self._deferred[ledger_id]
        return False

    # -- repairing -----------------------------------------------------------------------
    async def _repair(self, entry: UnderreplicatedLedger) -> None:
        ledger_id = entry.ledger_id
        try:
            await self._notify()
            outcome, retry_in_ms = await self._replicate(entry)
            await self._finish(outcome, retry_in_ms)
        except asyncio.CancelledError:
            with contextlib.suppress(BKeeperError):
                await self._urm.release(ledger_id)
            raise
        finally:
            self._in_progress.discard(ledger_id)
        await self._notify()

    async def _replicate(self, entry: UnderreplicatedLedger) -> tuple[ReplicationOutcome, int]:
        """The outcome of one attempt, and when to try again if not done."""
        ledger_id = entry.ledger_id
        marked_ms = entry.ctime_ms
        if marked_ms is None:  # a mark without its time: the grace counts from first sight
            marked_ms = self._first_seen_ms(ledger_id)
        grace_left_ms = marked_ms + self._config.open_ledger_grace_period_ms - self._clock.wall_ms()
        lost = entry.missing_replicas or None
        try:
            outcome = await replicate_ledger(
                self._bk,
                ledger_id,
                lost,
                self._config,
                fence_open=grace_left_ms <= 0,
                throttle=self._throttle,
                rng=self._rng,
                unless_back=True,  # marked while restarting, say: nothing to do once back
            )
        except Exception as exc:  # a bug: reported, and the ledger stays marked for a retry
            log.exception("ledger %d: re-replication failed unexpectedly", ledger_id)
            outcome = ReplicationOutcome(ledger_id, {}, 0, 0, False, f"{type(exc).__name__}: {exc}")
        if outcome.awaits_fencing:
            return outcome, max(grace_left_ms, 1)
        return outcome, self._config.failed_ledger_retry_delay_ms

    async def _finish(self, outcome: ReplicationOutcome, retry_in_ms: int) -> None:
        ledger_id, c = outcome.ledger_id, self._counters
        c.entries_copied += outcome.entries_copied
        c.bytes_copied += outcome.bytes_copied
        try:
            if outcome.done:
                await self._urm.mark_replicated(ledger_id)
                c.replicated += 1
                c.first_seen_ms.pop(ledger_id, None)
                return
        except BKeeperError as exc:
            outcome = ReplicationOutcome(ledger_id, {}, 0, 0, False, f"removing the mark: {exc}")
        if not outcome.awaits_fencing:
            c.failures += 1
            c.last_failure = f"ledger {ledger_id}: {outcome.reason}"
            log.warning(
                "ledger %d stays under-replicated, retried in %d ms: %s",
                ledger_id,
                retry_in_ms,
                outcome.reason,
            )
        self._defer(ledger_id, retry_in_ms)
        try:
            await self._urm.release(ledger_id)
        except BKeeperError as exc:  # the lock goes with the session at worst
            log.warning("ledger %d: could not release its lock: %s", ledger_id, exc)

    def _defer(self, ledger_id: int, delay_ms: int) -> None:
        self._deferred.pop(ledger_id, None)
        while len(self._deferred) >= DEFERRED_LEDGERS_MAX:
            del self._deferred[next(iter(self._deferred))]  # the oldest: only tried sooner
        self._deferred[ledger_id] = self._clock.monotonic() + delay_ms / 1000.0

    def _first_seen_ms(self, ledger_id: int) -> int:
        seen = self._counters.first_seen_ms
        if ledger_id not in seen:
            while len(seen) >= DEFERRED_LEDGERS_MAX:
                del seen[next(iter(seen))]
            seen[ledger_id] = self._clock.wall_ms()
        return seen[ledger_id]

    async def _set_enabled(self, enabled: bool) -> None:
        if enabled != self._counters.enabled:
            self._counters.enabled = enabled
            log.info(
                "replication worker %s: %s", self._holder, "enabled" if enabled else "disabled"
            )
            await self._notify()

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()
