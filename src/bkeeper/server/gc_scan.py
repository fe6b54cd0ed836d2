"""Scan and compare: delete the local data of the ledgers whose metadata is gone.

One scan, as the bookie's garbage collector (:mod:`bkeeper.server.garbage`) runs it:

1. take the set of ledgers the storage holds;
2. only then list the ledgers of the metadata; the local ledgers missing from the listing
   are the candidates;
3. confirm each candidate with a direct read of its metadata, at most ``reads_per_s`` reads
   a second (:class:`ReadLimiter`); delete those whose metadata is confirmed gone
   (``LedgerNotFoundError``) from the storage.

Why it never deletes a ledger that exists or is being created: a client creates a ledger's
metadata before it writes to any bookie, so every ledger of the local set (taken in step 1)
had metadata before the listing started, and a walk of the ledger tree sees every node that
exists throughout the walk: a ledger of the set missing from the listing lost its metadata.
A ledger created during or after the listing is not in the set and is not looked at (as
Apache BookKeeper skips ledgers created after its scan started). Taking the set after the
listing instead would make a ledger created meanwhile (metadata after the walk passed its
place, entries before the set was taken) a candidate. The confirming read covers a stale
listing (a ZooKeeper server behind the others): only "no such ledger" confirms. Any other
error (the metadata store down, a lost connection) ends the scan: an error is never
"absent", and nothing more is deleted until a later scan succeeds. Errors of bkeeper's
tree end the scan with a one-line reason; anything else is a bug and propagates.

Ledgers in limbo are treated as any other: one whose metadata is gone can never be needed
(the integrity check, :mod:`bkeeper.autorecovery.integrity`, deletes it the same way); one
with metadata is kept for the integrity check to repair. A deletion is journaled by the
storage; one lost in a crash is found again by the next scan.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from bkeeper.common.clock import Clock
from bkeeper.common.errors import BKeeperError, LedgerNotFoundError
from bkeeper.common.ids import LedgerId
from bkeeper.server.ratelimit import TokenBucket

__all__ = [
    "METADATA_READ_BURST",
    "LedgerMetadataReader",
    "LocalLedgers",
    "ReadLimiter",
    "ScanOutcome",
    "one_line",
    "scan_and_compare",
]

#: Confirming reads saved up while none were needed: 1 keeps them evenly spaced, so no second
#: ever sees more than ``reads_per_s`` (+1) of them.
METADATA_READ_BURST = 1


class LocalLedgers(Protocol):
    """What the scan needs of the storage engine (:class:`bkeeper.storage.Storage`)."""

    def ledger_ids(self) -> list[int]: ...

    def delete_ledger(self, ledger_id: int, *, token: object | None = None) -> None: ...


class LedgerMetadataReader(Protocol):
    """What the scan needs of the metadata (:class:`bkeeper.meta.ledgers.LedgerMetadataStore`)."""

    def ledger_ids(self) -> AsyncIterator[LedgerId]: ...

    async def read(self, ledger_id: int) -> object: ...


class ReadLimiter:
    """At most ``reads_per_s`` metadata reads a second: :meth:`acquire` waits for a token.

    ``sleep`` waits (and may return early when the caller is stopping); time comes from
    ``clock``, so a test can pass a fake clock and a sleep that moves it.
    """

    def __init__(
        self, reads_per_s: float, clock: Clock, sleep: Callable[[float], Awaitable[None]]
    ) -> None:
        self._interval_s = 1.0 / reads_per_s
        self._bucket = TokenBucket(reads_per_s, METADATA_READ_BURST, clock.monotonic())
        self._clock = clock
        self._sleep = sleep

    async def acquire(self, stopping: asyncio.Event) -> bool:
        """Wait for a token; False (no token taken) once ``stopping`` is set."""
        while not self._bucket.take(self._clock.monotonic()):
            if stopping.is_set():
                return False
            await self._sleep(self._interval_s)
        return not stopping.is_set()


@dataclass(frozen=True)
class ScanOutcome:
    """What one scan saw and did. ``error`` is the one line saying why it ended early
    (empty when it completed or was stopped)."""

    local_ledgers: int
    candidates: int
    deleted: tuple[int, ...]
    metadata_reads: int
    error: str = ""
    stopped: bool = False


async def scan_and_compare(
    storage: LocalLedgers,
    metadata: LedgerMetadataReader,
    limiter: ReadLimiter,
    stopping: asyncio.Event,
) -> ScanOutcome:
    """One scan (see the module docstring); errors end it and are reported, not raised."""
    local = set(storage.ledger_ids())  # before the listing: the whole safety argument
    if not local:
        return ScanOutcome(0, 0, (), 0)
    present: set[int] = set()
    try:
        async for listed in metadata.ledger_ids():
            if listed in local:
                present.add(listed)
            if stopping.is_set():
                return ScanOutcome(len(local), 0, (), 0, stopped=True)
    except BKeeperError as exc:
        error = f"listing the ledgers failed: {one_line(exc)}"
        return ScanOutcome(len(local), 0, (), 0, error=error)
    candidates = sorted(local - present)
    deleted: list[int] = []
    reads = 0
    for ledger_id in candidates:
        if not await limiter.acquire(stopping):
            return ScanOutcome(len(local), len(candidates), tuple(deleted), reads, stopped=True)
        reads += 1
        try:
            await metadata.read(ledger_id)
            continue  # a stale listing: the ledger exists
        except LedgerNotFoundError:
            pass
        except BKeeperError as exc:
            error = f"reading the metadata of ledger {ledger_id} failed: {one_line(exc)}"
            return ScanOutcome(len(local), len(candidates), tuple(deleted), reads, error=error)
        try:
            storage.delete_ledger(ledger_id)
        except BKeeperError as exc:
            error = f"deleting ledger {ledger_id} failed: {one_line(exc)}"
            return ScanOutcome(len(local), len(candidates), tuple(deleted), reads, error=error)
        deleted.append(ledger_id)
    return ScanOutcome(len(local), len(candidates), tuple(deleted), reads)


def one_line(exc: BaseException) -> str:
    """``Type: message`` (the type alone when the message is empty)."""
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
