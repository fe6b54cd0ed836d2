"""The auditor: the elected auto-recovery process that finds under-replicated ledgers.

While leading (see :func:`lead_audits`), :meth:`Auditor.run` follows three things at once:

* the available bookies (writable and read-only, ``bk.cluster.registry.watch()``): a bookie
  that leaves is *lost since* then (:class:`~bkeeper.autorecovery.findings.LossTracker`); one
  back before the delay is forgotten;
* the cluster's ``lostBookieRecoveryDelay`` node (seconds; absent: the config's default): a
  lost bookie is due once lost for that long; any write of the node (``triggeraudit``) audits
  every lost bookie at once;
* time: the bookie check (every ``bookie_check_interval_s``, and once at start) and
  check-all-ledgers (every ``check_all_ledgers_interval_s``, next due from the cluster's
  ``checkallledgersctime``, so a new auditor does not repeat a check that just ran), the
  placement check (every ``placement_check_interval_s``, 0: off; its own ctime node) and the
  replicas check (every ``replicas_check_interval_s``, 0: off; ``replicascheckctime``).

A *bookie check* (:meth:`Auditor.audit_now` marks every lost bookie, the periodic one only
those due) reads every ledger's metadata (``audit_metadata_reads_in_flight_max`` at once) and
marks each ledger holding entries on a due bookie (``mark_underreplicated(ledger, bookies)``,
the pure decision is :func:`~bkeeper.autorecovery.findings.ledgers_to_mark`). A bookie absent
that the auditor never saw (it died before this auditor started) is lost from when the check
finds it, so a new auditor waits out the delay too. *Check-all-ledgers* probes the first and
last entry each live replica should hold in each segment (``check_reads_in_flight_max`` at
once; :func:`~bkeeper.autorecovery.findings.fragment_checks`) and marks the ledger with the
replicas that answered "no such entry/ledger" or a bad copy; "unknown" (limbo: the bookie
repairs itself) and unreachable replicas are reported, not marked. The *replicas check* asks
every live replica for its list of entries (:mod:`bkeeper.autorecovery.replicas`) and marks
the ledger with the replicas that lack any entry they should store (an entry lost in the
middle of a fragment, which the probes of the first and last cannot see); its report says,
per ledger, how many entries are left below the write quorum, the ack quorum, or with no copy.

As Apache BookKeeper's auditor, nothing is marked while the cluster's ``disable`` flag is
set: due bookies stay pending and are marked once it is cleared (looked at again every
``idle_poll_interval_ms``). A pass that fails (metadata unreachable) is logged and tried
again after ``audit_retry_delay_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Awaitable, Callable

from bkeeper.autorecovery.config import AutoRecoveryConfig
from bkeeper.autorecovery.findings import (
    AuditReport,
    LossTracker,
    Tally,
    bookies_holding_entries,
    placement_violations,
)
from bkeeper.autorecovery.ledger_scan import each_ledger
from bkeeper.autorecovery.replicas import list_ledger, probe_ledger
from bkeeper.autorecovery.replicate import relocations
from bkeeper.client.bookkeeper import BookKeeper
from bkeeper.client.placement import Domains
from bkeeper.common.clock import Clock, default_clock
from bkeeper.common.errors import (
    LedgerNotFoundError,
    MetadataError,
    ProtocolError,
)
from bkeeper.common.tasks import end_if_cancelled, within
from bkeeper.meta.election import LeaderElection
from bkeeper.meta.ledger_metadata import LedgerMetadata
from bkeeper.meta.underreplication import UnderReplicationManager

__all__ = ["Auditor", "lead_audits"]

log = logging.getLogger(__name__)

CHECK_ALL_LEDGERS = "checkallledgers"
PLACEMENT_CHECK = "placementpolicycheck"
REPLICAS_CHECK = "replicascheck"


class Auditor:
    """The auditor's work while leading; see the module docstring."""

    def __init__(
        self,
        bk: BookKeeper,
        urm: UnderReplicationManager,
        config: AutoRecoveryConfig,
        *,
        clock: Clock | None = None,
    ) -> None:
        self._bk = bk
        self._urm = urm
        self._config = config
        self._clock: Clock = clock or default_clock()
        self._tracker = LossTracker()
        self._delay_s: int = config.lost_bookie_recovery_delay_s
        self._triggered = False
        self._wake = asyncio.Event()
        self._delay_known = asyncio.Event()
        self._live_known = asyncio.Event()
        self._next_bookie_check = math.inf
        #: periodic check (a ctime node's name) -> when it is due next (monotonic seconds)
        self._next_check: dict[str, float] = {}
        self._hold_until = -math.inf  # disabled or a failed pass: no bookie check before
        #: the available bookies last seen (writable and read-only)
        self.live: frozenset[str] = frozenset()
        #: passes of :meth:`run`'s loop completed (tests wait on it)
        self.passes = 0
        #: the last report of each kind of check ("bookies", "ledgers", "replicas")
        self.reports: dict[str, AuditReport] = {}
        self._checks: dict[str, Callable[[], Awaitable[AuditReport]]] = {
            CHECK_ALL_LEDGERS: self.check_all_ledgers,
            PLACEMENT_CHECK: self.placement_check,
            REPLICAS_CHECK: self.replicas_check,
        }

    @property
    def delay_s(self) -> int:
        """The lost-bookie delay in force (the cluster's node, else the config's default)."""
        return self._delay_s

    @property
    def pending(self) -> dict[str, float]:
        """Lost bookies not marked yet -> since when (the clock's monotonic seconds)."""
        return dict(self._tracker.lost_since)

    def poke(self) -> None:
        """Look at the time again now (after the clock moved, in tests)."""
        self._wake.set()

    async def run(self) -> None:
        """Audit until cancelled (call it only while this process leads the election)."""
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self._follow_bookies(), name="auditor: bookies")
                group.create_task(self._follow_delay(), name="auditor: delay")
                group.create_task(self._loop(), name="auditor: checks")
        except BaseExceptionGroup as failed:  # the first failure stopped the others: raise it
            raise failed.exceptions[0] from None

    async def audit_now(self) -> AuditReport:
        """Mark every ledger with entries on a bookie that is not available, at once."""
        return await self._bookie_check(force=True)

    async def check_all_ledgers(self) -> AuditReport:
        """Probe the first and last entry of each replica's part of each segment; mark the
        ledgers whose replicas lack them. Records the check's ctime in the cluster."""
        if not await self._urm.is_enabled():
            log.info("auto-recovery is disabled: check of all ledgers deferred")
            return AuditReport(deferred=True)
        bookies = await self._bk.cluster.registry.bookies()
        live = bookies.writable | bookies.read_only
        tally = Tally()
        probes = asyncio.Semaphore(self._config.check_reads_in_flight_max)

        async def visit(ledger_id: int, meta: LedgerMetadata) -> None:
            await self._check_ledger(ledger_id, meta, live, probes, tally)

        await self._each_ledger(visit)
        await self._urm.set_check_ctime_ms(CHECK_ALL_LEDGERS, self._clock.wall_ms())
        report = tally.report()
        self.reports["ledgers"] = report
        log.info(
            "checked %d ledgers (%d fragments): %d marked, %d could not be checked",
            report.ledgers_audited,
            report.fragments_checked,
            len(report.marked),
            len(report.failed),
        )
        return report

    async def placement_check(self) -> AuditReport:
        """Find the segments whose write quorums span fewer racks than the client's placement
        asks (``min_racks_per_write_quorum``, or fewer when the live bookies span fewer
        racks; with ``placement="random"`` every bookie counts as on one rack and all
        adhere), reported in ``not_adhering``. With ``placement_repair`` each such ledger is
        also marked under-replicated, naming the bookies to move
        (:func:`~bkeeper.autorecovery.replicate.relocations`), for the replication workers to
        relocate (Apache BookKeeper's ``repairedPlacementPolicyNotAdheringBookieEnable``).
        Records its ctime."""
        domains = await self._bk.domains() or Domains()
        bookies = await self._bk.cluster.registry.bookies()
        live = bookies.writable | bookies.read_only
        racks_available = len({domains.rack(b) for b in live})
        tally = Tally()
        repair = self._config.placement_repair

        async def visit(ledger_id: int, meta: LedgerMetadata) -> None:
            tally.ledgers += 1
            bad = placement_violations(meta, domains, racks_available)
            if not bad:
                return
            tally.not_adhering[ledger_id] = bad
            moves = relocations(meta, domains, bookies.writable, racks_available)
            moving = sorted({bookie for segment in moves.values() for bookie in segment})
            if repair and moving and meta.has_password:
                await self._urm.mark_underreplicated(ledger_id, moving)
                tally.marked[ledger_id] = tuple(moving)

        await self._each_ledger(visit, tally)
        await self._urm.set_check_ctime_ms(PLACEMENT_CHECK, self._clock.wall_ms())
        report = tally.report()
        self.reports["placement"] = report
        if report.not_adhering:
            log.warning(
                "placement check: %d of %d ledgers have segments not adhering to the "
                "placement (%d racks per write quorum); %d marked for relocation",
                len(report.not_adhering),
                report.ledgers_audited,
                domains.min_racks,
                len(report.marked),
            )
        return report

    # -- the loop ---------------------------------------------------------------------------
    async def _follow_bookies(self) -> None:
        async with contextlib.aclosing(self._bk.cluster.registry.watch()) as sets:
            async for bookie_set in sets:
                live = frozenset(bookie_set.writable | bookie_set.read_only)
                self._tracker.update(live, self._clock.monotonic())
                gone = self.live - live
                if gone:
                    log.info(
                        "bookies lost: %s (delay %d s)", ", ".join(sorted(gone)), self._delay_s
                    )
                self.live = live
                self._live_known.set()
                self._wake.set()

    async def _follow_delay(self) -> None:
        def unreadable(exc: ProtocolError) -> None:
            default_s = self._config.lost_bookie_recovery_delay_s
            log.warning("%s: using %d s until it is rewritten", exc, default_s)

        first = True
        watch = self._urm.watch_lost_bookie_recovery_delay(on_unreadable=unreadable)
        async with contextlib.aclosing(watch) as values:
            async for value in values:
                self._set_delay(value, triggered=not first)
                first = False

    def _set_delay(self, value: int | None, *, triggered: bool) -> None:
        self._delay_s = self._config.lost_bookie_recovery_delay_s if value is None else value
        if triggered:
            log.info("lostBookieRecoveryDelay written (%d s): auditing now", self._delay_s)
            self._triggered = True
        self._delay_known.set()
        self._wake.set()

    async def _loop(self) -> None:
        await self._delay_known.wait()
        await self._live_known.wait()
        now = self._clock.monotonic()
        self._next_bookie_check = now  # once at start, whatever the interval
        for check, interval in self._periodic().items():
            if interval <= 0:
                continue
            try:
                last_ms = await self._urm.check_ctime_ms(check)
            except ProtocolError as exc:
                log.warning("%s: taken as never run", exc)
                last_ms = None
            if last_ms is None:  # never ran: now (as BookKeeper)
                self._next_check[check] = now
            else:  # a clock behind the recorded time counts as "just ran"
                since_s = max(0.0, (self._clock.wall_ms() - last_ms) / 1000)
                self._next_check[check] = now + max(0.0, interval - since_s)
        while True:
            self._wake.clear()
            try:
                await self._pass()
            except (MetadataError, ProtocolError) as exc:
                end_if_cancelled("the audit pass", exc, log)
                retry_s = self._config.audit_retry_delay_s
                log.warning("audit pass failed, again in %.1f s: %s", retry_s, exc)
                retry_at = self._clock.monotonic() + retry_s
                self._hold_until = retry_at  # what was due stays due, tried again then
                for check, due in self._next_check.items():
                    self._next_check[check] = max(due, retry_at)
            self.passes += 1
            now = self._clock.monotonic()
            wait_s = self._next_due() - now
            if wait_s > 0:
                with contextlib.suppress(TimeoutError):
                    await within(self._wake.wait(), None if math.isinf(wait_s) else wait_s)

    def _next_due(self) -> float:
        due = self._tracker.next_due(self._delay_s)
        bookies = min(
            self._next_bookie_check,
            math.inf if due is None else due,
            -math.inf if self._triggered else math.inf,
        )
        return min(max(bookies, self._hold_until), *self._next_check.values(), math.inf)

    async def _pass(self) -> None:
        now = self._clock.monotonic()
        if now >= self._hold_until:
            if self._triggered:
                self._triggered = False
                await self._run_bookie_check(True, now)
            elif now >= self._next_bookie_check or self._tracker.due(now, self._delay_s):
                await self._run_bookie_check(False, now)
        for check, interval in self._periodic().items():
            if now < self._next_check.get(check, math.inf):
                continue
            report = await self._checks[check]()
            if report.deferred:
                self._next_check[check] = now + self._config.idle_poll_interval_ms / 1000
            else:
                self._next_check[check] = now + interval

    def _periodic(self) -> dict[str, float]:
        return {
            CHECK_ALL_LEDGERS: self._config.check_all_ledgers_interval_s,
            PLACEMENT_CHECK: self._config.placement_check_interval_s,
            REPLICAS_CHECK: self._config.replicas_check_interval_s,
        }

    async def _run_bookie_check(self, force: bool, now: float) -> None:
        periodic = now >= self._next_bookie_check
        report = await self._bookie_check(force=force)
        if report.deferred:  # disabled: lost bookies stay pending, looked at again later
            self._triggered = self._triggered or force
            self._hold_until = now + self._config.idle_poll_interval_ms / 1000
            return
        if periodic or force:
            interval = self._config.bookie_check_interval_s
            self._next_bookie_check = now + interval if interval > 0 else math.inf

    # -- bookie check -----------------------------------------------------------------------
    async def _bookie_check(self, *, force: bool) -> AuditReport:
        if not await self._urm.is_enabled():
            log.info("auto-recovery is disabled: bookie check deferred")
            return AuditReport(deferred=True)
        bookies = await self._bk.cluster.registry.bookies()
        live = frozenset(bookies.writable | bookies.read_only)
        now = self._clock.monotonic()
        self._tracker.update(live, now)
        tracked = set(self._tracker.lost_since)
        due = tracked if force else set(self._tracker.due(now, self._delay_s))
        # a bookie found absent without having been seen leave: lost from now on
        due_when_found = force or self._delay_s == 0
        tally = Tally()

        async def visit(ledger_id: int, meta: LedgerMetadata) -> None:
            tally.ledgers += 1
            lost = bookies_holding_entries(meta) - live
            tally.lost |= lost
            found = lost - tracked
            for bookie in found:
                self._tracker.lost_since.setdefault(bookie, now)
            mark = sorted(b for b in lost if b in due or (b in found and due_when_found))
            if mark:
                await self._urm.mark_underreplicated(ledger_id, mark)
                tally.marked[ledger_id] = tuple(mark)

        await self._each_ledger(visit, tally)
        handled = due | (tally.lost - tracked if due_when_found else set())
        self._tracker.handled(handled)
        report = tally.report()
        self.reports["bookies"] = report
        if report.marked or report.lost:
            log.info(
                "bookie check of %d ledgers: lost %s; %d ledgers marked",
                report.ledgers_audited,
                ", ".join(report.lost) or "none",
                len(report.marked),
            )
        return report

    # -- check all ledgers ------------------------------------------------------------------
    async def _check_ledger(
        self,
        ledger_id: int,
        meta: LedgerMetadata,
        live: frozenset[str],
        probes: asyncio.Semaphore,
        tally: Tally,
    ) -> None:
        tally.ledgers += 1
        tally.lost |= {b for ensemble in meta.segments.values() for b in ensemble} - live
        try:
            checks, results = await probe_ledger(self._bk, ledger_id, meta, live, probes)
        except LedgerNotFoundError:
            return  # deleted meanwhile
        tally.fragments += len(checks)
        missing = sorted(
            {
                c.bookie
                for c, (verdict, _) in zip(checks, results, strict=True)
                if verdict == "missing"
            }
        )
        unknown = [why for verdict, why in results if verdict == "unknown"]
        if unknown:
            tally.failed[ledger_id] = unknown[0]
        if missing:
            await self._urm.mark_underreplicated(ledger_id, missing)
            tally.marked[ledger_id] = tuple(missing)

    # -- replicas check ---------------------------------------------------------------------
    async def replicas_check(self) -> AuditReport:
        """Ask each live replica of each ledger for its list of entries; mark the ledgers
        whose replicas lack entries they should store (with those replicas). Records the
        check's ctime in the cluster."""
        if not await self._urm.is_enabled():
            log.info("auto-recovery is disabled: replicas check deferred")
            return AuditReport(deferred=True)
        bookies = await self._bk.cluster.registry.bookies()
        live = bookies.writable | bookies.read_only
        tally = Tally()
        lists = asyncio.Semaphore(self._config.check_reads_in_flight_max)

        async def check(ledger_id: int, meta: LedgerMetadata) -> None:
            shortfall, unknown, asked = await list_ledger(self._bk, ledger_id, meta, live, lists)
            tally.fragments += asked
            if unknown:
                tally.failed[ledger_id] = next(iter(unknown.values()))
            if shortfall:
                tally.shortfalls[ledger_id] = shortfall
                await self._urm.mark_underreplicated(ledger_id, list(shortfall.lacking))
                tally.marked[ledger_id] = tuple(shortfall.lacking)

        async def visit(ledger_id: int, meta: LedgerMetadata) -> None:
            tally.ledgers += 1
            tally.lost |= {b for ensemble in meta.segments.values() for b in ensemble} - live
            await check(ledger_id, meta)

        await self._each_ledger(visit)
        await self._recheck(tally, check)
        await self._urm.set_check_ctime_ms(REPLICAS_CHECK, self._clock.wall_ms())
        report = tally.report()
        self.reports["replicas"] = report
        log.info(
            "replicas check of %d ledgers (%d replicas listed): %d marked, %d could not be checked",
            *(report.ledgers_audited, report.fragments_checked, len(report.marked)),
            len(report.failed),
        )
        return report

    async def _recheck(
        self,
        tally: Tally,
        check: Callable[[int, LedgerMetadata], Awaitable[None]],
    ) -> None:
        """Ask again about the ledgers a replica could not list for (a timeout under load, a
        bookie restarting), ``replicas_recheck_rounds`` times at most, after
        ``replicas_recheck_pause_s`` each: left for the next check, one that lacks entries
        would stay under-replicated that long."""
        for _round in range(self._config.replicas_recheck_rounds):
            if not tally.failed:
                return
            await asyncio.sleep(self._config.replicas_recheck_pause_s)
            again, tally.failed = sorted(tally.failed), {}
            log.info("replicas check: asking again about %d ledgers", len(again))

            async def one(ledger_id: int) -> None:
                try:
                    meta = await self._bk.ledger_metadata(ledger_id)
                except LedgerNotFoundError:
                    return  # deleted meanwhile
                await check(ledger_id, meta)

            await asyncio.gather(*(one(ledger_id) for ledger_id in again))

    async def _each_ledger(
        self,
        visit: Callable[[int, LedgerMetadata], Awaitable[None]],
        tally: Tally | None = None,
    ) -> None:
        """:func:`~bkeeper.autorecovery.ledger_scan.each_ledger`, unreadable metadata in
        ``tally.failed``."""
        workers = self._config.audit_metadata_reads_in_flight_max
        failed = None if tally is None else tally.failed
        await each_ledger(self._bk, workers, visit, failed)


async def lead_audits(election: LeaderElection, auditor: Callable[[], Auditor]) -> None:
    """Run a new ``auditor()`` each time ``election`` (started) makes this process the
    leader, until it loses leadership; until cancelled."""
    while True:
        await election.wait_leadership()
        try:
            async with asyncio.TaskGroup() as group:  # the auditor until leadership is lost
                running = group.create_task(auditor().run(), name="auditor")
                lost = group.create_task(election.wait_leadership_lost(), name="auditor: lost")
                await asyncio.wait({running, lost}, return_when=asyncio.FIRST_COMPLETED)
                running.cancel()
                lost.cancel()
        except BaseExceptionGroup as failed:  # the auditor's failure
            raise failed.exceptions[0] from None
        log.info("auditor stopped: leadership lost")
