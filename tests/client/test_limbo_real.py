"""Real bookie processes: a bit flip in a killed bookie's last journal group (issue 11,
item 3). The bookie answers EUNKNOWNLEDGERSTATE, never "no such entry", for what it lost;
recovery from a new client does not truncate the ledger; the integrity check, run by
``bkeeper bookie`` after start, copies the lost entries back and clears the limbo."""

from __future__ import annotations

import asyncio
import signal
import time

from bkeeper.client import BookKeeper, ClientConfig
from bkeeper.client.bookie_client import BookieClient
from bkeeper.testing.journal_faults import apply_patches, journal_patches, newest_journal_file
from bkeeper.wire.codes import Protocol, StatusCode
from bkeeper.wire.entryset import decode_entry_ids
from bkeeper.wire.messages import GetListOfEntriesRequest, ReadRequest

PASSWORD = b"pw"
#: No ensemble change while the limbo bookie and the laggard are stopped: the test needs its
#: ledgers on exactly bookies 0..2 (a cluster of its own of exactly E: it kills two, and
#: which bookie holds what is the scenario). The library's read timeout.
WRITER = ClientConfig(add_timeout_ms=120_000)
FIRST = 20  # entries of each ledger every bookie holds
LAST = 60  # then entries 20..59, sent at once while the laggard is stopped
LIMBO, LAGGARD = 0, 2  # bookie indexes
#: The limbo bookie groups what arrives within 200 ms (its burst lands in one group) and
#: does not checkpoint (a checkpoint would retire the journal group the test damages).
LIMBO_ARGS = ("--journal-group-wait-ms", "200", "--checkpoint-interval-ms", "600000")


def payload(ledger_id: int, entry_id: int) -> bytes:
    return b"%d/%04d-" % (ledger_id, entry_id) + bytes([entry_id % 251]) * 120


async def _status(client: BookieClient, ledger_id: int, entry_id: int) -> StatusCode:
    response = await client.send(ReadRequest(ledger_id, entry_id))
    return response.status  # type: ignore[no-any-return]


async def _entries_on(client: BookieClient, ledger_id: int) -> list[int]:
    response = await client.send(GetListOfEntriesRequest(ledger_id))
    assert response.status is StatusCode.EOK
    return decode_entry_ids(bytes(response.availability))


def _wait_ready(cluster, index: int, starts: int) -> None:  # type: ignore[no-untyped-def]
    """Wait until bookie ``index`` has logged "ready" ``starts`` times: started, registered
    and handling SIGTERM (its port listens earlier, while it replays and registers)."""
    log = cluster.data_dir / f"bookie-{index}.log"
    deadline = time.monotonic() + 60
    while log.read_text().count(" ready on ") < starts:
        assert cluster.procs[index].poll() is None, "the bookie exited"
        assert time.monotonic() < deadline, "the bookie did not get ready"
        time.sleep(0.05)


async def _wait_until_repaired(port: int, ledger_ids: list[int]) -> BookieClient:
    """Wait until the bookie answers "no such entry" past the end of every ledger: their
    limbo is over (before, it answers "unknown")."""
    deadline = time.monotonic() + 90
    while True:
        client = await BookieClient.connect("127.0.0.1", port, Protocol.V3)
        statuses = {await _status(client, ledger_id, LAST) for ledger_id in ledger_ids}
        if statuses == {StatusCode.ENOENTRY}:
            return client
        await client.aclose()
        assert statuses == {StatusCode.EUNKNOWNLEDGERSTATE} or len(statuses) == 2, statuses
        assert time.monotonic() < deadline, "the integrity check did not repair the bookie"
        await asyncio.sleep(0.2)


async def test_bit_flip_in_the_last_journal_group_of_a_killed_bookie(real_cluster) -> None:  # type: ignore[no-untyped-def]
    cluster = real_cluster
    _wait_ready(cluster, LIMBO, 1)
    assert cluster.stop(LIMBO) == 0
    cluster.start(LIMBO, *LIMBO_ARGS)
    _wait_ready(cluster, LIMBO, 2)
    async with BookKeeper(cluster.uri, WRITER) as writer:
        truncatable = await writer.create_ledger(3, 3, 2, password=PASSWORD)
        closed = await writer.create_ledger(3, 3, 2, password=PASSWORD)
        handles = (truncatable, closed)
        for handle in handles:
            assert set(handle.ensemble) == {cluster.bookie_id(i) for i in range(3)}
            for entry_id in range(FIRST):
                await handle.append(payload(handle.ledger_id, entry_id))
        # The laggard misses the rest: it is acknowledged by the limbo bookie and the third.
        cluster.signal(LAGGARD, signal.SIGSTOP)
        # The burst must land in one journal group of the limbo bookie (the group the test
        # damages): an idle journal writes what it finds queued at once, so 80 single adds
        # arriving over more than the group wait (a loaded CI run) were split, and the last
        # group held the closed ledger's last entry alone. So the limbo bookie is paused
        # while each ledger's burst is sent (one append_many: one send per bookie); resumed,
        # it reads both in one chunk and queues them as one batch, one group.
        cluster.signal(LIMBO, signal.SIGSTOP)
        futures = [
            await handle.append_many_async(
                [payload(handle.ledger_id, entry_id) for entry_id in range(FIRST, LAST)]
            )
            for handle in handles
        ]
        cluster.signal(LIMBO, signal.SIGCONT)
        await asyncio.gather(*futures)
        await closed.close()
        cluster.signal(LIMBO, signal.SIGKILL)
        cluster.signal(LAGGARD, signal.SIGKILL)
        cluster.procs[LIMBO].wait()
        cluster.procs[LAGGARD].wait()

    journal = newest_journal_file(cluster.data_dir / f"bookie-{LIMBO}" / "current" / "journal")
    data = open(journal, "rb").read()  # noqa: SIM115
    damaged = {}
    for handle in handles:
        patches = journal_patches(data, handle.ledger_id)
        apply_patches(journal, patches)
        damaged[handle.ledger_id] = list(patches.entry_ids)
        assert damaged[handle.ledger_id][-1] == LAST - 1  # the ledger's last entries
    cluster.start(LIMBO, "--no-integrity-check", *LIMBO_ARGS)
    cluster.start(LAGGARD)
    _wait_ready(cluster, LIMBO, 3)

    limbo = await BookieClient.connect("127.0.0.1", cluster.ports[LIMBO], Protocol.V3)
    try:
        for ledger_id, lost in damaged.items():
            for entry_id in [*lost, -1, LAST]:
                assert await _status(limbo, ledger_id, entry_id) is StatusCode.EUNKNOWNLEDGERSTATE
    finally:
        await limbo.aclose()

    async with BookKeeper(cluster.uri, WRITER) as reader:
        # The truncatable ledger's entries 20..59 are on one live bookie only: the laggard
        # says "absent", the limbo bookie "unknown". Recovery must not stop at entry 20.
        recovered = await reader.open_ledger(truncatable.ledger_id, PASSWORD)
        assert recovered.metadata.last_entry_id == LAST - 1
        for handle in handles:
            rh = await reader.open_ledger(handle.ledger_id, PASSWORD)
            got = [(e.entry_id, e.data) async for e in rh.read()]
            assert got == [(i, payload(handle.ledger_id, i)) for i in range(LAST)]

    assert cluster.stop(LIMBO) == 0
    cluster.start(LIMBO)  # with the integrity check
    repaired = await _wait_until_repaired(cluster.ports[LIMBO], list(damaged))
    try:
        for ledger_id in damaged:
            assert await _entries_on(repaired, ledger_id) == list(range(LAST))
            for entry_id in range(LAST):
                response = await repaired.send(ReadRequest(ledger_id, entry_id))
                assert response.status is StatusCode.EOK
                assert bytes(response.body).endswith(payload(ledger_id, entry_id))
    finally:
        await repaired.aclose()
    log = (cluster.data_dir / f"bookie-{LIMBO}.log").read_text()
    assert "integrity check of" in log and "limbo cleared" in log
