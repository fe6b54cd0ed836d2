"""The bookie's data integrity check: repair the ledgers in limbo, then take them out of it.

A ledger in limbo (its journal records were damaged, see :mod:`bkeeper.storage.storage`)
answers "unknown" for what it lacks; something must repair it, or it stays so forever. For
each ledger in limbo of a bookie running in this process (its storage, its id and a started
client), as Apache BookKeeper's data integrity check does:

1. read its metadata; gone: delete the local ledger (nothing can need it), done;
2. this bookie in none of its ensembles: it should hold nothing, clear limbo, done;
3. OPEN or IN_RECOVERY: open it with recovery (fence and seal; recovery re-writes the
   entries after the LAC to their whole write set, this bookie included);
4. check the ledger's local entries against their checksums (a damaged entry-log record
   counts as lacking: :meth:`~bkeeper.storage.Storage.check_entries`), then, for every
   segment with this bookie, copy each entry it should hold
   (:mod:`bkeeper.autorecovery.expected`) but lacks, from another replica
   (:mod:`bkeeper.autorecovery.entry_copy`), into the local storage as a recovery add with
   the ledger's master key, waiting until it is durable;
5. check that nothing is missing any more and clear limbo. The pass ends with a checkpoint,
   which persists the cleared limbo (a crash before it only repeats the repair).

Limbo of the whole storage (replay could not tell which ledgers it hit) is first turned into
limbo of each ledger this bookie may hold: those of the metadata with this bookie in an
ensemble and those the storage holds (a local ledger without metadata is deleted); after a
checkpoint persists that, the storage's own limbo is cleared.

A ledger whose repair fails (too few bookies to recover it or read from) stays in limbo:
:func:`run_integrity_check` makes up to ``attempts_max`` passes, ``retry_interval_ms``
apart, until nothing is in limbo. At most ``ledgers_in_flight_max`` ledgers are repaired at
once; progress is logged per ledger and per pass.

Durability: the storage must report its tokens on the event loop, as the bookie's request
handlers do (``Bookie``, the in-memory cluster); the check's own writes pass
:class:`~bkeeper.server.responder.WhenDurable` tokens, the handlers' kind for such callbacks.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field

from bkeeper.autorecovery.entry_copy import copy_entries
from bkeeper.autorecovery.expected import missing_entries
from bkeeper.client.bookkeeper import BookKeeper
from bkeeper.common.errors import (
    BKeeperError,
    LedgerNotFoundError,
    StorageError,
    TooManyRequestsError,
)
from bkeeper.common.tasks import within
from bkeeper.common.validate import check_positive_ints
from bkeeper.meta.ledger_metadata import LedgerMetadata
from bkeeper.server.bookie import Bookie
from bkeeper.server.responder import WhenDurable
from bkeeper.storage import Storage
from bkeeper.wire.digest import master_key

__all__ = [
    "IntegrityCheckConfig",
    "IntegrityReport",
    "check_bookie",
    "check_storage",
    "run_integrity_check",
]

log = logging.getLogger(__name__)

#: A storage write's token: its callback gets the error (None: durable) on the event loop.
Token = WhenDurable


@dataclass(frozen=True)
class IntegrityCheckConfig:
    """Limits of the integrity check."""

    ledgers_in_flight_max: int = 4
    ranges_in_flight_max: int = 4
    attempts_max: int = 20
    retry_interval_ms: int = 30_000
    add_retries_max: int = 200
    add_retry_interval_ms: int = 25

    def __post_init__(self) -> None:
        check_positive_ints(
            self,
            "ledgers_in_flight_max",
            "ranges_in_flight_max",
            "attempts_max",
            "retry_interval_ms",
            "add_retries_max",
            "add_retry_interval_ms",
        )


@dataclass
class IntegrityReport:
    """What one pass did: ledgers repaired (limbo cleared), deleted (no metadata), failed
    (still in limbo, with why), and how many entries it copied."""

    repaired: list[int] = field(default_factory=list)
    deleted: list[int] = field(default_factory=list)
    failed: dict[int, str] = field(default_factory=dict)
    entries_copied: int = 0


async def check_bookie(
    bookie: Bookie, client: BookKeeper, config: IntegrityCheckConfig | None = None
) -> IntegrityReport:
    """:func:`run_integrity_check` for a started :class:`Bookie` of this process."""
    if bookie.storage is None:
        raise StorageError(f"bookie {bookie.bookie_id} is not started")
    return await run_integrity_check(bookie.storage, bookie.bookie_id, client, config)


async def run_integrity_check(
    storage: Storage,
    bookie_id: str,
    client: BookKeeper,
    config: IntegrityCheckConfig | None = None,
    stopping: asyncio.Event | None = None,
) -> IntegrityReport:
    """Passes of :func:`check_storage` until nothing is in limbo, at most ``attempts_max``
    (or until ``stopping`` is set); the report of the last pass."""
    config = config or IntegrityCheckConfig()
    stopping = stopping or asyncio.Event()
    report = IntegrityReport()
    for attempt in range(1, config.attempts_max + 1):
        report = await check_storage(storage, bookie_id, client, config)
        left = storage.limbo_ledgers()
        if not storage.limbo and not left:
            return report
        if attempt == config.attempts_max:
            break
        log.warning(
            "integrity check: %s still in limbo after pass %d; next pass in %d ms",
            "the whole storage" if storage.limbo else f"{len(left)} ledgers",
            attempt,
            config.retry_interval_ms,
        )
        with contextlib.suppress(TimeoutError):
            await within(stopping.wait(), config.retry_interval_ms / 1000.0)
        if stopping.is_set():
            return report
    log.error(
        "integrity check gave up after %d passes: ledgers %s still in limbo%s",
        config.attempts_max,
        storage.limbo_ledgers(),
        " (and the whole storage)" if storage.limbo else "",
    )
    return report


async def check_storage(
    storage: Storage,
    bookie_id: str,
    client: BookKeeper,
    config: IntegrityCheckConfig | None = None,
) -> IntegrityReport:
    """One pass over the ledgers in limbo (see the module docstring)."""
    config = config or IntegrityCheckConfig()
    report = IntegrityReport()
    if storage.limbo:
        await _limbo_per_ledger(storage, bookie_id, client, config, report)
    ledgers = storage.limbo_ledgers()
    log.info("integrity check of %s: %d ledgers in limbo", bookie_id, len(ledgers))
    repair = _Repair(storage, bookie_id, client, config, report)
    await _for_each(iter(ledgers), repair.ledger, config.ledgers_in_flight_max)
    if report.repaired or report.deleted:
        await asyncio.to_thread(storage.checkpoint)
    log.info(
        "integrity check of %s: %d ledgers repaired (%d entries copied), %d deleted, %d failed",
        bookie_id,
        len(report.repaired),
        report.entries_copied,
        len(report.deleted),
        len(report.failed),
    )
    return report


async def _for_each(
    items: Iterator[int], work: Callable[[int], Awaitable[None]], workers: int
) -> None:
    """``work(item)`` for every item, ``workers`` at a time (``work`` must not raise)."""

    async def worker() -> None:
        for item in items:  # shared: each worker takes the next item when free
            await work(item)

    async with asyncio.TaskGroup() as group:
        for _ in range(workers):
            group.create_task(worker())


class _Repair:
    """Repairs single ledgers for one pass; failures go to the report, never raise."""

    def __init__(
        self,
        storage: Storage,
        bookie_id: str,
        client: BookKeeper,
        config: IntegrityCheckConfig,
        report: IntegrityReport,
    ) -> None:
        self.storage = storage
        self.bookie_id = bookie_id
        self.client = client
        self.config = config
        self.report = report

    async def ledger(self, ledger_id: int) -> None:
        try:
            await self._ledger(ledger_id)
        except BKeeperError as exc:
            log.warning("integrity check: ledger %d stays in limbo: %s", ledger_id, exc)
            self.report.failed[ledger_id] = str(exc) or type(exc).__name__

    async def _ledger(self, ledger_id: int) -> None:
        storage = self.storage
        try:
            meta = await self.client.ledger_metadata(ledger_id)
        except LedgerNotFoundError:
            await self._durable(lambda token: storage.delete_ledger(ledger_id, token=token))
            log.info("integrity check: ledger %d has no metadata: deleted", ledger_id)
            self.report.deleted.append(ledger_id)
            return
        if not _in_ensembles(meta, self.bookie_id):
            storage.clear_limbo(ledger_id)
            log.info("integrity check: ledger %d: not on this bookie, limbo cleared", ledger_id)
            self.report.repaired.append(ledger_id)
            return
        recovery = not meta.is_closed
        handle = await self.client.open_ledger(ledger_id, meta.password, recovery=recovery)
        try:
            meta = handle.metadata
            # damaged records are found again (which ones is not kept across a restart)
            await asyncio.to_thread(storage.check_entries, ledger_id)
            missing = self._missing(ledger_id, meta)
            key = master_key(meta.password)

            async def sink(batch: list[tuple[int, bytes]]) -> None:
                await self._store(ledger_id, key, batch)

            copied = await copy_entries(
                handle, meta.password, missing, sink, self.config.ranges_in_flight_max
            )
        finally:
            await handle.close()
        left = self._missing(ledger_id, meta)
        if left:
            raise StorageError(f"ledger {ledger_id}: {len(left)} entries still missing")
        storage.clear_limbo(ledger_id)
        self.report.repaired.append(ledger_id)
        self.report.entries_copied += copied
        log.info(
            "integrity check: ledger %d%s: %d entries copied, limbo cleared",
            ledger_id,
            " recovered" if recovery else "",
            copied,
        )

    def _missing(self, ledger_id: int, meta: LedgerMetadata) -> list[int]:
        present = self.storage.list_entries(ledger_id)
        return missing_entries(meta, self.bookie_id, meta.last_entry_id, present)

    async def _store(self, ledger_id: int, key: bytes, batch: list[tuple[int, bytes]]) -> None:
        """Add ``batch`` to the local storage as recovery adds; return once durable."""
        waits = []
        for entry_id, body in batch:
            add = functools.partial(self._recovery_add, ledger_id, entry_id, key, body)
            waits.append(await self._queue(add))
        for wait in waits:
            error = await wait
            if error is not None:
                raise StorageError(f"ledger {ledger_id}: a copied entry was not stored") from error

    def _recovery_add(
        self, ledger_id: int, entry_id: int, key: bytes, body: bytes, token: Token
    ) -> None:
        self.storage.add_entry(ledger_id, entry_id, key, body, recovery=True, token=token)

    async def _queue(self, write: Callable[[Token], None]) -> asyncio.Future[BaseException | None]:
        """Call ``write(token)``, again while the storage is too busy (bounded); a future
        of the error its token reports (None: durable)."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[BaseException | None] = loop.create_future()

        def durable(error: BaseException | None) -> None:
            if not done.done():
                done.set_result(error)

        token = WhenDurable(durable)

        for _ in range(self.config.add_retries_max):
            try:
                write(token)
                return done
            except TooManyRequestsError:
                await asyncio.sleep(self.config.add_retry_interval_ms / 1000.0)
        raise TooManyRequestsError(
            f"storage stayed too busy for {self.config.add_retries_max} attempts"
        )

    async def _durable(self, write: Callable[[Token], None]) -> None:
        error = await (await self._queue(write))
        if error is not None:
            raise StorageError("the storage failed to make a change durable") from error


def _in_ensembles(meta: LedgerMetadata, bookie_id: str) -> bool:
    return any(bookie_id in ensemble for ensemble in meta.segments.values())


async def _limbo_per_ledger(
    storage: Storage,
    bookie_id: str,
    client: BookKeeper,
    config: IntegrityCheckConfig,
    report: IntegrityReport,
) -> None:
    """Turn the storage's limbo into limbo of each ledger this bookie may hold."""
    ledger_ids = set(storage.ledger_ids())
    async for ledger_id in client.list_ledgers():
        ledger_ids.add(ledger_id)
    log.info(
        "integrity check: the whole storage is in limbo; %d ledgers to look at", len(ledger_ids)
    )
    repair = _Repair(storage, bookie_id, client, config, report)
    failures = len(report.failed)

    async def mark(ledger_id: int) -> None:
        try:
            meta = await client.ledger_metadata(ledger_id)
        except LedgerNotFoundError:
            if storage.ledger_exists(ledger_id):
                await repair.ledger(ledger_id)  # deletes it
            return
        except BKeeperError as exc:
            report.failed[ledger_id] = str(exc) or type(exc).__name__
            return
        if _in_ensembles(meta, bookie_id) or storage.ledger_exists(ledger_id):
            try:
                storage.mark_limbo(ledger_id, master_key(meta.password))
            except BKeeperError as exc:
                report.failed[ledger_id] = str(exc) or type(exc).__name__

    await _for_each(iter(sorted(ledger_ids)), mark, config.ledgers_in_flight_max)
    if len(report.failed) > failures:
        log.warning(
            "integrity check: the storage stays in limbo (%d ledgers failed)",
            len(report.failed) - failures,
        )
        return
    await asyncio.to_thread(storage.checkpoint)  # the limbo of each ledger is persisted...
    storage.clear_limbo()  # ...before the storage's own is cleared
    log.info(
        "integrity check: storage limbo replaced by limbo of %d ledgers",
        len(storage.limbo_ledgers()),
    )
