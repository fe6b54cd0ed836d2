"""What replicas really store, asked of the bookies themselves (the I/O of the checks).

* :func:`probe_ledger`: check-all-ledgers' probe reads: the first and last entry each live
  replica should hold in each segment (:func:`~bkeeper.autorecovery.findings.fragment_checks`);
  "missing" when a replica answers "no such entry/ledger" or a bad copy, "unknown" when it is
  in limbo or cannot be reached.
* :func:`list_ledger`: the replicas check: every live replica's list of entries
  (v3 GET_LIST_OF_ENTRIES_OF_LEDGER, one request per replica) against what its write sets
  give it (:func:`~bkeeper.autorecovery.findings.replica_shortfall`): a replica that lost one
  entry in the middle of a fragment is found, which the probe reads cannot see.
* :func:`lacking_bookies`: the worker's question about a marked bookie that is registered:
  did it come back with its data (nothing to copy) or does it lack entries (replace it)?

At most ``in_flight`` (a semaphore the caller sizes from its config) requests at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection
from typing import Literal

from bkeeper.autorecovery.expected import missing_entries, stripes_of
from bkeeper.autorecovery.findings import (
    FragmentCheck,
    ReplicaShortfall,
    checked_up_to,
    fragment_checks,
    replica_shortfall,
)
from bkeeper.client.bookkeeper import BookKeeper
from bkeeper.client.read_handle import ReadHandle
from bkeeper.client.replica import list_entries_on
from bkeeper.common.errors import (
    BKeeperError,
    DataUnknownError,
    DigestMismatchError,
    NoSuchEntryError,
    NoSuchLedgerError,
)
from bkeeper.meta.ledger_metadata import LedgerMetadata, LedgerState

__all__ = ["Verdict", "lacking_bookies", "lacking_entries", "list_ledger", "probe_ledger"]

log = logging.getLogger(__name__)

Verdict = Literal["ok", "missing", "unknown"]


async def probe_ledger(
    bk: BookKeeper,
    ledger_id: int,
    meta: LedgerMetadata,
    live: Collection[str],
    in_flight: asyncio.Semaphore,
) -> tuple[list[FragmentCheck], list[tuple[Verdict, str]]]:
    """The probe reads of ``meta``'s live replicas and each one's verdict (with why).
    :class:`~bkeeper.common.errors.LedgerNotFoundError` when the ledger is gone."""
    handle = await bk.open_ledger(ledger_id, meta.password, recovery=False)
    try:
        last: int | None = None
        if meta.state is not LedgerState.CLOSED:
            try:
                last = await handle.read_last_add_confirmed()
            except BKeeperError as exc:
                log.info("ledger %d: LAC unknown (%s), last segment unchecked", ledger_id, exc)
        checks = [
            c for c in fragment_checks(ledger_id, meta, last_entry_id=last) if c.bookie in live
        ]
        results = await asyncio.gather(*(_probe(handle, c, in_flight) for c in checks))
    finally:
        await handle.close()
    return checks, list(results)


async def _probe(
    handle: ReadHandle, check: FragmentCheck, in_flight: asyncio.Semaphore
) -> tuple[Verdict, str]:
    for entry_id in check.entry_ids:
        async with in_flight:
            try:
                await handle.read_entry_from(check.bookie, entry_id)
            except (NoSuchEntryError, NoSuchLedgerError, DigestMismatchError) as exc:
                where = f"ledger {check.ledger_id} entry {entry_id} on {check.bookie}"
                log.info("%s: missing or bad: %s", where, exc)
                return "missing", str(exc)
            except DataUnknownError as exc:
                return "unknown", f"{check.bookie} does not know (limbo): {exc}"
            except BKeeperError as exc:
                return "unknown", f"{check.bookie} could not be probed: {exc}"
    return "ok", ""


async def list_ledger(
    bk: BookKeeper,
    ledger_id: int,
    meta: LedgerMetadata,
    live: Collection[str],
    in_flight: asyncio.Semaphore,
) -> tuple[ReplicaShortfall, dict[str, str], int]:
    """What ``meta``'s live replicas lack of the entries they should store (up to
    :func:`~bkeeper.autorecovery.findings.checked_up_to`), the replicas that could not tell
    (bookie -> why), and how many were asked."""
    last = checked_up_to(meta)
    asked = sorted(
        b for b in _holders(meta, last) if b in live
    )  # a replica with no entry to hold is not asked
    answers = await asyncio.gather(*(_list(bk, ledger_id, b, in_flight) for b in asked))
    held = {b: entries for b, entries in zip(asked, answers, strict=True) if entries is not None}
    why = {b: f"{b} could not list its entries" for b in asked if b not in held}
    for bookie, answer in zip(asked, answers, strict=True):
        if answer is None:
            log.info("ledger %d: %s", ledger_id, why[bookie])
    return replica_shortfall(meta, last, held), why, len(asked)


async def _list(
    bk: BookKeeper, ledger_id: int, bookie: str, in_flight: asyncio.Semaphore
) -> set[int] | None:
    async with in_flight:
        try:
            entries = await list_entries_on(
                bk.pool, bookie, ledger_id, timeout_s=bk.config.read_timeout_ms / 1000.0
            )
        except BKeeperError as exc:
            log.info("ledger %d: %s could not list its entries: %s", ledger_id, bookie, exc)
            return None
    return set(entries)


async def lacking_bookies(
    bk: BookKeeper, ledger_id: int, meta: LedgerMetadata, bookies: Collection[str]
) -> frozenset[str]:
    """Those of ``bookies`` (registered) that lack an entry they should store up to
    :func:`~bkeeper.autorecovery.findings.checked_up_to`. A bookie that cannot tell raises
    the error it gave: the caller tries again later rather than copy what it may hold."""
    return frozenset(await lacking_entries(bk, ledger_id, meta, bookies))


async def lacking_entries(
    bk: BookKeeper,
    ledger_id: int,
    meta: LedgerMetadata,
    bookies: Collection[str],
    up_to: int | None = None,
) -> dict[str, tuple[int, ...]]:
    """:func:`lacking_bookies`, each with the entry ids it lacks (ascending); ``up_to``: the
    last entry to judge instead of ``checked_up_to`` (an open ledger's LAC: entries up to it
    are settled, in its last segment too)."""
    last = checked_up_to(meta) if up_to is None else up_to
    holders = _holders(meta, last)
    lacking: dict[str, tuple[int, ...]] = {}
    for bookie in sorted(b for b in bookies if b in holders):
        entries = await list_entries_on(
            bk.pool, bookie, ledger_id, timeout_s=bk.config.read_timeout_ms / 1000.0
        )
        missing = missing_entries(meta, bookie, last, set(entries))
        if missing:
            log.info(
                "ledger %d: %s is registered but lacks %d of its entries (first %d)",
                *(ledger_id, bookie, len(missing), missing[0]),
            )
            lacking[bookie] = tuple(missing)
    return lacking


def _holders(meta: LedgerMetadata, last_entry_id: int) -> set[str]:
    members = {str(b) for ensemble in meta.segments.values() for b in ensemble}
    return {b for b in members if stripes_of(meta, b, last_entry_id)}
