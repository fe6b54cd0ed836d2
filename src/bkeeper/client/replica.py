"""Reading one bookie's copy of a ledger, entry by entry: what ``bkeeper shell readledger
--bookie`` shows (Apache BookKeeper's ``readledger -b``).

The ledger's reads go to any replica; an operator checking one bookie wants that bookie's
answer alone. :func:`read_replica` asks ``bookie`` for each entry of the range that its
write sets give it (the other entries it never held, and are passed over) and verifies each
body against the ledger's digest. Every entry it should hold comes out, in order, as the
verified entry or the error the bookie answered (no such entry, a digest mismatch, ...), so
a missing or damaged replica is seen rather than read around. At most ``window`` reads are
in flight.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

from bkeeper.client.distribution import write_set
from bkeeper.client.entry import Entry
from bkeeper.client.pool import BookiePool
from bkeeper.client.refusal import status_error
from bkeeper.common.errors import BKeeperError, BookieUnavailableError, ProtocolError
from bkeeper.common.tasks import within
from bkeeper.meta.ledger_metadata import LedgerMetadata
from bkeeper.wire import entryset
from bkeeper.wire.codes import Protocol, StatusCode
from bkeeper.wire.digest import DigestManager
from bkeeper.wire.messages import (
    GetListOfEntriesRequest,
    GetListOfEntriesResponse,
    ReadRequest,
    ReadResponse,
)

__all__ = [
    "REPLICA_READS_IN_FLIGHT_MAX",
    "ReplicaEntry",
    "entries_on",
    "list_entries_on",
    "read_replica",
]

#: Reads :func:`read_replica` keeps in flight at most by default.
REPLICA_READS_IN_FLIGHT_MAX = 64


@dataclass(frozen=True, slots=True)
class ReplicaEntry:
    """Entry ``entry_id`` as the bookie answered it: ``entry`` (verified) or ``error``."""

    entry_id: int
    entry: Entry | None
    error: BKeeperError | None


def entries_on(meta: LedgerMetadata, bookie: str, first: int, last: int) -> list[int]:
    """The entry ids of ``first..last`` whose write set includes ``bookie``."""
    out = []
    for entry_id in range(first, last + 1):
        ensemble = meta.ensemble_for(entry_id)
        if any(
            ensemble[i] == bookie for i in write_set(entry_id, len(ensemble), meta.write_quorum)
        ):
            out.append(entry_id)
    return out


async def read_replica(
    pool: BookiePool,
    meta: LedgerMetadata,
    ledger_id: int,
    password: bytes,
    bookie: str,
    entry_ids: list[int],
    *,
    timeout_s: float,
    window: int = REPLICA_READS_IN_FLIGHT_MAX,
) -> AsyncIterator[ReplicaEntry]:
    """Ask ``bookie`` for each of ``entry_ids`` (see the module doc), in order."""
    digest = DigestManager(ledger_id, meta.digest_type, password, Entry)

    async def one(entry_id: int) -> ReplicaEntry:
        try:
            response: ReadResponse = await within(
                pool.send(bookie, ReadRequest(ledger_id, entry_id)), timeout_s
            )
        except TimeoutError:
            error = BookieUnavailableError(
                f"ledger {ledger_id} entry {entry_id} on {bookie}: no answer in {timeout_s:g} s"
            )
            return ReplicaEntry(entry_id, None, error)
        except BKeeperError as exc:
            return ReplicaEntry(entry_id, None, exc)
        context = f"ledger {ledger_id} entry {entry_id} on {bookie}"
        if response.status is not StatusCode.EOK:
            return ReplicaEntry(entry_id, None, status_error(response.status, context))
        if response.body is None:
            return ReplicaEntry(entry_id, None, ProtocolError(f"{context}: OK without a body"))
        try:
            return ReplicaEntry(entry_id, digest.verify_entry(response.body, entry_id), None)
        except BKeeperError as exc:  # DigestMismatchError: a damaged copy
            return ReplicaEntry(entry_id, None, exc)

    for start in range(0, len(entry_ids), window):
        for result in await asyncio.gather(*(one(e) for e in entry_ids[start : start + window])):
            yield result


async def list_entries_on(
    pool: BookiePool, bookie: str, ledger_id: int, *, timeout_s: float
) -> list[int]:
    """The ids of the entries ``bookie`` stores for ``ledger_id``, ascending (v3
    GET_LIST_OF_ENTRIES_OF_LEDGER); empty when it has no such ledger. A bookie that does not
    answer in ``timeout_s`` raises :class:`BookieUnavailableError`; one unsure of what it holds
    (limbo) raises :class:`~bkeeper.common.errors.DataUnknownError`; another failing status,
    the error it names."""
    context = f"ledger {ledger_id} on {bookie}"
    try:
        response: GetListOfEntriesResponse = await within(
            pool.send(bookie, GetListOfEntriesRequest(ledger_id), Protocol.V3), timeout_s
        )
    except TimeoutError:
        raise BookieUnavailableError(f"{context}: no list of entries in {timeout_s:g} s") from None
    if response.status is StatusCode.ENOLEDGER:
        return []
    if response.status is not StatusCode.EOK:
        raise status_error(response.status, context)
    if response.availability is None:
        raise ProtocolError(f"{context}: list of entries OK without its entry set")
    return entryset.decode_entry_ids(response.availability)
