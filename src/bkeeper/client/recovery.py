"""Ledger recovery: fence the old writer, find the true end, seal the ledger.

Steps (BookKeeper's, §0 of the reference):

1. State OPEN -> IN_RECOVERY by compare-and-set (a CLOSED ledger needs nothing).
2. Fencing read of entry -1 (with the master key) to every bookie of the last ensemble; wait
   for quorum coverage (Qw - Qa + 1 answers per write set), so that no ack quorum can form
   for the old writer any more. LAC = max(LAC in the bodies, first entry of the last
   segment - 1).
3. From LAC + 1, read each entry from its write set with the fence flag too; re-write a found
   entry to its write set with RECOVERY_ADD (Qa acknowledgements needed); stop at the first
   entry that Qw - Qa + 1 bookies of its write set say they do not have.
4. CLOSED with last entry and length by compare-and-set. A lost CAS re-reads: a CLOSED
   ledger means a concurrent recovery finished first, and its end is taken as is.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
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
from bkeeper.wire.digest import DigestManager, DigestType, Entry, master_key
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
        self.digest = DigestManager(ledger_id, DigestType(int(meta.digest_type)), password)
        self.timeout_s = ctx.config.read_timeout_ms / 1000.0

    async def ask(self, bookies: Sequence[str], request: Any) -> list[Any]:
        async def one(bookie: str) -> Any:
            return await asyncio.wait_for(self.ctx.pool.send(bookie, request), self.timeout_s)

        return await asyncio.gather(*(one(b) for b in bookies), return_exceptions=True)

    async def fence(self) -> int:
        meta = self.meta
        ensemble = list(meta.last_ensemble)
        request = ReadRequest(self.ledger_id, -1, fence=True, master_key=self.key)
        answered: set[int] = set()
        lac = -1
        for position, result in enumerate(await self.ask(ensemble, request)):
            if isinstance(result, BaseException):
                continue
            if result.status is StatusCode.EUA:
                raise UnauthorizedAccessError(f"ledger {self.ledger_id}: wrong password")
            if result.status is StatusCode.EOK and result.body is not None:
                try:
                    lac = max(lac, self.digest.verify_entry(result.body).lac)
                except DigestMismatchError:
                    continue
                answered.add(position)
            elif result.status in _ABSENT:
                answered.add(position)
        if not covers_every_write_set(
            answered, meta.ensemble_size, meta.write_quorum, meta.ack_quorum
        ):
            raise BookieUnavailableError(
                f"ledger {self.ledger_id}: could not fence, too few bookies answered "
                f"({len(answered)} of {len(ensemble)})"
            )
        return max(lac, max(meta.segments) - 1)

    def write_set_of(self, entry_id: int) -> list[str]:
        meta = self.meta
        ensemble = meta.ensemble_for(entry_id)
        return [ensemble[i] for i in write_set(entry_id, meta.ensemble_size, meta.write_quorum)]

    async def find(self, entry_id: int) -> Entry | None:
        """The entry, None when enough bookies say it is absent; else an error."""
        request = ReadRequest(self.ledger_id, entry_id, fence=True, master_key=self.key)
        absent = 0
        for result in await self.ask(self.write_set_of(entry_id), request):
            if isinstance(result, BaseException):
                continue
            if result.status is StatusCode.EOK and result.body is not None:
                try:
                    return self.digest.verify_entry(result.body, entry_id)
                except DigestMismatchError:
                    continue  # a bad replica
            if result.status in _ABSENT:
                absent += 1
        if absent >= recovery_quorum(self.meta.write_quorum, self.meta.ack_quorum):
            return None
        raise BookieUnavailableError(
            f"ledger {self.ledger_id}: cannot tell whether entry {entry_id} exists"
        )

    async def rewrite(self, entry_id: int, body: bytes) -> None:
        request = AddRequest(self.ledger_id, entry_id, self.key, body, recovery=True)
        results = await self.ask(self.write_set_of(entry_id), request)
        acked = sum(
            1 for r in results if not isinstance(r, BaseException) and r.status is StatusCode.EOK
        )
        if acked < self.meta.ack_quorum:
            raise BookieUnavailableError(
                f"ledger {self.ledger_id}: recovery add of entry {entry_id} reached "
                f"{acked} of {self.meta.ack_quorum} bookies"
            )

    async def length_at(self, lac: int) -> int:
        if lac < 0:
            return 0
        entry = await self.find(lac)
        if entry is None:
            raise BookieUnavailableError(f"ledger {self.ledger_id}: entry {lac} (LAC) is missing")
        return entry.length

    async def run(self) -> tuple[int, int]:
        lac = await self.fence()
        length = await self.length_at(lac)
        entry_id = lac + 1
        while True:
            entry = await self.find(entry_id)
            if entry is None:
                return entry_id - 1, length
            await self.rewrite(entry_id, bytes(self.digest_body(entry)))
            length = entry.length
            entry_id += 1

    def digest_body(self, entry: Entry) -> bytes:
        return self.digest.encode_entry(entry.entry_id, entry.lac, entry.length, entry.payload)


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
