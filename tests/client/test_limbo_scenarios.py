"""A replica in limbo answers "unknown" (EUNKNOWNLEDGERSTATE), and the client never counts
that as "absent": recovery does not close the ledger short, reads go on to the next replica
(issue 11, item 3). In-memory cluster, real handlers and storage; the limbo comes from a
bit flip in the bookie's last journal group, as on a real disk."""

from __future__ import annotations

import asyncio

import pytest

from bkeeper.client.config import ClientConfig
from bkeeper.storage.journal_format import journal_file_name
from bkeeper.testing.cluster import MemoryCluster
from bkeeper.testing.journal_faults import journal_patches
from bkeeper.testing.virtual_time import on_virtual_time
from bkeeper.wire.codes import Protocol, StatusCode
from bkeeper.wire.messages import AddRequest, ReadRequest

#: The writer never times out during the test: the bookie that drops adds is not replaced.
WRITER = ClientConfig(add_timeout_ms=120_000)
PASSWORD = b"pw"
FIRST = 30  # entries every bookie holds
LAST_GROUP = 10  # entries sent at once (the laggard may miss them), mostly in one group


def payload(entry_id: int) -> bytes:
    return b"entry-%04d-" % entry_id + bytes([entry_id % 251]) * 100


async def _damage_last_group(cluster: MemoryCluster, index: int, ledger_id: int) -> list[int]:
    """Crash bookie ``index``, flip a bit in each entry of the ledger in its last journal
    group, restart it: the ids of the damaged entries (the last ones of the ledger)."""
    bookie = cluster.bookies[index]
    await cluster.stop_bookie(bookie, crash=True)
    journal_dir = f"{bookie.data_dir}/current/journal"
    newest = max(bookie.fs.list_dir(journal_dir))
    assert newest == journal_file_name(1)
    path = f"{journal_dir}/{newest}"
    patches = journal_patches(bookie.fs.read_file(path), ledger_id)
    for offset, value in patches.patches:
        bookie.fs.corrupt(path, offset, value)
    await cluster.start_bookie(bookie)
    assert bookie.storage is not None
    assert bookie.storage.limbo_ledgers() == [ledger_id]
    damaged = list(patches.entry_ids)
    assert damaged == list(range(damaged[0], FIRST + LAST_GROUP))  # the ledger's last entries
    return damaged


async def _write(cluster: MemoryCluster, laggard_misses_last_group: bool) -> tuple[object, int]:
    """A ledger E3/Qw3: ``FIRST`` entries one by one, then ``LAST_GROUP`` at once (mostly one
    journal group on each bookie), which the laggard does not get if so asked (Qa2; else
    Qa3, so that every acknowledged entry is durable on the bookie put in limbo). The writer
    and the index of the bookie to put in limbo (one that got every entry)."""
    writer = await cluster.client(WRITER)
    ack_quorum = 2 if laggard_misses_last_group else 3
    wh = await writer.create_ledger(3, 3, ack_quorum, password=PASSWORD)
    for entry_id in range(FIRST):
        await wh.append(payload(entry_id))
    limbo, _, laggard = (cluster.bookies.index(cluster.bookie(b)) for b in wh.ensemble)
    if laggard_misses_last_group:
        cluster.fault(laggard, AddRequest, drop=True, serve_dropped=False)
    futures = [await wh.append_async(payload(FIRST + i)) for i in range(LAST_GROUP)]
    assert await asyncio.gather(*futures) == list(range(FIRST, FIRST + LAST_GROUP))
    return wh, limbo


@pytest.mark.parametrize("protocol", [Protocol.V2, Protocol.V3])
@on_virtual_time
async def test_recovery_does_not_close_short_because_a_replica_is_in_limbo(
    protocol: Protocol,
) -> None:
    """The last entries were acknowledged by two bookies; one of them lost them (limbo,
    "unknown"), the laggard never had them ("absent"). One "absent" is not Qw - Qa + 1 = 2:
    recovery finds them on the third bookie and ends at the true last entry."""
    async with MemoryCluster(3, storage_options={"journal_max_group_wait_ms": 200.0}) as cluster:
        wh, limbo = await _write(cluster, laggard_misses_last_group=True)
        ledger_id = wh.ledger_id  # type: ignore[attr-defined]
        damaged = await _damage_last_group(cluster, limbo, ledger_id)
        for entry_id in [*damaged, -1]:
            reply = await _read_from(cluster, limbo, ledger_id, entry_id)
            assert reply.status is StatusCode.EUNKNOWNLEDGERSTATE
        reader = await cluster.client(ClientConfig(protocol=protocol, read_timeout_ms=2_000))
        rh = await reader.open_ledger(ledger_id, PASSWORD)
        last = FIRST + LAST_GROUP - 1
        assert rh.metadata.last_entry_id == last
        entries = [e async for e in rh.read()]
        assert [e.data for e in entries] == [payload(i) for i in range(last + 1)]
        # Recovery re-wrote every entry after the LAC it found (29) to the whole write set,
        # the limbo bookie included; it stays in limbo until a repair clears it.
        storage = cluster.bookies[limbo].storage
        assert storage is not None
        still_lost = [e for e in damaged if e < FIRST]
        present = [e for e in range(last + 1) if e not in still_lost]
        assert storage.list_entries(ledger_id) == present
        assert storage.in_limbo(ledger_id)


@pytest.mark.parametrize("protocol", [Protocol.V2, Protocol.V3])
@on_virtual_time
async def test_reads_go_past_a_replica_in_limbo(protocol: Protocol) -> None:
    async with MemoryCluster(3, storage_options={"journal_max_group_wait_ms": 200.0}) as cluster:
        wh, limbo = await _write(cluster, laggard_misses_last_group=False)
        await wh.close()  # type: ignore[attr-defined]
        ledger_id = wh.ledger_id  # type: ignore[attr-defined]
        damaged = await _damage_last_group(cluster, limbo, ledger_id)
        storage = cluster.bookies[limbo].storage
        assert storage is not None
        assert not set(damaged) & set(storage.list_entries(ledger_id))
        reader = await cluster.client(ClientConfig(protocol=protocol, read_timeout_ms=2_000))
        rh = await reader.open_ledger(ledger_id, PASSWORD)
        last = FIRST + LAST_GROUP - 1
        entries = [e async for e in rh.read()]
        assert [e.data for e in entries] == [payload(i) for i in range(last + 1)]
        for entry_id in damaged:  # each replica in turn: the limbo one says "unknown"
            assert (await rh.read_entry(entry_id)).data == payload(entry_id)


async def _read_from(cluster: MemoryCluster, index: int, ledger_id: int, entry_id: int):  # type: ignore[no-untyped-def]
    bookie = cluster.bookies[index]
    assert bookie.handlers is not None
    loop = asyncio.get_running_loop()
    reply: asyncio.Future[object] = loop.create_future()

    class Responder:
        peer = "test"

        def respond(self, response: object, size: int) -> None:
            reply.set_result(response)

    bookie.handlers.dispatch(Responder(), ReadRequest(ledger_id, entry_id), 0)  # type: ignore[arg-type]
    return await reply
