"""Reading one ledger: entries up to the LAC, LAC discovery, long poll, explicit LAC.

Reads go to the replicas of the entry's write set in order; a replica that errs, answers
with a body that fails its digest (a bad replica), or says it has no such entry is passed over
for the next. A replica silent for ``speculative_read_timeout_ms`` gets company: the read is
also sent to the next replica and the first good answer wins. Over a range, this per-entry
path keeps up to ``read_ahead_entries_max`` entry reads in flight and yields entries in order.

LAC discovery (``read_last_add_confirmed``) asks every bookie of the last ensemble for its
last entry (without fencing) and takes the highest LAC found in the bodies, once enough
bookies answered to cover every write set (Qw - Qa + 1 each).

Ranges (``read``, ``read_unconfirmed``, ``read_batches``) go through
:mod:`bkeeper.client.batch_read`: v2 BATCH_READ requests where every bookie of a segment holds
every entry (E == Qw), the per-entry path above elsewhere and as the batch path's fallback.

The metadata a handle reads by is a :class:`~bkeeper.client.follow.LedgerView`: the long poll
starts a watch of it (a reader that stays open sees the writer's ensemble changes and the
seal as they are written, and its long poll goes again to the new last segment's bookies),
and a read or LAC discovery that no replica answers, or that every replica answers without
the entry, re-reads the metadata and, when it moved on (an ensemble change, a bookie replaced
by auto-recovery), asks again from the first entry not read yet, at most
``metadata_retries_max`` times per call.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import weakref
from collections.abc import AsyncGenerator, Sequence
from typing import Any

from bkeeper.client.batch_read import BatchReader, plan_spans
from bkeeper.client.context import ClientContext
from bkeeper.client.distribution import covers_every_write_set, recovery_quorum, write_set
from bkeeper.client.entry import Entry
from bkeeper.client.follow import LedgerView
from bkeeper.client.long_poll import Poll, poll_once
from bkeeper.client.refusal import status_error
from bkeeper.common import bugs
from bkeeper.common.errors import (
    BKeeperError,
    BookieUnavailableError,
    ClientClosedError,
    DataUnknownError,
    DigestMismatchError,
    NoSuchEntryError,
    NoSuchLedgerError,
    UnauthorizedAccessError,
)
from bkeeper.common.tasks import abandon, within
from bkeeper.meta.ledger_metadata import LedgerMetadata, LedgerState
from bkeeper.meta.store import Versioned
from bkeeper.wire.codes import Protocol, StatusCode
from bkeeper.wire.digest import DigestManager
from bkeeper.wire.messages import BytesLike, ReadLacRequest, ReadRequest

__all__ = ["ReadHandle"]

log = logging.getLogger(__name__)

#: What a replica answers when the reader's view of the ledger may be old (the entry is on
#: other bookies now): worth re-reading the metadata before reporting it.
_STALE_VIEW_ERRORS = (NoSuchEntryError, NoSuchLedgerError, BookieUnavailableError)


class ReadHandle:
    """Reads one ledger. Made by ``BookKeeper.open_ledger``."""

    def __init__(
        self,
        ctx: ClientContext,
        ledger_id: int,
        metadata: Versioned[LedgerMetadata],
        password: bytes,
    ) -> None:
        self._ctx = ctx
        self._config = ctx.config
        self.ledger_id = ledger_id
        self._view = LedgerView(ctx, ledger_id, metadata)
        weakref.finalize(self, self._view.stop)
        self._digest = DigestManager(ledger_id, metadata.value.digest_type, password, Entry)
        meta = metadata.value
        self._lac = meta.last_entry_id if meta.state is LedgerState.CLOSED else -1
        self._closed = False
        #: the entry after the previous LAC, as a long poll's answer carried it (verified):
        #: the next read of it is served from here, without a round trip
        self._piggybacked: Entry | None = None

    @property
    def _versioned(self) -> Versioned[LedgerMetadata]:
        return self._view.versioned

    @property
    def metadata(self) -> LedgerMetadata:
        """The ledger's metadata as this handle knows it now (see the module docstring)."""
        return self._versioned.value

    @property
    def view(self) -> LedgerView:
        """The handle's view of the metadata (whether it watches, how often it moved on)."""
        return self._view

    @property
    def is_closed(self) -> bool:
        return self._versioned.value.state is LedgerState.CLOSED

    @property
    def last_add_confirmed(self) -> int:
        """The highest LAC this handle has learnt (the last entry of a closed ledger)."""
        meta = self._versioned.value
        if meta.state is LedgerState.CLOSED and meta.last_entry_id > self._lac:
            self._lac = meta.last_entry_id  # sealed since the handle was opened
        return self._lac

    @property
    def length(self) -> int:
        return self._versioned.value.length

    async def close(self) -> None:
        self._closed = True
        self._view.stop()

    # -- entries -------------------------------------------------------------------------
    def read(self, first: int = 0, last: int | None = None) -> AsyncGenerator[Entry, None]:
        """Entries ``first..last`` (default: up to the LAC); never beyond the LAC. (The
        generator itself, not one wrapping it: one resumption per entry, not two.)"""
        return self._entries(first, last, unconfirmed=False)

    def read_unconfirmed(self, first: int, last: int) -> AsyncGenerator[Entry, None]:
        """Entries ``first..last`` even beyond the LAC (they may not be durable yet)."""
        return self._entries(first, last, unconfirmed=True)

    async def read_batches(
        self, first: int, last: int | None = None, *, unconfirmed: bool = False
    ) -> AsyncGenerator[list[Entry], None]:
        """Entries ``first..last`` (default: up to the LAC) as non-empty lists, in order,
        verified, each entry once. Beyond the LAC only with ``unconfirmed``.

        Uses v2 BATCH_READ where a segment allows it (see :mod:`bkeeper.client.batch_read`),
        else the per-entry path; errors are those of :meth:`read`, raised after the entries
        before the one that failed. The LAC piggybacked on a list's entries is learnt before
        the list is yielded.
        """
        async with contextlib.aclosing(self._batches(first, last, unconfirmed)) as batches:
            async for batch in batches:
                lac = max(entry.lac for entry in batch)
                if lac > self._lac:  # noqa: PLR1730 (hot path: no call)
                    self._lac = lac
                yield batch

    async def _entries(
        self, first: int, last: int | None, unconfirmed: bool
    ) -> AsyncGenerator[Entry, None]:
        # The LAC is learnt entry by entry, as each entry is yielded (as readers expect).
        async with contextlib.aclosing(self._batches(first, last, unconfirmed)) as batches:
            async for batch in batches:
                for entry in batch:
                    if entry.lac > self._lac:  # noqa: PLR1730 (hot path: no call)
                        self._lac = entry.lac
                    yield entry

    async def _batches(
        self, first: int, last: int | None, unconfirmed: bool
    ) -> AsyncGenerator[list[Entry], None]:
        lac = self.last_add_confirmed
        if last is None:
            last = lac
        if last > lac and not unconfirmed:
            raise NoSuchEntryError(
                f"ledger {self.ledger_id}: entry {last} is beyond the LAC {self._lac}; "
                "use read_unconfirmed"
            )
        self._check_open()
        if first < 0 or first > last + 1:
            raise NoSuchEntryError(f"ledger {self.ledger_id}: bad range {first}..{last}")
        piggybacked, self._piggybacked = self._piggybacked, None
        if piggybacked is not None and piggybacked.entry_id == first <= last:
            yield [piggybacked]  # a tailing reader's next entry, from its long poll
            first += 1
            if first > last:
                return
        reader = BatchReader(self._ctx, self.ledger_id, self._digest, self._read_chunks)
        next_id, refreshes = first, 0
        while True:
            try:
                for span in plan_spans(self._versioned.value, next_id, last, self._config.protocol):
                    async with contextlib.aclosing(reader.read(span)) as batches:
                        async for batch in batches:
                            next_id = batch[-1].entry_id + 1
                            yield batch
                return
            except _STALE_VIEW_ERRORS as exc:
                refreshes += 1
                if not await self._moved_on(refreshes, exc):
                    raise

    async def read_entry(self, entry_id: int) -> Entry:
        refreshes = 0
        while True:
            try:
                return await self._read_one(entry_id)
            except _STALE_VIEW_ERRORS as exc:
                refreshes += 1
                if not await self._moved_on(refreshes, exc):
                    raise

    async def _moved_on(self, refreshes: int, error: BaseException) -> bool:
        """After ``error`` (no replica had what was asked): did the metadata move on (an
        ensemble change, a bookie replaced), so that asking again may succeed?"""
        if refreshes > self._config.metadata_retries_max:
            return False
        self._check_open()
        if not await self._view.refresh():
            return False
        log.info("ledger %d: asking again with its new metadata after: %s", self.ledger_id, error)
        return True

    async def read_entry_from(self, bookie: str, entry_id: int) -> Entry:
        """``entry_id`` as ``bookie`` holds it, verified, asking no other replica (the
        auditor's probe of one replica). The bookie's answer as an error otherwise:
        ``NoSuchEntryError``/``NoSuchLedgerError`` (it lacks it), ``DataUnknownError``,
        ``DigestMismatchError`` (a bad copy), ``BookieUnavailableError``."""
        self._check_open()
        return await self._ask(bookie, entry_id, ReadRequest(self.ledger_id, entry_id))

    async def _read_chunks(self, first: int, last: int) -> AsyncGenerator[list[Entry], None]:
        """The per-entry path: ``read_ahead_entries_max`` reads in flight; each list holds
        the entries ready in order (at most ``batch_read_entries_max``)."""
        self._check_open()
        window: collections.deque[asyncio.Task[Entry]] = collections.deque()
        next_id = first
        chunk_max = self._config.batch_read_entries_max
        try:
            while next_id <= last or window:
                while next_id <= last and len(window) < self._config.read_ahead_entries_max:
                    window.append(asyncio.ensure_future(self._read_one(next_id)))
                    next_id += 1
                chunk = [await window[0]]
                window.popleft()
                while window and len(chunk) < chunk_max and _succeeded(window[0]):
                    chunk.append(window.popleft().result())
                yield chunk
        finally:
            abandon(window)

    async def _read_one(self, entry_id: int) -> Entry:
        self._check_open()
        meta = self._versioned.value
        ensemble = meta.ensemble_for(entry_id)
        replicas = [ensemble[i] for i in write_set(entry_id, meta.ensemble_size, meta.write_quorum)]
        if self._ctx.local_bookies:  # a local region (the common case pays one test)
            replicas = self._ctx.local_first(replicas)
        return await self._first_good(entry_id, replicas, ReadRequest(self.ledger_id, entry_id))

    async def _first_good(
        self, entry_id: int, replicas: Sequence[str], request: ReadRequest
    ) -> Entry:
        """Ask replicas in order (speculatively), return the first verified entry."""
        spec = self._config.speculative_read_timeout_ms / 1000.0
        total = self._config.read_timeout_ms / 1000.0
        attempts: set[asyncio.Task[Entry]] = set()
        started: list[asyncio.Task[Entry]] = []  # in order (a set's follows memory addresses)
        errors: list[BaseException] = []
        index = 0
        clock = self._ctx.clock
        deadline = clock.monotonic() + total * max(1, len(replicas))
        try:
            while True:
                if index < len(replicas) and (not attempts or spec > 0):
                    task = asyncio.ensure_future(self._ask(replicas[index], entry_id, request))
                    attempts.add(task)
                    started.append(task)
                    index += 1
                if not attempts:
                    meta = self._versioned.value
                    misses = recovery_quorum(meta.write_quorum, meta.ack_quorum)
                    raise _best_error(self.ledger_id, entry_id, errors, misses)
                wait = spec if index < len(replicas) and spec > 0 else deadline - clock.monotonic()
                if wait <= 0:
                    raise BookieUnavailableError(
                        f"ledger {self.ledger_id} entry {entry_id}: no replica answered in time"
                    )
                done, attempts = await asyncio.wait(
                    attempts, timeout=wait, return_when=asyncio.FIRST_COMPLETED
                )
                for task in [t for t in started if t in done]:  # in the replicas' order
                    if task.exception() is None:
                        return task.result()
                    errors.append(task.exception())  # type: ignore[arg-type]
        finally:
            abandon(started)

    async def _ask(self, bookie: str, entry_id: int, request: ReadRequest) -> Entry:
        try:
            response = await within(
                self._ctx.pool.send(bookie, request), self._config.read_timeout_ms / 1000.0
            )
        except TimeoutError:
            raise BookieUnavailableError(
                f"ledger {self.ledger_id} entry {entry_id} on {bookie}: no answer in "
                f"{self._config.read_timeout_ms} ms"
            ) from None
        if response.status is not StatusCode.EOK:
            raise _status_error(response.status, self.ledger_id, entry_id, bookie)
        return self._digest.verify_entry(response.body, entry_id)

    # -- LAC -----------------------------------------------------------------------------
    async def read_last_add_confirmed(self) -> int:
        """Learn the LAC from the bookies of the last ensemble (no fencing)."""
        refreshes = 0
        while True:
            try:
                return await self._read_last_add_confirmed()
            except BookieUnavailableError as exc:
                refreshes += 1
                if not await self._moved_on(refreshes, exc):
                    raise

    async def _read_last_add_confirmed(self) -> int:
        self._check_open()
        if self.is_closed:
            return self.last_add_confirmed
        meta = self._versioned.value
        ensemble = list(meta.last_ensemble)
        results = await self._ask_all(ensemble, lambda b: ReadRequest(self.ledger_id, -1))
        answered, lacs = set(), [self._lac]
        for position, result in enumerate(results):
            if isinstance(result, BaseException):
                if isinstance(result, UnauthorizedAccessError):
                    raise result
                continue
            status, body = result.status, result.body
            if status is StatusCode.EOK and body is not None:
                with contextlib.suppress(DigestMismatchError):
                    entry = self._digest.verify_entry(body)
                    past_lac = bugs.ACTIVE and bugs.active("lac-from-last-stored")
                    lacs.append(entry.entry_id if past_lac else entry.lac)
                    answered.add(position)
            elif status in (StatusCode.ENOENTRY, StatusCode.ENOLEDGER):
                answered.add(position)
        if not covers_every_write_set(
            answered, meta.ensemble_size, meta.write_quorum, meta.ack_quorum
        ):
            raise BookieUnavailableError(
                f"ledger {self.ledger_id}: too few bookies answered to learn the LAC"
            )
        self._lac = max(lacs)
        return self._lac

    async def wait_last_add_confirmed(self, previous: int, timeout_ms: int | None = None) -> int:
        """Long poll: return once the LAC passes ``previous`` or the timeout ends.

        The poll goes to the bookies of the last segment as the handle knows it; it starts
        the watch of the ledger's metadata (:meth:`LedgerView.follow`), and when the metadata
        moves on meanwhile (an ensemble change) the poll goes again to the new last segment's
        bookies for the time left; a ledger sealed meanwhile answers its last entry. When
        every bookie failed, the metadata is read again and, if it moved on, polled again;
        else the poll waits for the metadata to move until its time is up.
        """
        self._check_open()
        self._view.follow()
        if self.last_add_confirmed > previous or self.is_closed:
            return self._lac
        timeout = timeout_ms if timeout_ms is not None else self._config.long_poll_timeout_ms
        clock = self._ctx.clock
        deadline = clock.monotonic() + timeout / 1000.0
        refreshes = 0
        while True:
            changed = self._view.change_event()
            bookies = self._versioned.value.last_ensemble
            outcome, answer = await poll_once(
                self._ctx, self.ledger_id, bookies, previous, deadline, changed
            )
            if answer is not None and answer.max_lac is not None:  # past previous
                self._lac = max(self._lac, answer.max_lac)
                self._keep_piggybacked(answer.body, previous + 1)
            if outcome is Poll.ANSWERED or self.last_add_confirmed > previous:
                return self._lac
            if self.is_closed:
                return self.last_add_confirmed
            if outcome is Poll.FAILED:
                refreshes += 1
                if refreshes > self._config.metadata_retries_max:
                    return self._lac
                if not await self._view.refresh():
                    # No bookie answered and the metadata is as it was: wait for it to move
                    # (the watch) until the time is up, rather than return at once.
                    remaining = deadline - clock.monotonic()
                    if remaining <= 0:
                        return self._lac
                    try:
                        await within(changed.wait(), remaining)
                    except TimeoutError:
                        return self._lac
            elif outcome is Poll.TIMED_OUT:
                return self._lac
            # Poll.MOVED_ON, or refreshed: poll the new last segment's bookies.

    def _keep_piggybacked(self, body: BytesLike | None, entry_id: int) -> None:
        """Keep the entry a long poll's answer carried, once verified, for the next read."""
        if body is None:
            return
        try:
            self._piggybacked = self._digest.verify_entry(body, entry_id)
        except DigestMismatchError as exc:  # the read asks the replicas again, and says so
            log.warning("ledger %d: long poll answer's entry dropped: %s", self.ledger_id, exc)

    async def read_explicit_last_add_confirmed(self) -> int:
        """The LAC from the bookies' explicit LAC (WRITE_LAC) and last entries (v3)."""
        self._check_open()
        ensemble = list(self._versioned.value.last_ensemble)
        results = await self._ask_all(
            ensemble, lambda b: ReadLacRequest(self.ledger_id), Protocol.V3
        )
        best = self._lac
        for result in results:
            if isinstance(result, BaseException) or result.status is not StatusCode.EOK:
                continue
            with contextlib.suppress(DigestMismatchError):
                if result.lac_body is not None:
                    best = max(best, self._digest.verify_lac(result.lac_body))
                if result.last_entry_body is not None:
                    best = max(best, self._digest.verify_entry(result.last_entry_body).lac)
        self._lac = best
        return best

    async def _ask_all(
        self, bookies: Sequence[str], make: Any, protocol: Protocol | None = None
    ) -> list[Any]:
        timeout = self._config.read_timeout_ms / 1000.0

        async def one(bookie: str) -> Any:
            return await within(self._ctx.pool.send(bookie, make(bookie), protocol), timeout)

        return await asyncio.gather(*(one(b) for b in bookies), return_exceptions=True)

    def _check_open(self) -> None:
        if self._ctx.closed:
            raise ClientClosedError("the client is closed")
        if self._closed:
            raise ClientClosedError(f"handle of ledger {self.ledger_id} is closed")


def _succeeded(task: asyncio.Task[Entry]) -> bool:
    return task.done() and not task.cancelled() and task.exception() is None


def _status_error(status: StatusCode, ledger_id: int, entry_id: int, bookie: str) -> BKeeperError:
    return status_error(status, f"ledger {ledger_id} entry {entry_id} on {bookie}")


def _best_error(
    ledger_id: int, entry_id: int, errors: list[BaseException], misses_decisive: int
) -> BaseException:
    """The error to report when no replica had the entry.

    ``misses_decisive`` replicas (Qw - Qa + 1) saying they do not have the entry prove it was
    never acknowledged: then unreachable replicas do not make it "unavailable" but missing.
    """
    for cls in (UnauthorizedAccessError, DigestMismatchError, DataUnknownError):
        for error in errors:
            if isinstance(error, cls):
                return error
    misses = [e for e in errors if isinstance(e, NoSuchEntryError | NoSuchLedgerError)]
    unreachable = [e for e in errors if isinstance(e, BookieUnavailableError)]
    only_misses_or_unreachable = len(misses) + len(unreachable) == len(errors)
    if (
        misses
        and only_misses_or_unreachable
        and (not unreachable or len(misses) >= misses_decisive)
    ):
        return misses[0]
    if errors:
        return errors[0]
    return NoSuchEntryError(f"ledger {ledger_id} entry {entry_id}: no replica has it")
