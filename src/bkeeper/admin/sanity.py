"""The sanity check of one bookie (Apache BookKeeper's ``/api/v1/bookie/sanity``): write
entries to a new ledger on that bookie alone (an ensemble of one), read them back, delete the
ledger. It passes only if every entry was written to that bookie and reads back the same.
"""

from __future__ import annotations

from bkeeper.client import BookKeeper
from bkeeper.common.errors import BKeeperError

__all__ = ["SANITY_ENTRIES", "SANITY_PASSWORD", "sanity_check"]

#: Entries written and read back by default.
SANITY_ENTRIES = 10
SANITY_PASSWORD = b"bkeeper-sanity"


def _entry(entry_id: int) -> bytes:
    return b"sanity-%08d" % entry_id


async def sanity_check(bk: BookKeeper, bookie_id: str, entries: int) -> int:
    """Run the check on ``bookie_id``; the ledger's id. ``BKeeperError`` saying what failed
    (the ledger is deleted all the same)."""
    bookies = await bk.cluster.registry.bookies()
    if bookie_id in bookies.read_only:
        raise BKeeperError(f"bookie {bookie_id} is read-only: it refuses adds")
    if bookie_id not in bookies.writable:
        raise BKeeperError(f"bookie {bookie_id} is not registered as writable")
    handle = await bk.create_ledger(1, 1, 1, password=SANITY_PASSWORD, bookies=[bookie_id])
    ledger_id = handle.ledger_id
    try:
        for entry_id in range(entries):
            await handle.append(_entry(entry_id))
        await handle.close()
        meta = await bk.ledger_metadata(ledger_id)
        elsewhere = sorted(
            {b for ensemble in meta.segments.values() for b in ensemble} - {bookie_id}
        )
        if elsewhere:
            raise BKeeperError(
                f"adds to ledger {ledger_id} failed on {bookie_id} and went to "
                f"{', '.join(elsewhere)} instead"
            )
        reader = await bk.open_ledger(ledger_id, SANITY_PASSWORD, recovery=False)
        count = 0
        try:
            async for entry in reader.read(0, entries - 1):
                if entry.data != _entry(entry.entry_id):
                    raise BKeeperError(
                        f"entry {entry.entry_id} of ledger {ledger_id} reads back different"
                    )
                count += 1
        finally:
            await reader.close()
        if count != entries:
            raise BKeeperError(f"read {count} of {entries} entries of ledger {ledger_id} back")
    finally:
        await bk.delete_ledger(ledger_id, fence=False)
    return ledger_id
