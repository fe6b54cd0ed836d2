"""What the interop tests write and check: the same entries from either client, read back
by the other."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from bkeeper.client.bookkeeper import BookKeeper
from bkeeper.client.config import ClientConfig
from bkeeper.wire.codes import Protocol
from tests.interop.javabk import JavaClient, entries_sha256, payload

PROTOCOLS = ["v2", "v3"]
#: Java's names of the digest types, and ours.
DIGESTS = {"CRC32": "crc32", "CRC32C": "crc32c", "MAC": "hmac", "DUMMY": "dummy"}
PASSWORD = "interop-secret"
ENTRIES = 40
SIZE = 700
#: ``BKException.Code.LedgerFencedException``
JAVA_FENCED = -101


async def ask(java: JavaClient, *words: object) -> str:
    return await asyncio.to_thread(java.ask, *words)


async def java_read(
    java: JavaClient, protocol: str, ledger_id: int, digest: str, recover: bool
) -> dict[str, str]:
    """Java's client opens the ledger (with recovery or not) and reads every entry."""
    return await asyncio.to_thread(java.read, protocol, ledger_id, digest, PASSWORD, recover)


async def read_all(bk: BookKeeper, ledger_id: int, recovery: bool = True) -> list[bytes]:
    handle = await bk.open_ledger(ledger_id, PASSWORD.encode(), recovery=recovery)
    try:
        return [entry.data async for entry in handle.read()]
    finally:
        await handle.close()


def written(ledger_id: int, count: int = ENTRIES) -> list[bytes]:
    """The entries either client writes to ``ledger_id`` (``InteropClient.java``'s)."""
    return [payload(ledger_id, entry, SIZE) for entry in range(count)]


def closed_read(ledger_id: int, count: int = ENTRIES) -> dict[str, str]:
    """What Java's ``read`` reports for a closed ledger holding :func:`written`."""
    return {
        "lac": str(count - 1), "closed": "true", "sha256": entries_sha256(written(ledger_id, count))
    }  # fmt: skip


@contextlib.asynccontextmanager
async def our_clients(uri: str) -> AsyncIterator[dict[str, BookKeeper]]:
    """bkeeper's clients of the cluster at ``uri``, one per protocol, by name."""
    clients = {
        name: await BookKeeper(uri, ClientConfig(protocol=Protocol[name.upper()])).start()
        for name in PROTOCOLS
    }
    try:
        yield clients
    finally:
        for client in clients.values():
            await client.close()
