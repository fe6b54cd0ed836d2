"""Operator operations on auto-recovery, as Apache BookKeeper's ``BookKeeperAdmin`` and shell
offer them (``bkeeper shell recover``, ``decommissionbookie``, ``listunderreplicated``, ...).

Each takes a started :class:`~bkeeper.client.BookKeeper` (or its cluster's
:class:`~bkeeper.meta.underreplication.UnderReplicationManager`) and returns data; the CLI
prints it. Which ledgers need a bookie is the audit's own definition
(:func:`bkeeper.autorecovery.findings.ledgers_to_mark`): a closed ledger needs a bookie only for
segments where it holds entries, an open one for any segment it is in (Java's
``areEntriesOfLedgerStoredInTheBookie``), so ``decommissionbookie`` ends when the workers
are done, even with segments that never held an entry on it.

``decommission`` says, at each poll, where every ledger of the bookie stands (waiting for
the audit, queued, being re-replicated by which worker, blocked and why): what it reads is
turned into rows by :mod:`bkeeper.autorecovery.decommission_status`, which is pure.

Limits: ledger metadata reads in flight during a scan (``SCAN_READS_IN_FLIGHT_MAX``, and the
same bound for the queue entries a decommission reads at each poll),
ledgers repaired at once by ``recover`` (``AutoRecoveryConfig.ledgers_in_parallel``, all of
them within one ``rate_bytes_per_s``), the
time ``decommission`` waits (``timeout_s``) and how often it looks (``poll_interval_s``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from bkeeper.autorecovery.config import AutoRecoveryConfig
from bkeeper.autorecovery.decommission_status import (
    AuditWatch,
    DecommissionStatus,
    LedgerRow,
    Observation,
    ledger_rows,
    timeout_message,
)
from bkeeper.autorecovery.findings import ledgers_to_mark
from bkeeper.autorecovery.recovery_adds import Throttle
from bkeeper.autorecovery.repair import ReplicationOutcome, replicate_ledger
from bkeeper.client.bookkeeper import BookKeeper
from bkeeper.common.clock import Clock, default_clock
from bkeeper.common.errors import (
    BKeeperError,
    CallTimeoutError,
    ConfigError,
    LedgerNotFoundError,
    NoNodeError,
    ProtocolError,
)
from bkeeper.common.ids import LedgerId
from bkeeper.meta.ledger_metadata import LedgerMetadata
from bkeeper.meta.underreplication import (
    BlockedReason,
    UnderreplicatedLedger,
    UnderReplicationManager,
)

__all__ = [
    "SCAN_READS_IN_FLIGHT_MAX",
    "AutoRecoveryStatus",
    "DecommissionReport",
    "DecommissionStatus",
    "Progress",
    "StatusListener",
    "UnderReplicatedRow",
    "auto_recovery_status",
    "decommission",
    "ledgers_needing",
    "needs",
    "recover",
    "trigger_audit",
    "under_replicated",
]

#: Ledger metadata reads in flight while scanning every ledger.
SCAN_READS_IN_FLIGHT_MAX = 32
#: A decommission writes its audit trigger again when no ledger moved for this long.
DECOMMISSION_RETRIGGER_S = 10.0
#: A decommission takes the audit as run once no ledger of the bookie was newly seen marked
#: for this long (``decommission_status.AuditWatch``).
DECOMMISSION_AUDIT_SETTLE_S = 10.0

T = TypeVar("T")

log = logging.getLogger(__name__)

#: ``(done, total)``: called as work advances, for a progress bar.
Progress = Callable[[int, int], None]


#: Called with a decommission's status at each poll.
StatusListener = Callable[[DecommissionStatus], None]


def _ignore(done: int, total: int) -> None:
    return None


def _ignore_status(status: DecommissionStatus) -> None:
    return None


def needs(ledger_id: int, meta: LedgerMetadata, bookies: Collection[str]) -> tuple[str, ...]:
    """Which of ``bookies`` ledger ``ledger_id`` needs (the audit's definition)."""
    members = {str(b) for ensemble in meta.segments.values() for b in ensemble}
    live = members - set(bookies)
    return ledgers_to_mark([(ledger_id, meta)], live).get(ledger_id, ())


async def _metadata(
    bk: BookKeeper, ledger_ids: Iterable[int]
) -> AsyncIterator[tuple[int, LedgerMetadata]]:
    """``(id, metadata)`` of each ledger still there, at most ``SCAN_READS_IN_FLIGHT_MAX``
    reads in flight (a ledger deleted meanwhile is skipped)."""

    async def read(ledger_id: int) -> tuple[int, LedgerMetadata] | None:
        try:
            return ledger_id, await bk.ledger_metadata(ledger_id)
        except LedgerNotFoundError:
            return None

    async for found in _read_bounded(ledger_ids, read):
        yield found


async def _read_bounded(
    keys: Iterable[int], read: Callable[[int], Awaitable[T | None]]
) -> AsyncIterator[T]:
    """``read(key)`` of each key in order, at most ``SCAN_READS_IN_FLIGHT_MAX`` in flight;
    a None is skipped."""
    pending: list[asyncio.Task[T | None]] = []
    try:
        for key in keys:
            pending.append(asyncio.ensure_future(read(key)))
            if len(pending) >= SCAN_READS_IN_FLIGHT_MAX:
                found = await pending.pop(0)
                if found is not None:
                    yield found
        for task in pending:
            found = await task
            if found is not None:
                yield found
    finally:
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)


async def ledgers_needing(
    bk: BookKeeper, bookies: Collection[str], ledger_ids: Iterable[int] | None = None
) -> dict[LedgerId, tuple[str, ...]]:
    """Ledger -> which of ``bookies`` it needs, over every ledger (or ``ledger_ids``)."""
    if ledger_ids is None:
        ledger_ids = [ledger_id async for ledger_id in bk.list_ledgers()]
    found: dict[LedgerId, tuple[str, ...]] = {}
    async for ledger_id, meta in _metadata(bk, ledger_ids):
        wanted = needs(ledger_id, meta, bookies)
        if wanted:
            found[LedgerId(ledger_id)] = wanted
    return found


async def _check_known(bk: BookKeeper, bookies: Collection[str], referenced: set[str]) -> None:
    """``ConfigError`` naming the first bookie that is neither registered, nor has a cookie,
    nor is in any ledger: a typo, most likely."""
    cluster = bk.cluster
    registered = await cluster.registry.bookies()
    known = {*registered.writable, *registered.read_only, *referenced}
    known.update(await cluster.cookies.bookie_ids())
    for bookie in bookies:
        if bookie not in known:
            raise ConfigError(
                f"unknown bookie {bookie}: not registered, no cookie, in no ledger "
                "(bkeeper shell listbookies --all lists the registered ones)"
            )


async def recover(
    bk: BookKeeper,
    bookies: Collection[str],
    config: AutoRecoveryConfig,
    *,
    ledger_id: int | None = None,
    dry_run: bool = False,
    fence_open: bool = True,
    on_progress: Progress = _ignore,
) -> list[ReplicationOutcome]:
    """Re-replicate, now, every ledger's entries on ``bookies`` (or only ``ledger_id``'s) to
    other bookies, as Java's ``recover``; with ``dry_run`` only plan it; an open ledger whose
    last segment needs one is fenced and sealed first unless not ``fence_open``. One outcome per
    ledger, by id; a ledger that could not be repaired has ``done`` False and a reason."""
    if not bookies:
        raise ConfigError("bookies: name at least one bookie to recover")
    if ledger_id is None:
        targets = await ledgers_needing(bk, bookies)
    else:
        try:
            meta = await bk.ledger_metadata(ledger_id)
        except LedgerNotFoundError:
            raise ConfigError(f"ledger: no ledger {ledger_id}") from None
        wanted = needs(ledger_id, meta, bookies)
        targets = {LedgerId(ledger_id): wanted} if wanted else {}
        if not wanted:
            raise ConfigError(
                f"ledger {ledger_id} holds no entries on {', '.join(sorted(bookies))}"
            )
    await _check_known(bk, bookies, {b for found in targets.values() for b in found})
    total = len(targets)
    on_progress(0, total)
    todo = iter(sorted(targets.items()))  # shared: each ledger is taken by one repairer
    outcomes: dict[int, ReplicationOutcome] = {}
    throttle = Throttle(  # one rate and window for the whole call
        config.rate_bytes_per_s, default_clock(), config.bytes_in_flight_max
    )

    async def repairer() -> None:
        for target, lost in todo:
            outcomes[target] = await replicate_ledger(
                bk,
                target,
                lost,
                config,
                dry_run=dry_run,
                fence_open=fence_open,
                throttle=throttle,
            )
            on_progress(len(outcomes), total)

    async with asyncio.TaskGroup() as tasks:
        for _ in range(min(config.ledgers_in_parallel, total)):
            tasks.create_task(repairer())
    return [outcomes[target] for target in sorted(targets)]


@dataclass(frozen=True)
class DecommissionReport:
    bookie_id: str
    ledgers: int  # ledgers that needed it when the audit was triggered
    cookie_deleted: bool
    rows: tuple[LedgerRow, ...] = ()  # each of those ledgers, by id (all moved)


@dataclass(frozen=True)
class _QueueState:
    """What the under-replication queue says of the ledgers a decommission waits for."""

    marks: dict[int, UnderreplicatedLedger]
    holders: dict[int, str]
    reasons: dict[int, BlockedReason]
    enabled: bool
    auditor: str | None


async def _queue_state(
    urm: UnderReplicationManager,
    ledger_ids: Collection[int],
    known: Mapping[int, UnderreplicatedLedger],
    bookie_id: str,
) -> _QueueState:
    """The queue entries, lock holders and recorded reasons of ``ledger_ids``. A mark in
    ``known`` (the last poll's) that named ``bookie_id`` and is still queued is not read
    again: merging only adds replicas, so it names the bookie until it is removed."""
    queued = {ledger_id async for ledger_id in urm.ledger_ids()}
    wanted = [ledger_id for ledger_id in ledger_ids if ledger_id in queued]
    marks = {
        ledger_id: known[ledger_id]
        for ledger_id in wanted
        if ledger_id in known and bookie_id in known[ledger_id].missing_replicas
    }

    async def read(ledger_id: int) -> UnderreplicatedLedger | None:
        try:
            return await urm.get(ledger_id)
        except ProtocolError:
            return None  # unreadable: counted as not marked (the auditor marks it again)

    async for mark in _read_bounded([x for x in wanted if x not in marks], read):
        marks[mark.ledger_id] = mark
    wanted_set = set(wanted)
    holders = {int(x): holder for x, holder in await urm.locked() if x in wanted_set}
    reasons = {int(x): why for x, why in (await urm.blocked_reasons(wanted)).items()}
    return _QueueState(marks, holders, reasons, await urm.is_enabled(), await urm.current_auditor())


async def decommission(
    bk: BookKeeper,
    bookie_id: str,
    *,
    timeout_s: float,
    poll_interval_s: float = 1.0,
    retrigger_s: float = DECOMMISSION_RETRIGGER_S,
    audit_settle_s: float = DECOMMISSION_AUDIT_SETTLE_S,
    on_progress: Progress = _ignore,
    on_status: StatusListener = _ignore_status,
    clock: Clock | None = None,
) -> DecommissionReport:
    """Java's ``decommissionbookie``: the bookie must be stopped; trigger an audit, wait
    until no ledger needs it (the auto-recovery workers re-replicate its ledgers), then
    delete its cookie. ``CallTimeoutError`` after ``timeout_s``, its message naming the
    ledgers that block it, why, and what to do; ``BKeeperError`` when the bookie still
    runs, no auditor is elected, or auto-recovery is disabled. ``clock`` (a ``SystemClock``
    by default) times the wait.

    At the start and after each poll, ``on_status`` gets where every ledger that needed the
    bookie stands (:class:`~bkeeper.autorecovery.decommission_status.DecommissionStatus`);
    the audit counts as run once no ledger was newly seen marked for ``audit_settle_s``.

    A trigger is a write that only a live auditor watching the node acts on: one written
    while the elected auditor is a dead process (its vote not expired yet), or before a newly
    elected one watches, is lost, and the next auditor waits out the whole delay. So the
    trigger is written again when another auditor is elected, and when no ledger moved for
    ``retrigger_s``."""
    cluster = bk.cluster
    urm = cluster.underreplication
    registered = await cluster.registry.bookies()
    if bookie_id in registered.writable or bookie_id in registered.read_only:
        mode = "writable" if bookie_id in registered.writable else "read-only"
        raise BKeeperError(
            f"bookie {bookie_id} is still registered ({mode}): stop it before decommissioning"
        )
    remaining = await ledgers_needing(bk, [bookie_id])
    await _check_known(bk, [bookie_id], set().union(*remaining.values()))
    total = len(remaining)
    on_progress(0, total)
    clock = clock or default_clock()
    started = clock.monotonic()
    if remaining:
        auditor = await trigger_audit(urm)
        triggered_at = clock.monotonic()
    watch = AuditWatch(audit_settle_s)
    status = DecommissionStatus(bookie_id, {})
    marks: dict[int, UnderreplicatedLedger] = {}

    async def observe(ledger_ids: Collection[int]) -> dict[LedgerId, tuple[str, ...]]:
        """Read the queue, then which of ``ledger_ids`` still need the bookie (in this
        order: a mark gone when read was removed after the metadata changed), and tell
        ``on_status``; what still needs it."""
        nonlocal status, marks
        queue = await _queue_state(urm, ledger_ids, marks, bookie_id)
        still = await ledgers_needing(bk, [bookie_id], ledger_ids)
        marks = queue.marks
        now = clock.monotonic()
        marked = [x for x, mark in marks.items() if bookie_id in mark.missing_replicas]
        audit = watch.observe(marked, set(ledger_ids) - set(still), now)
        seen = Observation(still, marks, queue.holders, queue.reasons, audit, clock.wall_ms())
        rows = ledger_rows(bookie_id, seen, status.rows)
        status = DecommissionStatus(
            bookie_id, rows, audit, queue.auditor, queue.enabled, now - started
        )
        on_progress(total - len(still), total)
        on_status(status)
        return still

    deadline = clock.monotonic() + timeout_s
    if remaining:
        remaining = await observe(list(remaining))
    while remaining:
        if clock.monotonic() >= deadline:
            raise CallTimeoutError(timeout_message(status, timeout_s))
        await asyncio.sleep(poll_interval_s)
        before = len(remaining)
        remaining = await observe(list(remaining))
        if len(remaining) < before:
            triggered_at = clock.monotonic()  # moving: the trigger was taken
        elif remaining:
            elected = status.auditor
            stalled = clock.monotonic() - triggered_at >= retrigger_s
            if elected is not None and (elected != auditor or stalled):
                why = f"auditor now {elected}" if elected != auditor else "no ledger moved"
                log.info("decommission of %s: triggering the audit again (%s)", bookie_id, why)
                auditor = await trigger_audit(urm)
                triggered_at = clock.monotonic()
    deleted = False
    with contextlib.suppress(NoNodeError):
        await cluster.cookies.delete(bookie_id)
        deleted = True
    return DecommissionReport(bookie_id, total, deleted, tuple(status.rows.values()))


@dataclass(frozen=True)
class UnderReplicatedRow:
    ledger_id: int
    missing_replicas: tuple[str, ...]
    ctime_ms: int | None
    worker: str | None  # the lock holder, when a worker is on it
    #: why no worker repairs it (a worker's last attempt), e.g. ``no candidate bookie ...``
    reason: str | None = None
    reason_kind: str | None = None  # ``no_candidate``, ``awaiting_writer``, ...
    reason_since_ms: int | None = None


async def under_replicated(
    urm: UnderReplicationManager, missing: str | None = None
) -> list[UnderReplicatedRow]:
    """The queued ledgers (those missing ``missing`` only), with their lock holders and
    why they wait, when a worker recorded it."""
    holders = dict(await urm.locked())
    entries = [
        entry
        async for entry in urm.ledgers()
        if missing is None or missing in entry.missing_replicas
    ]
    reasons = await urm.blocked_reasons(entry.ledger_id for entry in entries)
    rows = []
    for entry in entries:
        why = reasons.get(entry.ledger_id)
        rows.append(
            UnderReplicatedRow(
                entry.ledger_id,
                entry.missing_replicas,
                entry.ctime_ms,
                holders.get(entry.ledger_id),
                None if why is None else why.detail,
                None if why is None else why.kind,
                None if why is None else why.since_ms,
            )
        )
    return rows


async def _require_auditor(urm: UnderReplicationManager) -> str:
    if not await urm.is_enabled():
        raise BKeeperError(
            "auto-recovery is disabled: `bkeeper shell autorecovery --enable` turns it on"
        )
    auditor = await urm.current_auditor()
    if auditor is None:
        raise BKeeperError(
            "no auditor is elected: start `bkeeper autorecovery` or a bookie with --autorecovery"
        )
    return auditor


async def trigger_audit(urm: UnderReplicationManager) -> str:
    """Java's ``triggeraudit``: write the delay node again (its current value, 0 when it is
    not set yet), which makes the auditor audit now; the auditor's id."""
    auditor = await _require_auditor(urm)
    delay_s = await urm.lost_bookie_recovery_delay_s()
    await urm.set_lost_bookie_recovery_delay_s(
        delay_s if delay_s is not None else AutoRecoveryConfig().lost_bookie_recovery_delay_s
    )
    return auditor


@dataclass(frozen=True)
class AutoRecoveryStatus:
    enabled: bool
    auditor: str | None
    lost_bookie_recovery_delay_s: int | None
    locked: tuple[tuple[int, str], ...]  # (ledger, worker) being re-replicated now
    under_replicated: int


async def auto_recovery_status(urm: UnderReplicationManager) -> AutoRecoveryStatus:
    """Java's ``queryautorecoverystatus`` and a little more: flag, auditor, delay, locks."""
    locked = tuple(sorted((int(ledger), holder) for ledger, holder in await urm.locked()))
    queued = 0
    async for _entry in urm.ledgers():
        queued += 1
    return AutoRecoveryStatus(
        await urm.is_enabled(),
        await urm.current_auditor(),
        await urm.lost_bookie_recovery_delay_s(),
        locked,
        queued,
    )
