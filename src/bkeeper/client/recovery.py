"""Ledger recovery: fence the old writer, find the true end, seal the ledger.

Steps (BookKeeper's, §0 of the reference):

1. State OPEN -> IN_RECOVERY by compare-and-set (a CLOSED ledger needs nothing).
2. Fencing read of entry -1 (with the master key) to every bookie of the last ensemble; wait
   for quorum coverage (Qw - Qa + 1 answers per write set), so that no ack quorum can form
   for the old writer any more. LAC = max(LAC in the bodies, first entry of the last
   segment - 1).
3. From LAC + 1, read each entry from its write set with the fence flag too; re-write a found
   entry to its write set with RECOVERY_ADD (Qa acknowledgements needed); stop at the first
   entry that Qw - Qa + 1 bookies of its write set say they do not have. Entries are read
   and re-written ``recovery_batch_entries`` at a time, and each question is decided as soon
   as the answers in hand decide it: a silent bookie costs one timeout per batch, not one
   per entry.
4. CLOSED with last entry and length by compare-and-set. A lost CAS re-reads: a CLOSED
   ledger means a concurrent recovery finished first, and its end is taken as is.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any

from bkeeper.client.context import ClientContext
from bkeeper.client.distribution import covers_every_write_set, recovery_quorum, write_set
from bkeeper.common.errors import (
    BookieUnavailableError,
    DigestMismatchError,
    MetadataError,
    MetadataVersionError,
    UnauthorizedAccessError,
)
from bkeeper.meta.ledger_metadata import LedgerMetadata, LedgerState
from bkeeper.meta.store import Versioned
from bkeeper.wire.codes import StatusCode
from bkeeper.wire.digest import DigestManager, Entry, master_key
from bkeeper.wire.messages import AddRequest, ReadRequest

__all__ = ["check_password", "recover_ledger"]

log = logging.getLogger(__name__)

_ABSENT = (StatusCode.ENOENTRY, StatusCode.ENOLEDGER)


def check_password(ledger_id: int, meta: LedgerMetadata, password: bytes) -> None:
    if meta.password != password:
        raise UnauthorizedAccessError(f"ledger {ledger_id}: wrong password")


class _Recovery:
    def __init__(self, ctx: ClientContext, ledger_id: int, meta: LedgerMetadata, password: bytes):
        self.ctx = ctx
        self.ledger_id = ledger_id
        self.meta = meta
        self.key = master_key(password)
        self.digest = DigestManager(ledger_id, meta.digest_type, password)
        self.timeout_s = ctx.config.read_timeout_ms / 1000.0
        self.recovery_quorum = recovery_quorum(meta.write_quorum, meta.ack_quorum)
        self._stragglers: set[asyncio.Future[Any]] = set()

    async def ask(
        self, bookies: Sequence[str], request: Any, enough: Callable[[list[Any]], bool]
    ) -> list[Any]:
        """Send ``request`` to every bookie; the replies (or errors, by position; None where
        none came yet) as soon as ``enough(replies)`` holds or every bookie has answered.

        A slow or silent bookie is never waited for once the others decide the question;
        its request runs on until its timeout in the background.
        """
        loop = asyncio.get_running_loop()
        replies: list[Any] = [None] * len(bookies)
        pending = [len(bookies)]
        decided: asyncio.Future[None] = loop.create_future()

        def on_reply(position: int, task: asyncio.Future[Any]) -> None:
            self._stragglers.discard(task)
            if task.cancelled():
                result: Any = BookieUnavailableError("request cancelled")
            else:
                result = task.exception() or task.result()
            if decided.done():
                return
            replies[position] = result
            pending[0] -= 1
            if enough(replies) or pending[0] == 0:
                decided.set_result(None)

        for position, bookie in enumerate(bookies):
            task = asyncio.ensure_future(
                asyncio.wait_for(self.ctx.pool.send(bookie, request), self.timeout_s)
            )
            self._stragglers.add(task)
            task.add_done_callback(functools.partial(on_reply, position))
        await decided
        return list(replies)

    async def fence(self) -> int:
        meta = self.meta
        ensemble = list(meta.last_ensemble)
        request = ReadRequest(self.ledger_id, -1, fence=True, master_key=self.key)
        answered: set[int] = set()
        lacs: dict[int, int] = {}

        def enough(replies: list[Any]) -> bool:
            for position, result in enumerate(replies):
                if result is None or isinstance(result, BaseException) or position in answered:
                    continue
                if result.status is StatusCode.EUA:
                    return True
                if result.status is StatusCode.EOK and result.body is not None:
                    try:
                        lacs[position] = self.digest.verify_entry(result.body).lac
                    except DigestMismatchError:
                        continue
                    answered.add(position)
                elif result.status in _ABSENT:
                    answered.add(position)
            return covers_every_write_set(
                answered, meta.ensemble_size, meta.write_quorum, meta.ack_quorum
            )

        replies = await self.ask(ensemble, request, enough)
        if any(
            r is not None and not isinstance(r, BaseException) and r.status is StatusCode.EUA
            for r in replies
        ):
            raise UnauthorizedAccessError(f"ledger {self.ledger_id}: wrong password")
        if not covers_every_write_set(
            answered, meta.ensemble_size, meta.write_quorum, meta.ack_quorum
        ):
            raise BookieUnavailableError(
                f"ledger {self.ledger_id}: could not fence, too few bookies answered "
                f"({len(answered)} of {len(ensemble)})"
            )
        return max(max(lacs.values(), default=-1), max(meta.segments) - 1)

    def write_set_of(self, entry_id: int) -> list[str]:
        meta = self.meta
        ensemble = meta.ensemble_for(entry_id)
        return [ensemble[i] for i in write_set(entry_id, meta.ensemble_size, meta.write_quorum)]

    async def find(self, entry_id: int) -> Entry | None:
        """The entry, None when enough bookies say it is absent; else an error."""
        request = ReadRequest(self.ledger_id, entry_id, fence=True, master_key=self.key)
        found: list[Entry] = []
        seen: set[int] = set()
        absent = [0]

        def enough(replies: list[Any]) -> bool:
            for position, result in enumerate(replies):
                if result is None or position in seen:
                    continue
                seen.add(position)
                if isinstance(result, BaseException):
                    continue
                if result.status is StatusCode.EOK and result.body is not None:
                    try:
                        found.append(self.digest.verify_entry(result.body, entry_id))
                    except DigestMismatchError:
                        log.warning("ledger %d entry %d: bad replica", self.ledger_id, entry_id)
                elif result.status in _ABSENT:
                    absent[0] += 1
            return bool(found) or absent[0] >= self.recovery_quorum

        await self.ask(self.write_set_of(entry_id), request, enough)
        if found:
            return found[0]
        if absent[0] >= self.recovery_quorum:
            return None
        raise BookieUnavailableError(
            f"ledger {self.ledger_id}: cannot tell whether entry {entry_id} exists"
        )

    async def rewrite(self, entry: Entry) -> None:
        """Re-write ``entry`` to its write set as a recovery add; done at Qa acknowledgements."""
        body = bytes(
            self.digest.encode_entry(entry.entry_id, entry.lac, entry.length, entry.payload)
        )
        request = AddRequest(self.ledger_id, entry.entry_id, self.key, body, recovery=True)
        ack_quorum = self.meta.ack_quorum

        def acks(replies: list[Any]) -> int:
            return sum(
                1
                for r in replies
                if r is not None and not isinstance(r, BaseException) and r.status is StatusCode.EOK
            )

        replies = await self.ask(
            self.write_set_of(entry.entry_id), request, lambda r: acks(r) >= ack_quorum
        )
        acked = acks(replies)
        if acked < ack_quorum:
            errors = {
                str(r) if isinstance(r, BaseException) else r.status.name
                for r in replies
                if r is not None
            }
            raise BookieUnavailableError(
                f"ledger {self.ledger_id}: recovery add of entry {entry.entry_id} reached "
                f"{acked} of {ack_quorum} bookies ({', '.join(sorted(errors)) or 'no answer'})"
            )

    async def length_at(self, lac: int) -> int:
        if lac < 0:
            return 0
        entry = await self.find(lac)
        if entry is None:
            raise BookieUnavailableError(f"ledger {self.ledger_id}: entry {lac} (LAC) is missing")
        return entry.length

    async def run(self) -> tuple[int, int]:
        """Fence, then read and re-write entries after the LAC in batches until the first
        entry that is known absent; (last entry id, length)."""
        lac = await self.fence()
        length = await self.length_at(lac)
        batch = self.ctx.config.recovery_batch_entries
        first = lac + 1
        while True:
            ids = range(first, first + batch)
            results = await asyncio.gather(*(self.find(e) for e in ids), return_exceptions=True)
            found: list[Entry] = []
            end: int | None = None
            for entry_id, result in zip(ids, results, strict=True):
                if result is None:
                    end = entry_id - 1
                    break
                if isinstance(result, BaseException):
                    raise result
                found.append(result)
            rewrites = await asyncio.gather(
                *(self.rewrite(entry) for entry in found), return_exceptions=True
            )
            for error in rewrites:
                if error is not None:
                    raise error
            if found:
                length = found[-1].length
            if end is not None:
                return end, length
            first += batch


async def recover_ledger(
    ctx: ClientContext, ledger_id: int, password: bytes
) -> Versioned[LedgerMetadata]:
    """Fence and seal ``ledger_id``; returns its CLOSED metadata."""
    retries = ctx.config.metadata_retries_max
    versioned = await ctx.ledgers.read(ledger_id)
    check_password(ledger_id, versioned.value, password)
    for _ in range(retries):
        meta = versioned.value
        if meta.state is not LedgerState.OPEN:
            break
        try:
            versioned = await ctx.ledgers.write(ledger_id, meta.in_recovery(), versioned.version)
        except MetadataVersionError:
            versioned = await ctx.ledgers.read(ledger_id)
    if versioned.value.state is LedgerState.CLOSED:
        return versioned
    last, length = await _Recovery(ctx, ledger_id, versioned.value, password).run()
    log.info("ledger %d recovered: last entry %d, %d bytes", ledger_id, last, length)
    for _ in range(retries):
        meta = versioned.value
        if meta.state is LedgerState.CLOSED:
            return versioned
        try:
            return await ctx.ledgers.write(ledger_id, meta.closed(last, length), versioned.version)
        except MetadataVersionError:
            versioned = await ctx.ledgers.read(ledger_id)
    raise MetadataError(f"ledger {ledger_id}: could not close after recovery")
