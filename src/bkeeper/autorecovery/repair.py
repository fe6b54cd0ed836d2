"""Re-replication: copy what lost bookies held to new ones, then name them in the metadata.

:func:`replicate_ledger` repairs one ledger:

1. read its metadata and the registered bookies; the lost bookies are those given (the
   under-replication mark's), or else every ensemble member not registered;
   a ledger some lost bookie of which no writable bookie can replace
   (:func:`~bkeeper.autorecovery.replicate.missing_replacements`) is left as it is, even
   open and past its grace period: never fenced without somewhere to copy to;
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
outcome with ``done`` False, the reason and its kind
(:class:`~bkeeper.autorecovery.replicate.BlockKind`); a ledger deleted meanwhile is done.

At most :data:`COPY_RANGES_IN_FLIGHT_MAX` runs of consecutive entries of one fragment are
read at once.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Collection
from dataclasses import dataclass

from bkeeper.autorecovery.config import AutoRecoveryConfig
from bkeeper.autorecovery.entry_copy import copy_entries
from bkeeper.autorecovery.findings import checked_up_to
from bkeeper.autorecovery.recovery_adds import RecoveryAddSink, Throttle
from bkeeper.autorecovery.replicas import lacking_entries
from bkeeper.autorecovery.replicate import (
    BlockKind,
    Fragment,
    RepairPlan,
    apply_plan,
    last_segment_lost,
    lost_bookies,
    missing_replacements,
    plan_repair,
    relocations,
)
from bkeeper.client.bookkeeper import BookKeeper
from bkeeper.client.read_handle import ReadHandle
from bkeeper.common.cas import cas_update
from bkeeper.common.clock import default_clock
from bkeeper.common.errors import BKeeperError, LedgerNotFoundError, NotEnoughBookiesError
from bkeeper.meta.ledger_metadata import LedgerMetadata, LedgerState
from bkeeper.meta.registry import BookieSet
from bkeeper.meta.store import Versioned
from bkeeper.wire.digest import master_key

__all__ = [
    "COPY_RANGES_IN_FLIGHT_MAX",
    "ReplicationOutcome",
    "copy_fragments",
    "replicate_ledger",
]

log = logging.getLogger(__name__)

#: Runs of consecutive entries one fragment copy reads at once (striped ledgers have many).
COPY_RANGES_IN_FLIGHT_MAX = 16


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
    #: why it is not done (None when done)
    kind: BlockKind | None = None


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
    bookies: BookieSet | None = None,
    relocate: bool = False,
) -> ReplicationOutcome:
    """Repair ``ledger_id`` (module doc). ``lost`` None: every ensemble member not registered
    (writable or read-only) is lost. ``dry_run``: plan only (``plan`` and ``replaced`` say
    what would be done). ``throttle``: shared with other copies (else one of this call's).
    ``unless_back``: a bookie of ``lost`` registered again is asked for its list of
    entries: when it stores every entry it should (it came back with its data: its cookie
    let it start) it is not lost any more and nothing of it is copied; when it lacks some
    (check-all-ledgers or the replicas check marked it, or a writer that went on without
    it) it is replaced as a lost one, or, when no bookie can replace it and it is writable,
    the entries it lacks are copied to it in place.
    ``bookies``: the registered bookies as the caller follows them (else they are read).
    ``relocate``: also move live members of segments that break the client's placement
    (:func:`~bkeeper.autorecovery.replicate.relocations`; placement repair)."""
    repair = _LedgerRepair(bk, ledger_id, config, throttle, rng)
    try:
        return await repair.run(lost, fence_open, dry_run, unless_back, bookies, relocate)
    except LedgerNotFoundError:
        return repair.outcome(True, "the ledger was deleted")
    except BKeeperError as exc:
        if not await _exists(bk, ledger_id):
            return repair.outcome(True, "the ledger was deleted")
        kind = BlockKind.NO_CANDIDATE if isinstance(exc, NotEnoughBookiesError) else repair.step
        return repair.outcome(False, str(exc) or type(exc).__name__, kind)


async def copy_fragments(
    bk: BookKeeper,
    ledger_id: int,
    meta: LedgerMetadata,
    versioned: Versioned[LedgerMetadata],
    fragments: Collection[Fragment],
    config: AutoRecoveryConfig,
) -> int:
    """Copy each fragment's entries to its target as a repair does (reads from the replicas
    ``versioned`` names; each target made durable): the entries copied. Raises what failed
    (``BKeeperError``), with nothing written to the metadata."""
    repair = _LedgerRepair(bk, ledger_id, config, None, None)
    if any(fragment.entry_ids for fragment in fragments):
        handle = await bk.open_ledger(ledger_id, meta.password, recovery=False, metadata=versioned)
        try:
            for fragment in fragments:
                await repair.copy(handle, meta, fragment)
        finally:
            await handle.close()
    return repair.entries_copied


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
            config.rate_bytes_per_s, default_clock(), config.bytes_in_flight_max
        )
        self.rng = rng
        self.plan: RepairPlan | None = None
        self.replaced: dict[int, dict[str, str]] = {}
        self.entries_copied = 0
        self.bytes_copied = 0
        #: what a failure now is a failure of: reading the replicas, or the target's adds
        self.step = BlockKind.ERROR

    def outcome(
        self, done: bool, reason: str = "", kind: BlockKind | None = None
    ) -> ReplicationOutcome:
        if not done and kind is None:
            kind = BlockKind.ERROR
        return ReplicationOutcome(
            self.ledger_id,
            self.replaced,
            self.entries_copied,
            self.bytes_copied,
            done,
            reason,
            kind is BlockKind.AWAITING_WRITER,
            self.plan,
            None if done else kind,
        )

    async def run(
        self,
        lost: Collection[str] | None,
        fence_open: bool,
        dry_run: bool,
        unless_back: bool,
        bookies: BookieSet | None,
        relocate: bool = False,
    ) -> ReplicationOutcome:
        bk, ledger_id = self.bk, self.ledger_id
        versioned = await bk.cluster.ledgers.read(ledger_id)
        meta = versioned.value
        followed = bookies is not None
        if bookies is None:
            bookies = await bk.cluster.registry.bookies()
        if lost is None:
            lost = lost_bookies(meta, bookies.writable | bookies.read_only)
        lost = frozenset(lost)
        lacking: dict[str, tuple[int, ...]] = {}
        refill: dict[str, tuple[int, ...]] = {}
        if unless_back:  # back with its data, or registered but lacking entries?
            back = lost & (bookies.writable | bookies.read_only)
            tail = back & {str(b) for b in meta.last_ensemble} & bookies.writable
            up_to = None
            if tail and meta.state is not LedgerState.CLOSED:
                # An open ledger's last segment, judged up to its LAC (entries up to it are
                # settled): a writer that went on without a bookie while it restarted, and
                # took it back, left it without those. It is refilled in place, never
                # replaced: that would fence a writer that lacks nothing.
                up_to = max(checked_up_to(meta), await self.last_add_confirmed(versioned))
            lacking = await lacking_entries(bk, ledger_id, meta, back, up_to)
            if up_to is not None:
                refill = {b: entries for b, entries in lacking.items() if b in tail}
            lost = (lost - back) | (frozenset(lacking) - frozenset(refill))
        if (lost or refill) and not meta.has_password:
            return self.outcome(
                False,
                f"ledger {ledger_id}: no password in its metadata (created with "
                "store_password_in_metadata off): cannot re-replicate it",
                BlockKind.NO_PASSWORD,
            )
        shortfall = missing_replacements(meta, lost, bookies.writable)
        if shortfall is not None and followed:
            # The caller's registry watch may lag a bookie that just joined: look once more.
            bookies = await bk.cluster.registry.bookies()
            shortfall = missing_replacements(meta, lost, bookies.writable)
        if shortfall is not None:
            # No bookie to replace them with (no spare: a cluster of E bookies whose writers
            # went on without one while it restarted): a writable one lacking entries gets
            # them copied to itself, in place; a read-only one takes no adds.
            more = {b: entries for b, entries in lacking.items() if b in bookies.writable}
            if set(more) - set(refill):
                refill.update(more)
                lost = lost - frozenset(refill)
                shortfall = missing_replacements(meta, lost, bookies.writable)
        if shortfall is not None:  # decided before fencing: nowhere to copy, nothing touched
            return self.outcome(False, shortfall, BlockKind.NO_CANDIDATE)
        if last_segment_lost(meta, lost) and fence_open and not dry_run:
            fenced = await bk.open_ledger(ledger_id, meta.password, recovery=True)
            await fenced.close()
            log.info("ledger %d fenced and sealed for re-replication", ledger_id)
            versioned = await bk.cluster.ledgers.read(ledger_id)
            meta = versioned.value
        domains = await bk.domains()
        moves: dict[int, tuple[str, ...]] = {}
        if relocate and domains is not None and meta.has_password:
            live = bookies.writable | bookies.read_only
            racks_available = len({domains.rack(b) for b in live})
            writable = bookies.writable - lost
            moves = relocations(meta, domains, writable, racks_available)
        plan = plan_repair(
            ledger_id,
            meta,
            lost,
            bookies.writable,
            domains=domains,
            moves=moves,
            refill=refill,
            rng=self.rng,
        )
        self.plan = plan
        waiting = BlockKind.AWAITING_WRITER if plan.needs_fencing else None
        if dry_run:
            self.replaced = plan.replaced
            return self.outcome(not plan.needs_fencing, kind=waiting)
        if plan.needs_fencing:
            reason = "open, its last segment lost a bookie: its writer has the grace period"
            return self.outcome(False, reason, waiting)
        if any(fragment.entry_ids for fragment in plan.fragments):
            handle = await bk.open_ledger(
                ledger_id, meta.password, recovery=False, metadata=versioned
            )
            try:
                for fragment in plan.fragments:
                    await self.copy(handle, meta, fragment)
            finally:
                await handle.close()
        return await self.update_metadata(versioned, plan)

    async def last_add_confirmed(self, versioned: Versioned[LedgerMetadata]) -> int:
        """The ledger's LAC as its bookies tell it (an open ledger: not fenced, not recovered)."""
        meta = versioned.value
        handle = await self.bk.open_ledger(
            self.ledger_id, meta.password, recovery=False, metadata=versioned
        )
        try:
            return await handle.read_last_add_confirmed()
        finally:
            await handle.close()

    async def copy(self, handle: ReadHandle, meta: LedgerMetadata, fragment: Fragment) -> None:
        if not fragment.entry_ids:
            return
        target_failed = False

        async def send(bodies: list[tuple[int, bytes]]) -> None:
            nonlocal target_failed
            try:
                await sink(bodies)
            except BaseException:
                target_failed = True
                raise

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
            try:
                await copy_entries(
                    handle, meta.password, fragment.entry_ids, send, COPY_RANGES_IN_FLIGHT_MAX
                )
            except BKeeperError:
                self.step = (
                    BlockKind.TARGET_FAILED if target_failed else BlockKind.REPLICAS_UNREADABLE
                )
                raise
            self.step = BlockKind.TARGET_FAILED
            await sink.drain()
            self.step = BlockKind.ERROR
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
