"""``AutoRecovery``: one auto-recovery participant, as Apache BookKeeper's AutoRecoveryMain.

It runs, on one client and one metadata session:

* a candidate in the auditor election (``<root>/underreplication/auditorelection/V_<seq>``,
  vote ``AuditorVoteFormat {bookieId: <id>}``), and, while it leads, the
  :class:`~bkeeper.autorecovery.auditor.Auditor`: started when leadership comes, cancelled
  when it goes (session expired or lost), started afresh at the next term;
* at the start of each term, the cluster's ``lostBookieRecoveryDelay`` node, created with
  this participant's ``lost_bookie_recovery_delay_s`` if absent (as Java's auditor does);
* a :class:`~bkeeper.autorecovery.worker.ReplicationWorker`, always, taking marked ledgers
  under locks held as ``<id>``.

``<id>`` is the participant's name in the vote and in every lock it holds: a bookie running
auto-recovery inside itself uses its bookie id (as BookKeeper does); a process of its own
uses what ``bkeeper autorecovery --id`` says (default ``<hostname>:autorecovery-<pid>``,
characters Java's ``BookieId`` accepts, so Java's ``whoisauditor`` prints it).

Metrics (:mod:`bkeeper.autorecovery.metrics`): ``metrics.metric_set``, for the process to
serve; while leading, the participant counts the under-replication queue every few seconds.

Invariants: at most one auditor runs per participant, and only while its election says it
leads; a failing auditor or worker is logged and restarted after a delay that doubles up to
``RESTART_DELAY_S_MAX`` (it never ends the participant, nor spins); :meth:`aclose` cancels
both, leaves the election (the next candidate leads) and releases nothing else: locks are
ephemeral and end with the session of the client the caller owns.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import socket
from collections import Counter
from collections.abc import Awaitable, Callable
from types import TracebackType

from bkeeper.autorecovery.auditor import Auditor
from bkeeper.autorecovery.config import AutoRecoveryConfig
from bkeeper.autorecovery.metrics import (
    BLOCKED_READ_MAX,
    UNDER_REPLICATED_COUNT_INTERVAL_S,
    AutoRecoveryMetrics,
)
from bkeeper.autorecovery.worker import ReplicationWorker, WorkerStatus
from bkeeper.client.bookkeeper import BookKeeper
from bkeeper.common.clock import Clock, default_clock
from bkeeper.common.errors import BKeeperError, ConfigError, MetadataError, NodeExistsError
from bkeeper.common.tasks import TaskOwner, end_if_cancelled
from bkeeper.meta.election import LeaderElection
from bkeeper.meta.layout import UNDERREPLICATION
from bkeeper.meta.store import join_path
from bkeeper.meta.underreplication import (
    LOST_BOOKIE_RECOVERY_DELAY,
    UnderReplicationManager,
    auditor_election,
)

__all__ = [
    "RESTART_DELAY_S",
    "RESTART_DELAY_S_MAX",
    "AutoRecovery",
    "check_participant_id",
    "default_participant_id",
    "keep_running",
]

log = logging.getLogger(__name__)

#: First pause before a failed auditor or worker is started again; it doubles up to the max.
RESTART_DELAY_S = 0.5
RESTART_DELAY_S_MAX = 30.0

#: What Java's ``BookieId`` accepts (``whoisauditor`` parses the vote as one).
_ID_PATTERN = re.compile(r"[a-zA-Z0-9:._-]+")
#: Longest participant id accepted (it is a znode's data, and a lock holder).
PARTICIPANT_ID_CHARS_MAX = 255


def default_participant_id() -> str:
    """``<hostname>:autorecovery-<pid>``: the id of an auto-recovery process with no bookie."""
    host = re.sub(r"[^a-zA-Z0-9._-]", "-", socket.gethostname()) or "localhost"
    return f"{host}:autorecovery-{os.getpid()}"


def check_participant_id(participant_id: str) -> None:
    """``ConfigError`` unless ``participant_id`` is a valid BookKeeper bookie id."""
    if not participant_id or len(participant_id) > PARTICIPANT_ID_CHARS_MAX:
        raise ConfigError(
            f"id: must be 1..{PARTICIPANT_ID_CHARS_MAX} characters, got {participant_id!r}"
        )
    if not _ID_PATTERN.fullmatch(participant_id):
        raise ConfigError(
            f"id: {participant_id!r} has characters other than letters, digits and ':._-'"
        )


class AutoRecovery:
    """``async with AutoRecovery(bk, "host:3181", AutoRecoveryConfig()) as recovery: ...``

    ``bk`` is a started client the caller owns (and closes after this); its metadata
    session carries the vote and the worker's locks.
    """

    def __init__(
        self,
        bk: BookKeeper,
        bookie_id: str,
        config: AutoRecoveryConfig,
        *,
        clock: Clock | None = None,
    ) -> None:
        check_participant_id(bookie_id)
        self.bookie_id = bookie_id
        self.config = config
        self._bk = bk
        self._clock = clock or default_clock()
        cluster = bk.cluster
        self._urm: UnderReplicationManager = cluster.underreplication
        self._election: LeaderElection = auditor_election(cluster.store, cluster.root, bookie_id)
        self._worker = ReplicationWorker(bk, self._urm, bookie_id, config, clock=self._clock)
        self._tasks = TaskOwner(f"autorecovery {bookie_id}")
        self._auditor: Auditor | None = None
        self._auditing = asyncio.Event()
        self._started = False
        self.metrics = AutoRecoveryMetrics(
            lambda: self._worker.status, lambda: self.is_auditor, self._placement_violations
        )

    @property
    def is_auditor(self) -> bool:
        """True while this participant leads the election and its auditor runs."""
        return self._election.is_leader and self._auditing.is_set()

    @property
    def auditor(self) -> Auditor | None:
        """The running auditor (None unless :attr:`is_auditor`, or between restarts)."""
        return self._auditor if self.is_auditor else None

    @property
    def worker_status(self) -> WorkerStatus:
        return self._worker.status

    async def start(self) -> None:
        """Lay out the under-replication nodes if missing, join the election, start the
        worker (returns at once; the auditor starts when leadership comes)."""
        if self._started:
            return
        self._started = True
        await self._urm.ensure_layout()
        await self._election.start()
        self._tasks.spawn(
            keep_running(
                f"autorecovery {self.bookie_id}: the worker", self._worker.run, clock=self._clock
            ),
            "worker",
        )
        self._tasks.spawn(
            keep_running(f"autorecovery {self.bookie_id}: the election", self._lead),
            "auditor election",
        )
        log.info("autorecovery %s started", self.bookie_id)

    async def wait_candidate(self, timeout_s: float | None = None) -> None:
        """Wait until this participant's vote is in the auditor election (``whoisauditor``
        then names an auditor: this one or one elected before it)."""
        await self._election.wait_joined(timeout_s)

    async def wait_auditor(self, timeout_s: float | None = None) -> None:
        """Wait until this participant is the auditor (``TimeoutError`` after ``timeout_s``)."""
        async with asyncio.timeout(timeout_s):
            await self._election.wait_leadership()
            await self._auditing.wait()

    async def aclose(self) -> None:
        """Stop the auditor and the worker, leave the election."""
        await self._tasks.aclose()
        await self._election.aclose()
        self._auditing.clear()
        self._auditor = None
        log.info("autorecovery %s stopped", self.bookie_id)

    async def __aenter__(self) -> AutoRecovery:
        try:
            await self.start()
        except BaseException:
            await self.aclose()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _lead(self) -> None:
        """Each term: run an auditor until leadership is lost, then wait for the next."""
        while True:
            term = await self._election.wait_leadership()
            log.info("autorecovery %s is the auditor (term %d)", self.bookie_id, term)
            await self._initialize_delay()
            await self._audit_while_leading()
            log.info("autorecovery %s is no longer the auditor (term %d)", self.bookie_id, term)

    async def _audit_while_leading(self) -> None:
        """Run an auditor until leadership is lost; a failed one is replaced by a new one."""
        self._auditor = self._new_auditor()
        unused = [self._auditor]  # the first run uses it; a restart gets a new one

        def audit() -> Awaitable[None]:
            self._auditor = unused.pop() if unused else self._new_auditor()
            return self._auditor.run()

        name = f"autorecovery {self.bookie_id}: the auditor"
        task = self._tasks.spawn(keep_running(name, audit, clock=self._clock), "auditor")
        counting = self._tasks.spawn(
            keep_running(f"{name}'s count", self._count_under_replicated, clock=self._clock),
            "under-replicated count",
        )
        self._auditing.set()
        try:
            await self._election.wait_leadership_lost()
        finally:
            self._auditing.clear()
            self._auditor = None
            task.cancel()
            counting.cancel()
            await asyncio.gather(task, counting, return_exceptions=True)

    async def _count_under_replicated(self) -> None:
        """While leading: the under-replicated gauge, from a listing of the queue; the
        blocked gauges, from the reasons recorded for queued ledgers (at most
        ``BLOCKED_READ_MAX`` read); and reasons left for ledgers gone from the queue (a
        Java worker repaired them, or they were deleted) are removed."""
        while True:
            queued = {ledger_id async for ledger_id in self._urm.ledger_ids()}
            self.metrics.under_replicated = len(queued)
            recorded = sorted(await self._urm.blocked_ids() & queued)[:BLOCKED_READ_MAX]
            reasons = await self._urm.blocked_reasons(recorded)
            self.metrics.blocked = dict(Counter(reason.kind for reason in reasons.values()))
            await self._urm.prune_blocked(queued)
            await asyncio.sleep(UNDER_REPLICATED_COUNT_INTERVAL_S)

    def _placement_violations(self) -> int | None:
        """Ledgers the current auditor's last placement check found (None: none yet)."""
        report = None if self._auditor is None else self._auditor.reports.get("placement")
        return None if report is None else len(report.not_adhering)

    def _new_auditor(self) -> Auditor:
        return Auditor(self._bk, self._urm, self.config, clock=self._clock)

    async def _initialize_delay(self) -> None:
        """Create the cluster's ``lostBookieRecoveryDelay`` node with this participant's
        default when it is absent (Java's auditor does so at start), so that ``triggeraudit``
        rewrites the delay in force rather than inventing one. A node already there (an
        operator's value) is left alone; failing to create it is logged, not fatal."""
        path = join_path(self._bk.cluster.root, UNDERREPLICATION, LOST_BOOKIE_RECOVERY_DELAY)
        value = str(self.config.lost_bookie_recovery_delay_s).encode()
        try:
            await self._bk.cluster.store.create(path, value, make_parents=True)
        except NodeExistsError:
            pass
        except MetadataError as exc:
            log.warning("autorecovery %s: could not create %s: %s", self.bookie_id, path, exc)


async def keep_running(
    name: str,
    run: Callable[[], Awaitable[None]],
    *,
    clock: Clock | None = None,
    delay_s: float = RESTART_DELAY_S,
    delay_s_max: float = RESTART_DELAY_S_MAX,
) -> None:
    """``run()`` until cancelled. A failure is logged with its traceback (a retriable
    ``BKeeperError``, such as a lost connection to ZooKeeper, in one line) and ``run`` starts
    again after a pause that doubles from ``delay_s`` up to ``delay_s_max``; a run that returns
    by itself (it is meant to run until cancelled) is restarted the same way. A run that
    lasted longer than ``delay_s_max`` was no crash loop: the pause starts again from
    ``delay_s``."""
    clock = clock or default_clock()
    pause_s = delay_s
    while True:
        started = clock.monotonic()
        try:
            await run()
            outcome = "returned"
        except Exception as exc:
            end_if_cancelled(name, exc, log)
            if isinstance(exc, BKeeperError) and exc.retriable:
                log.warning("%s failed: %s", name, exc)  # the metadata store away, say: one line
            else:
                log.exception("%s failed", name)
            outcome = "failed"
        if clock.monotonic() - started > delay_s_max:
            pause_s = delay_s
        log.warning("%s %s; starting it again in %.3g s", name, outcome, pause_s)
        await asyncio.sleep(pause_s)
        pause_s = min(pause_s * 2, delay_s_max)
