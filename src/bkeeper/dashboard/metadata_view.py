"""What the dashboard reads from the cluster's metadata: bookies, ledgers, named logs and
the under-replication queue, each bounded by :class:`DashboardConfig`.

Bookies: those registered (writable or read-only) and those that have a cookie but no
registration, which are down. Ledgers: the newest ``ledgers_shown_max`` (ids walked up to
``ledgers_scanned_max`` to count them), each with its last ensemble, quorums, state and
length; the LAC of an open one is asked of its bookies without fencing (at most
``lac_reads_max`` per refresh), that of a closed one is its last entry. Named logs: the first
``logs_shown_max`` by name, with their ledger count and size (read from at most
``log_ledgers_read_max`` ledgers each; past that the size is a lower bound). Recovery: the
auditor, the queue (counted up to ``under_replicated_scanned_max``, the first
``under_replicated_shown_max`` listed with the worker on each and why it waits, when a
worker recorded it: ``reason``, ``reason_kind``, ``reason_since_ms``).

A value that could not be read is reported with the error that stopped it (``lac_error``,
``error``), never left out silently.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from bkeeper.client import BookKeeper
from bkeeper.common.errors import BKeeperError, LedgerNotFoundError, NoNodeError
from bkeeper.common.tasks import within
from bkeeper.dashboard.config import DashboardConfig
from bkeeper.meta.bookie_info import HTTP_ENDPOINT_ID
from bkeeper.meta.cluster import ClusterMetadata
from bkeeper.meta.ledger_metadata import LedgerMetadata, LedgerState
from bkeeper.meta.underreplication import BlockedReason, UnderreplicatedLedger
from bkeeper.namedlog import LogStore

__all__ = [
    "BookieEntry",
    "LedgerPage",
    "LedgerRow",
    "LogPage",
    "LogRow",
    "RecoveryView",
    "UnderReplicatedRow",
    "ledger_page",
    "list_bookies",
    "log_page",
    "recovery_view",
]

T = TypeVar("T")
R = TypeVar("R")

WRITABLE, READ_ONLY, DOWN = "writable", "read-only", "down"


@dataclass(frozen=True)
class BookieEntry:
    bookie_id: str
    state: str  # writable | read-only | down (a cookie, no registration)
    http_url: str | None  # its registered admin HTTP endpoint


@dataclass(frozen=True)
class LedgerRow:
    ledger_id: int
    state: str
    ensemble: tuple[str, ...]  # the last ensemble
    ensembles: int
    quorum: str  # "ensemble/write/ack"
    last_entry_id: int | None  # closed: its last entry
    lac: int | None
    lac_error: str | None
    length_bytes: int
    ctime_ms: int | None


@dataclass(frozen=True)
class LedgerPage:
    total: int  # ids seen, at most ledgers_scanned_max
    total_is_lower_bound: bool
    ledgers: tuple[LedgerRow, ...]  # the newest, newest first
    more: int  # ledgers not listed (of those counted)


@dataclass(frozen=True)
class LogRow:
    name: str
    ledgers: int
    last_ledger_id: int | None
    last_ledger_state: str | None
    size_bytes: int
    size_is_lower_bound: bool
    error: str | None


@dataclass(frozen=True)
class LogPage:
    total: int
    logs: tuple[LogRow, ...]
    more: int


@dataclass(frozen=True)
class UnderReplicatedRow:
    ledger_id: int
    missing_replicas: tuple[str, ...]
    ctime_ms: int | None
    worker: str | None  # the replication worker on it now, if any
    #: why no worker repairs it, as a worker's last attempt recorded (None: not recorded)
    reason: str | None = None
    reason_kind: str | None = None
    reason_since_ms: int | None = None


@dataclass(frozen=True)
class RecoveryView:
    enabled: bool
    auditor: str | None
    lost_bookie_recovery_delay_s: int | None
    under_replicated: int
    under_replicated_is_lower_bound: bool
    rows: tuple[UnderReplicatedRow, ...]
    being_replicated: tuple[tuple[int, str], ...]  # (ledger, worker)


async def list_bookies(cluster: ClusterMetadata, bookies_max: int) -> tuple[list[BookieEntry], int]:
    """Registered bookies (ascending), then the ones known only by their cookie (down): at
    most ``bookies_max``, and how many more there are."""
    registered = await cluster.registry.bookies()
    states = {b: WRITABLE for b in registered.writable}
    states.update({b: READ_ONLY for b in registered.read_only})
    down = sorted(set(await cluster.cookies.bookie_ids()) - set(states))
    entries: list[BookieEntry] = []
    for bookie_id in sorted(states)[:bookies_max]:
        try:
            info = await cluster.registry.service_info(bookie_id)
        except NoNodeError:  # it left since the listing
            entries.append(BookieEntry(bookie_id, DOWN, None))
            continue
        http = info.endpoint(HTTP_ENDPOINT_ID)
        url = None if http is None else f"{_scheme(http.protocol)}://{http.host}:{http.port}"
        entries.append(BookieEntry(bookie_id, states[bookie_id], url))
    entries += [BookieEntry(b, DOWN, None) for b in down[: max(bookies_max - len(entries), 0)]]
    return entries, len(states) + len(down) - len(entries)


def _scheme(protocol: str) -> str:
    """``https`` for a bookie whose admin HTTP server has TLS (it registers ``https``)."""
    return "https" if protocol.lower() == "https" else "http"


async def _bounded(
    items: Sequence[T], work: Callable[[T], Awaitable[R]], concurrent_max: int
) -> list[R]:
    gate = asyncio.Semaphore(concurrent_max)

    async def one(item: T) -> R:
        async with gate:
            return await work(item)

    return list(await asyncio.gather(*(one(item) for item in items)))


async def ledger_page(
    cluster: ClusterMetadata, bk: BookKeeper, config: DashboardConfig
) -> LedgerPage:
    newest: deque[int] = deque(maxlen=config.ledgers_shown_max)
    total = 0
    async for ledger_id in cluster.ledgers.ledger_ids():
        if total >= config.ledgers_scanned_max:
            break
        newest.append(int(ledger_id))
        total += 1
    lower_bound = total >= config.ledgers_scanned_max
    ids = list(reversed(newest))
    metas = await _bounded(
        ids, lambda i: _read_or_none(cluster, i), config.metadata_reads_concurrent_max
    )
    found = [(i, m) for i, m in zip(ids, metas, strict=True) if m is not None]
    open_ids = [i for i, m in found if m.state is not LedgerState.CLOSED][: config.lac_reads_max]
    timeout_s = config.bookie_request_timeout_ms / 1000
    lacs = await _bounded(
        [(i, m) for i, m in found if i in open_ids],
        lambda item: _read_lac(bk, item[0], item[1], timeout_s),
        config.metadata_reads_concurrent_max,
    )
    lac_of = dict(zip(open_ids, lacs, strict=True))
    rows = tuple(_ledger_row(i, m, lac_of.get(i)) for i, m in found)
    return LedgerPage(total, lower_bound, rows, total - len(ids))


async def _read_or_none(cluster: ClusterMetadata, ledger_id: int) -> LedgerMetadata | None:
    try:
        return (await cluster.ledgers.read(ledger_id)).value
    except LedgerNotFoundError:
        return None  # deleted since the walk: no longer a ledger to show


async def _read_lac(
    bk: BookKeeper, ledger_id: int, meta: LedgerMetadata, timeout_s: float
) -> tuple[int | None, str | None]:
    """The LAC its bookies report (no fencing), or the error that stopped the read."""
    try:
        handle = await bk.open_ledger(ledger_id, meta.password, recovery=False)
        try:
            return await within(handle.read_last_add_confirmed(), timeout_s), None
        finally:
            await handle.close()
    except TimeoutError:
        return None, f"no answer within {timeout_s:g} s"
    except BKeeperError as exc:
        return None, f"{type(exc).__name__}: {exc}"


def _ledger_row(
    ledger_id: int, meta: LedgerMetadata, lac: tuple[int | None, str | None] | None
) -> LedgerRow:
    closed = meta.state is LedgerState.CLOSED
    if closed:
        lac_value, lac_error = meta.last_entry_id, None
    elif lac is None:
        lac_value, lac_error = None, "not read (lac_reads_max open ledgers read already)"
    else:
        lac_value, lac_error = lac
    return LedgerRow(
        ledger_id=ledger_id,
        state=meta.state.name,
        ensemble=tuple(str(b) for b in meta.last_ensemble),
        ensembles=len(meta.segments),
        quorum=f"{meta.ensemble_size}/{meta.write_quorum}/{meta.ack_quorum}",
        last_entry_id=meta.last_entry_id if closed else None,
        lac=lac_value,
        lac_error=lac_error,
        length_bytes=meta.length,
        ctime_ms=meta.ctime_ms,
    )


async def log_page(cluster: ClusterMetadata, config: DashboardConfig) -> LogPage:
    store = LogStore(cluster.store, cluster.root)
    names = sorted(await store.names())
    shown = names[: config.logs_shown_max]
    rows = [await _log_row(cluster, store, name, config) for name in shown]
    return LogPage(len(names), tuple(rows), len(names) - len(shown))


async def _log_row(
    cluster: ClusterMetadata, store: LogStore, name: str, config: DashboardConfig
) -> LogRow:
    try:
        meta, _version = await store.read(name)
    except BKeeperError as exc:  # deleted since listed, or unreadable: say which
        return LogRow(name, 0, None, None, 0, False, f"{type(exc).__name__}: {exc}")
    ids = [ledger.ledger_id for ledger in meta.ledgers]
    read = ids[-config.log_ledgers_read_max :]
    metas = await _bounded(
        read, lambda i: _read_or_none(cluster, i), config.metadata_reads_concurrent_max
    )
    size = sum(m.length for m in metas if m is not None)
    last = metas[-1] if metas else None
    return LogRow(
        name=name,
        ledgers=len(ids),
        last_ledger_id=ids[-1] if ids else None,
        last_ledger_state=None if last is None else last.state.name,
        size_bytes=size,
        size_is_lower_bound=len(read) < len(ids),
        error=None,
    )


def _under_replicated_row(
    entry: UnderreplicatedLedger, worker: str | None, why: BlockedReason | None
) -> UnderReplicatedRow:
    return UnderReplicatedRow(
        int(entry.ledger_id),
        entry.missing_replicas,
        entry.ctime_ms,
        worker,
        None if why is None else why.detail,
        None if why is None else why.kind,
        None if why is None else why.since_ms,
    )


async def recovery_view(cluster: ClusterMetadata, config: DashboardConfig) -> RecoveryView:
    urm = cluster.underreplication
    locked = tuple((int(ledger), holder) for ledger, holder in await urm.locked())
    holders = dict(locked)
    ids: list[int] = []
    total = 0
    async for ledger_id in urm.ledger_ids():
        if total >= config.under_replicated_scanned_max:
            break
        total += 1
        if len(ids) < config.under_replicated_shown_max:
            ids.append(int(ledger_id))
    entries = await _bounded(ids, urm.get, config.metadata_reads_concurrent_max)
    reasons = await urm.blocked_reasons(ids)
    rows = tuple(
        _under_replicated_row(e, holders.get(e.ledger_id), reasons.get(e.ledger_id))
        for e in entries
        if e is not None
    )
    return RecoveryView(
        enabled=await urm.is_enabled(),
        auditor=await urm.current_auditor(),
        lost_bookie_recovery_delay_s=await urm.lost_bookie_recovery_delay_s(),
        under_replicated=total,
        under_replicated_is_lower_bound=total >= config.under_replicated_scanned_max,
        rows=rows,
        being_replicated=locked,
    )
