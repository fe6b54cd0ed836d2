"""The replication worker: takes marked ledgers, repairs each with
:func:`~bkeeper.autorecovery.repair.replicate_ledger`, removes the marks.

:class:`ReplicationWorker` runs the queue: it locks a marked ledger
(:class:`~bkeeper.meta.underreplication.UnderReplicationManager`), repairs it, and removes the
mark; ``ledgers_in_parallel`` at once. While the cluster's auto-recovery is disabled it stays
idle. The lanes look at the queue when it may have changed, as Java's workers do: one-shot
watches on the queue's directories, the locks and the disable flag
(:meth:`~bkeeper.meta.underreplication.UnderReplicationManager.watch_queue`) wake them, at
most once per ``idle_poll_interval_ms``; an idle cluster's workers send no metadata request
(they listed the queue and read the flag every interval before). Where the watches cannot be
set (metadata unreachable, or more than :data:`WATCHED_DIRECTORIES_MAX` directories queued),
and after a look that failed, they look every interval; a deferred ledger is looked for when
it is due. The flag is read at most once per look, not per ledger; the registered bookies
are followed by a watch, not listed per ledger (fewer metadata round trips per ledger, which
the ZooKeeper server shares the machine's CPU for). An open ledger
waiting for its writer is left (lock released, mark kept) until
``open_ledger_grace_period_ms`` after it was marked; a failed ledger until
``failed_ledger_retry_delay_ms`` later. Which ledgers wait is remembered in memory, at most
:data:`DEFERRED_LEDGERS_MAX` (past that the oldest is forgotten: it is only tried sooner).
The worker takes ledgers by scanning the queue (listings only, at most :data:`CANDIDATES_MAX`
ids per scan, leaving out the locked ones) and trying each lock in random order, skipping
those it works on or defers: the lock node is ephemeral, owned by the worker's metadata
session, so a worker that dies gives its ledgers back.

An attempt that leaves a ledger queued records why under the lock
(:meth:`~bkeeper.meta.underreplication.UnderReplicationManager.set_blocked`: kind and one
line, such as ``no candidate bookie for ... : 2 writable, 2 already in the ensemble``), and
logs it, only when the reason changed (the recorded one is read to compare: one metadata read
per failed attempt): once per change of state per ledger, not per retry.
Removing the mark removes the reason. When the registry watch sees a writable bookie join,
the ledgers this worker found with no candidate are tried again at once (at the lanes' next
look) instead of after ``failed_ledger_retry_delay_ms``. For an open
ledger among them, the grace period before fencing starts again then: its writer, which went
on without the lost bookie for want of a replacement (docs/client.md, degraded writes), is
given the time to replace it itself; fencing it at once would stop a writer that is about to
heal on its own.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from bkeeper.autorecovery.config import AutoRecoveryConfig
from bkeeper.autorecovery.recovery_adds import Throttle
from bkeeper.autorecovery.repair import ReplicationOutcome, replicate_ledger
from bkeeper.autorecovery.replicate import BlockKind
from bkeeper.client.bookkeeper import BookKeeper
from bkeeper.common.clock import Clock, default_clock
from bkeeper.common.errors import BKeeperError, MetadataClosedError, ProtocolError
from bkeeper.common.rand import new_rng
from bkeeper.meta.events import wait_any
from bkeeper.meta.registry import BookieSet
from bkeeper.meta.underreplication import (
    BlockedReason,
    UnderreplicatedLedger,
    UnderReplicationManager,
)

__all__ = [
    "CANDIDATES_MAX",
    "DEFERRED_LEDGERS_MAX",
    "WATCHED_DIRECTORIES_MAX",
    "ReplicationWorker",
    "WorkerStatus",
]

log = logging.getLogger(__name__)

#: Ledgers a worker remembers as waiting (failed, or an open ledger in its grace period).
DEFERRED_LEDGERS_MAX = 100_000
#: Queued ledger ids one scan of the queue collects.
CANDIDATES_MAX = 10_000
#: Directories of the queue a worker watches; past that it polls (every idle interval).
WATCHED_DIRECTORIES_MAX = 1_000


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
    #: (ledger, kind) of the ledgers this worker last left queued, and why
    blocked: tuple[tuple[int, str], ...] = ()


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
        self._clock: Clock = clock or default_clock()
        self._rng = rng
        self._throttle = Throttle(config.rate_bytes_per_s, self._clock, config.bytes_in_flight_max)
        self._in_progress: set[int] = set()
        self._deferred: dict[int, float] = {}  # ledger -> monotonic time to try it again
        #: ledger -> why this worker's last attempt left it queued (at most
        #: DEFERRED_LEDGERS_MAX; the oldest forgotten: only not woken when a bookie joins)
        self._blocked: dict[int, BlockKind] = {}
        #: ledger -> wall ms when a bookie joined while it had no candidate: an open
        #: ledger's grace period counts from then (module doc; at most DEFERRED_LEDGERS_MAX)
        self._candidate_since_ms: dict[int, int] = {}
        #: Ledgers whose lock may be held by this worker's session though no lane works on
        #: them: a lock or a release that failed as the connection to ZooKeeper was lost
        #: (the session, and with it the lock, may outlive the outage). Scans do not skip
        #: their locks; taking one again sorts it out (ours: taken; another's: skipped).
        self._maybe_ours: set[int] = set()
        self._candidates: collections.deque[int] = collections.deque()
        self._counters = _Counters()
        self._changed = asyncio.Condition()
        #: held by the lane looking for work (module doc: one lane wakes per idle interval)
        self._turn = asyncio.Lock()
        #: set while the lanes may look for work; cleared for an interval when one found none
        self._looking = asyncio.Event()
        self._looking.set()
        self._idle_timer: asyncio.TimerHandle | None = None
        #: looks asked for so far (a look asked during a scan is not lost to its idling)
        self._looks_asked = 0
        #: the queue's watches are armed: an idle lane needs no timer to see a change
        self._queue_watched = False
        self._enabled_stale = True  # the disable flag is read again at the next look
        #: the registered bookies as followed by a watch (None: not known, each repair reads)
        self._bookies: BookieSet | None = None

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
            tuple(sorted((ledger, str(kind)) for ledger, kind in self._blocked.items())),
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
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self._follow_bookies(), name="replication: bookies")
                group.create_task(self._follow_queue(), name="replication: queue")
                for lane in range(self._config.ledgers_in_parallel):
                    group.create_task(self._lane(), name=f"replication lane {lane}")
        finally:
            if self._idle_timer is not None:
                self._idle_timer.cancel()

    async def _follow_bookies(self) -> None:
        """Keep :attr:`_bookies` current from the registry's watch (one watch instead of two
        listings per ledger repaired); if the watch fails, each repair reads them again."""
        try:
            async with contextlib.aclosing(self._bk.cluster.registry.watch()) as changes:
                async for bookies in changes:
                    before, self._bookies = self._bookies, bookies
                    if before is not None and bookies.writable - before.writable:
                        self._wake_blocked()
        except BKeeperError as exc:
            log.warning("replication worker %s: registry watch ended: %s", self._holder, exc)
        finally:
            self._bookies = None

    async def _follow_queue(self) -> None:
        """Wake the lanes when the queue may have changed (module doc): arm its watches, ask
        for a look (a scan after the arming misses nothing), wait for an event; at most one
        arming per idle interval. Where the watches cannot be set, a look every interval."""
        idle_s = self._config.idle_poll_interval_ms / 1000.0
        failing: str | None = None
        while True:
            armed_at = self._clock.monotonic()
            try:
                subs = await self._urm.watch_queue(WATCHED_DIRECTORIES_MAX)
                why = None if subs is not None else f"over {WATCHED_DIRECTORIES_MAX} directories"
            except BKeeperError as exc:
                subs, why = None, str(exc)
            if why != failing and why is not None:
                log.info(
                    "replication worker %s: looking at the queue every %d ms (%s)",
                    self._holder,
                    self._config.idle_poll_interval_ms,
                    why,
                )
            failing = why
            self._queue_watched = subs is not None
            self._enabled_stale = True
            self._look_now()
            try:
                if subs is None:
                    await asyncio.sleep(idle_s)
                    continue
                with contextlib.suppress(MetadataClosedError):  # closing: woken as by a change
                    await wait_any(*subs)
            finally:
                self._queue_watched = False
                for sub in subs or ():
                    sub.close()
            await asyncio.sleep(max(0.0, armed_at + idle_s - self._clock.monotonic()))

    def _wake_blocked(self) -> None:
        """A writable bookie joined: the ledgers that had no candidate are tried again at
        the lanes' next look, not after ``failed_ledger_retry_delay_ms``."""
        woken = [x for x, kind in self._blocked.items() if kind is BlockKind.NO_CANDIDATE]
        now_ms = self._clock.wall_ms()
        for ledger_id in woken:
            self._deferred.pop(ledger_id, None)
            self._candidate_since_ms.pop(ledger_id, None)
            while len(self._candidate_since_ms) >= DEFERRED_LEDGERS_MAX:
                del self._candidate_since_ms[next(iter(self._candidate_since_ms))]
            self._candidate_since_ms[ledger_id] = now_ms
        if woken:
            log.info("a bookie joined: %d ledgers without a candidate tried again", len(woken))
            self._look_now()
            self._candidates.clear()  # the next scan takes them too

    async def _lane(self) -> None:
        while True:
            entry = await self._next_ledger()  # in progress once taken
            await self._repair(entry)

    # -- taking ledgers ------------------------------------------------------------------
    async def _next_ledger(self) -> UnderreplicatedLedger:
        idle_s = self._config.idle_poll_interval_ms / 1000.0
        loop = asyncio.get_running_loop()
        while True:
            # One lane at a time looks for work (the others queue on the turn, asleep): an
            # idle worker wakes one lane per interval, not all of them. Once there are
            # candidates the turn passes on at once, so that the lanes take them in parallel
            # (taking costs metadata round trips: one taker for all lanes would be their
            # bottleneck).
            async with self._turn:
                await self._looking.wait()
                asked = self._looks_asked
                try:
                    if self._enabled_stale:  # once per look, not per take
                        self._enabled_stale = False
                        await self._set_enabled(await self._urm.is_enabled())
                    if self._counters.enabled and not self._candidates:
                        await self._scan()
                except BKeeperError as exc:
                    log.warning("replication worker %s: cannot take: %s", self._holder, exc)
                    self._enabled_stale = True
                    self._idle(loop, idle_s, asked, failed=True)
                    continue
                if not self._counters.enabled or not self._candidates:
                    self._idle(loop, idle_s, asked)
                    continue
            failed = False
            try:
                entry = await self._lock_candidate()
            except BKeeperError as exc:
                log.warning("replication worker %s: cannot take: %s", self._holder, exc)
                entry, failed = None, True
            if entry is not None:
                return entry
            if not self._candidates:
                self._idle(loop, idle_s, asked, failed=failed)

    def _idle(
        self, loop: asyncio.AbstractEventLoop, idle_s: float, asked: int, *, failed: bool = False
    ) -> None:
        """No lane looks for work until it is asked to (the queue's watch, a bookie joining)
        or, not before ``idle_s`` from now: after a failed look, while the queue is not
        watched, or when the first deferred ledger is due (the last lane to idle decides).
        A look asked for since ``asked`` (during the scan) is not put off."""
        if self._looks_asked != asked:
            return
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        self._looking.clear()
        delay_s = idle_s if failed or not self._queue_watched else self._due_in_s()
        if delay_s is not None:
            self._idle_timer = loop.call_later(max(delay_s, idle_s), self._look_now)

    def _due_in_s(self) -> float | None:
        """Seconds until the first deferred ledger is due (None: none waits). Ledgers due
        already are forgotten: a scan since took them if they were still queued."""
        now = self._clock.monotonic()
        for ledger_id in [x for x, at in self._deferred.items() if at <= now]:
            del self._deferred[ledger_id]
        return min(self._deferred.values()) - now if self._deferred else None

    def _look_now(self) -> None:
        self._looks_asked += 1
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        self._looking.set()

    async def _lock_candidate(self) -> UnderreplicatedLedger | None:
        """The first candidate whose lock this worker gets (None: none left)."""
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
            except BKeeperError:
                self._may_hold(ledger_id)  # the lock node may have been made before the loss
                raise
            finally:
                if entry is None:
                    self._in_progress.discard(ledger_id)
            self._maybe_ours.discard(ledger_id)
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
            free = ledger_id not in locked or ledger_id in self._maybe_ours
            if free and not self._skipped(ledger_id):
                found.append(ledger_id)
                if len(found) >= CANDIDATES_MAX:
                    break
        (self._rng if self._rng is not None else new_rng()).shuffle(found)
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
        marked_ms = max(marked_ms, self._candidate_since_ms.get(ledger_id, 0))
        grace_ms = self._config.open_ledger_grace_period_ms
        grace_left_ms = marked_ms + grace_ms - self._clock.wall_ms()
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
                bookies=self._bookies,
                relocate=self._config.placement_repair,
            )
        except Exception as exc:  # a bug: reported, and the ledger stays marked for a retry
            log.exception("ledger %d: re-replication failed unexpectedly", ledger_id)
            outcome = ReplicationOutcome(ledger_id, {}, 0, 0, False, f"{type(exc).__name__}: {exc}")
        if outcome.awaits_fencing:
            until = time.strftime("%H:%M:%S UTC", time.gmtime((marked_ms + grace_ms) / 1000))
            reason = f"{outcome.reason} (open_ledger_grace_period_ms), until {until}"
            return dataclasses.replace(outcome, reason=reason), max(grace_left_ms, 1)
        return outcome, self._config.failed_ledger_retry_delay_ms

    async def _finish(self, outcome: ReplicationOutcome, retry_in_ms: int) -> None:
        ledger_id, c = outcome.ledger_id, self._counters
        c.entries_copied += outcome.entries_copied
        c.bytes_copied += outcome.bytes_copied
        try:
            if outcome.done:
                await self._urm.mark_replicated(ledger_id)  # and its reason
                c.replicated += 1
                c.first_seen_ms.pop(ledger_id, None)
                self._blocked.pop(ledger_id, None)
                self._candidate_since_ms.pop(ledger_id, None)
                return
        except BKeeperError as exc:
            outcome = ReplicationOutcome(ledger_id, {}, 0, 0, False, f"removing the mark: {exc}")
        if not outcome.awaits_fencing:
            c.failures += 1
            c.last_failure = f"ledger {ledger_id}: {outcome.reason}"
        await self._record_blocked(outcome, retry_in_ms)
        self._defer(ledger_id, retry_in_ms)
        try:
            await self._urm.release(ledger_id)
        except BKeeperError as exc:  # still ours if the session outlives the outage
            self._may_hold(ledger_id)
            log.warning("ledger %d: could not release its lock: %s", ledger_id, exc)

    async def _record_blocked(self, outcome: ReplicationOutcome, retry_in_ms: int) -> None:
        """Record (under the lock) and log why the ledger stays queued, when that changed."""
        ledger_id = outcome.ledger_id
        kind = outcome.kind or BlockKind.ERROR
        self._blocked.pop(ledger_id, None)
        while len(self._blocked) >= DEFERRED_LEDGERS_MAX:
            del self._blocked[next(iter(self._blocked))]
        self._blocked[ledger_id] = kind
        reason = BlockedReason(str(kind), outcome.reason, self._clock.wall_ms(), self._holder)
        try:
            try:
                recorded = await self._urm.blocked(ledger_id)
            except ProtocolError:
                recorded = None  # unreadable: replaced
            if reason.same_as(recorded):
                return  # as recorded already (by this worker or another): said once
            await self._urm.set_blocked(ledger_id, reason)
        except BKeeperError as exc:
            log.warning("ledger %d: could not record why it waits: %s", ledger_id, exc)
        level = logging.INFO if kind is BlockKind.AWAITING_WRITER else logging.WARNING
        log.log(
            level,
            "ledger %d stays under-replicated (%s, tried again in %d ms unless a bookie joins): %s",
            ledger_id,
            kind,
            retry_in_ms,
            outcome.reason,
        )

    def _may_hold(self, ledger_id: int) -> None:
        if ledger_id not in self._maybe_ours:
            while len(self._maybe_ours) >= DEFERRED_LEDGERS_MAX:
                self._maybe_ours.pop()  # forgotten: its lock goes with the session at worst
            self._maybe_ours.add(ledger_id)

    def _defer(self, ledger_id: int, delay_ms: int) -> None:
        self._deferred.pop(ledger_id, None)
        while len(self._deferred) >= DEFERRED_LEDGERS_MAX:
            del self._deferred[next(iter(self._deferred))]  # the oldest: only tried sooner
        self._deferred[ledger_id] = self._clock.monotonic() + delay_ms / 1000.0
        if not self._looking.is_set():
            self._look_now()  # idle lanes set their timer for it

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
