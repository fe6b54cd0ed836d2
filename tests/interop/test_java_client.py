"""Java BookKeeper's client against bkeeper bookies (a cluster formatted by bkeeper): what
either client writes the other reads, with the v2 and the v3 protocol and every digest type;
a writer of one implementation fenced by a reader of the other, both agreeing on the
recovered end; and Java's shell (``listbookies``, ``listledgers -m``, ``ledgermetadata``,
``deleteledger``) on the cluster."""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from bkeeper.client.bookkeeper import BookKeeper
from bkeeper.common.errors import LedgerFencedError, LedgerNotFoundError
from bkeeper.meta.ledger_metadata import LedgerState
from bkeeper.testing.zookeeper import ZooKeeperServer
from bkeeper.wire.digest import DigestType
from tests.client.conftest import RealCluster, _started
from tests.interop.javabk import (
    JavaBookKeeper,
    JavaClient,
    JavaError,
    ShellRun,
    java_rendering,
    listed_bookies,
    listed_metadata,
    payload,
)
from tests.interop.ledgers import (
    DIGESTS,
    ENTRIES,
    JAVA_FENCED,
    PASSWORD,
    PROTOCOLS,
    SIZE,
    ask,
    closed_read,
    java_read,
    our_clients,
    read_all,
    written,
)

pytestmark = pytest.mark.interop

_SIMPLETEST = re.compile(r"^(\d+) entries written to ledger (\d+)\. Last entry Id (\d+)$")


@pytest.fixture(scope="module")
async def bookies(
    javabk: JavaBookKeeper, zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[RealCluster]:
    """Three bkeeper bookie processes in a cluster bkeeper formatted."""
    async with _started(zookeeper, tmp_path_factory.mktemp("bkeeper-bookies"), 3) as real:
        yield real


@pytest.fixture(scope="module")
def java(java_client: JavaClient, bookies: RealCluster) -> Iterator[JavaClient]:
    """Java's client with a connection per protocol, named ``v2`` and ``v3``."""
    for protocol in PROTOCOLS:
        java_client.ask("client", protocol, protocol, bookies.uri)
    yield java_client


@pytest.fixture(scope="module")
async def ours(bookies: RealCluster) -> AsyncIterator[dict[str, BookKeeper]]:
    async with our_clients(bookies.uri) as clients:
        yield clients


@pytest.mark.parametrize("digest", DIGESTS)
@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_java_writes_bkeeper_reads(
    java: JavaClient, ours: dict[str, BookKeeper], protocol: str, digest: str
) -> None:
    ledger_id = int(await ask(java, "create", protocol, digest, PASSWORD, 3, 2, 2))
    assert await ask(java, "append", ledger_id, 0, ENTRIES, SIZE) == str(ENTRIES - 1)
    assert await ask(java, "close", ledger_id) == str(ENTRIES - 1)
    bk = ours[protocol]
    meta = await bk.ledger_metadata(ledger_id)
    assert (meta.state, meta.last_entry_id, meta.length) == (
        LedgerState.CLOSED, ENTRIES - 1, ENTRIES * SIZE,
    )  # fmt: skip
    assert meta.digest_type is DigestType.parse(DIGESTS[digest])
    assert (meta.ensemble_size, meta.write_quorum, meta.ack_quorum) == (3, 2, 2)
    assert await read_all(bk, ledger_id) == written(ledger_id)


@pytest.mark.parametrize("digest", DIGESTS)
@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_bkeeper_writes_java_reads(
    java: JavaClient, ours: dict[str, BookKeeper], protocol: str, digest: str
) -> None:
    bk = ours[protocol]
    writer = await bk.create_ledger(3, 2, 2, digest=DIGESTS[digest], password=PASSWORD.encode())
    for entry in range(ENTRIES):
        assert await writer.append(payload(writer.ledger_id, entry, SIZE)) == entry
    await writer.close()
    read = await java_read(java, protocol, writer.ledger_id, digest, recover=False)
    assert read == closed_read(writer.ledger_id)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_java_writer_fenced_by_bkeeper_reader(
    java: JavaClient, ours: dict[str, BookKeeper], protocol: str
) -> None:
    ledger_id = int(await ask(java, "create", protocol, "CRC32C", PASSWORD, 3, 3, 2))
    assert await ask(java, "append", ledger_id, 0, ENTRIES, SIZE) == str(ENTRIES - 1)
    # bkeeper's recovery open fences the bookies and seals the ledger at the last entry
    # written to an ack quorum: every entry Java had acknowledged.
    assert await read_all(ours[protocol], ledger_id) == written(ledger_id)
    with pytest.raises(JavaError) as fenced:
        await ask(java, "append", ledger_id, ENTRIES, 1, SIZE)
    assert (fenced.value.kind, fenced.value.code) == ("BKLedgerFencedException", JAVA_FENCED)
    read = await java_read(java, protocol, ledger_id, "CRC32C", recover=True)
    assert read == closed_read(ledger_id)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_bkeeper_writer_fenced_by_java_reader(
    java: JavaClient, ours: dict[str, BookKeeper], protocol: str
) -> None:
    bk = ours[protocol]
    writer = await bk.create_ledger(3, 3, 2, digest="crc32", password=PASSWORD.encode())
    for entry in range(ENTRIES):
        await writer.append(payload(writer.ledger_id, entry, SIZE))
    read = await java_read(java, protocol, writer.ledger_id, "CRC32", recover=True)
    assert read == closed_read(writer.ledger_id)
    with pytest.raises(LedgerFencedError):
        await writer.append(b"after the fence")
    meta = await bk.ledger_metadata(writer.ledger_id)
    assert (meta.state, meta.last_entry_id) == (LedgerState.CLOSED, ENTRIES - 1)
    assert await read_all(bk, writer.ledger_id, recovery=False) == written(writer.ledger_id)


async def test_java_shell_on_a_bkeeper_cluster(
    javabk: JavaBookKeeper, java: JavaClient, ours: dict[str, BookKeeper],
    bookies: RealCluster, tmp_path: Path,
) -> None:  # fmt: skip
    bk = ours["v3"]
    writer = await bk.create_ledger(3, 2, 2, digest="crc32c", password=PASSWORD.encode())
    for entry in range(5):
        await writer.append(payload(writer.ledger_id, entry, SIZE))
    await writer.close()
    java_ledger = int(await ask(java, "create", "v3", "CRC32", PASSWORD, 3, 3, 3))
    await ask(java, "append", java_ledger, 0, 3, SIZE)
    await ask(java, "close", java_ledger)

    def shell(*args: str) -> ShellRun:
        run = javabk.shell(bookies.uri, tmp_path, *args)
        assert run.returncode == 0, run.output
        return run

    async def ours_rendered() -> dict[int, str]:
        return {
            ledger: java_rendering(await bk.ledger_metadata(ledger))
            async for ledger in bk.list_ledgers()
        }

    listed = await asyncio.to_thread(shell, "listbookies", "-rw")
    assert listed_bookies(listed, "ReadWrite Bookies :") == {bookies.bookie_id(i) for i in range(3)}
    everything = await asyncio.to_thread(shell, "listledgers", "-m")
    expected = await ours_rendered()
    assert {writer.ledger_id, java_ledger} <= set(expected)
    assert listed_metadata(everything) == expected
    one = await asyncio.to_thread(shell, "ledgermetadata", "-ledgerid", str(writer.ledger_id))
    assert listed_metadata(one) == {writer.ledger_id: expected[writer.ledger_id]}

    # Java's readledger: a header per entry (its "EntrySize" is the ledger's length up to
    # and including the entry: the length bkeeper's writer put in the entry's header),
    # then the body.
    read = await asyncio.to_thread(shell, "readledger", "-ledgerid", str(writer.ledger_id), "-msg")
    headers = [line for line in read.messages if line.startswith("---------")]
    assert headers == [
        f"--------- Lid={writer.ledger_id}, Eid={entry}, EntrySize={(entry + 1) * SIZE} ---------"
        for entry in range(5)
    ], read.output
    for entry in range(5):
        assert payload(writer.ledger_id, entry, SIZE).decode() in read.output
    # Java's simpletest writes through our bookies, taking the next ledger id after both
    # clients' ledgers (one id generator), then deletes its ledger: gone for bkeeper too.
    simple = await asyncio.to_thread(
        shell, "simpletest", "-ensemble", "3", "-writeQuorum", "3", "-ackQuorum", "2",
        "-numEntries", "100",
    )  # fmt: skip
    done = [m for m in map(_SIMPLETEST.match, simple.messages) if m]
    assert [(int(m[1]), int(m[3])) for m in done] == [(100, 99)], simple.output
    simple_ledger = int(done[0][2])
    assert simple_ledger > max(writer.ledger_id, java_ledger)
    assert simple_ledger not in [ledger async for ledger in bk.list_ledgers()]

    # Deleted by the other implementation: gone for both.
    deleted = await asyncio.to_thread(
        shell, "deleteledger", "-ledgerid", str(writer.ledger_id), "-force"
    )
    assert deleted.returncode == 0
    await bk.delete_ledger(java_ledger)
    with pytest.raises(LedgerNotFoundError):
        await bk.ledger_metadata(writer.ledger_id)
    expected = await ours_rendered()
    assert not {writer.ledger_id, java_ledger} & set(expected)
    assert listed_metadata(await asyncio.to_thread(shell, "listledgers", "-m")) == expected


async def test_java_long_polls_bkeeper_bookies(
    java: JavaClient, ours: dict[str, BookKeeper]
) -> None:
    """Java's tailing read (v3 READ with a previous LAC and a timeout: long poll) against
    bkeeper bookies, following a bkeeper writer."""
    writer = await ours["v3"].create_ledger(3, 3, 2, digest="crc32c", password=PASSWORD.encode())
    for entry in range(10):
        await writer.append(payload(writer.ledger_id, entry, SIZE))
    # The bookies know LAC 8 (piggybacked on entry 9). Entry 9 is not confirmed yet: the
    # poll ends at its timeout with what the bookies know.
    timed_out = await ask(java, "poll", "v3", writer.ledger_id, "CRC32C", PASSWORD, 9, 500)
    assert timed_out == "lac=8 entry=none"
    # Entry 10 confirms entry 9: the poll answers with it.
    polling = asyncio.ensure_future(
        ask(java, "poll", "v3", writer.ledger_id, "CRC32C", PASSWORD, 9, 60_000)
    )
    await writer.append(payload(writer.ledger_id, 10, SIZE))
    expected = hashlib.sha256(payload(writer.ledger_id, 9, SIZE)).hexdigest()
    assert await polling == f"lac=9 entry={expected}"
    await writer.close()
