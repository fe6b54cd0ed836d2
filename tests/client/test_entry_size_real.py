"""An entry too large for a frame, on real bookie processes (issue 36).

Before: a 6 MiB append was sent anyway, every bookie closed the shared connection, the
client reported ``NotEnoughBookiesError`` blaming three healthy bookies, the writer was stuck
and another ledger of the same client on the same bookies failed too. Now the client refuses
the entry before sending it (``EntryTooLargeError``), its writer goes on, and no other ledger
notices; a bookie configured with a smaller limit answers the add EBADREQ without closing the
connection, and only that writer stops.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

import pytest

from bkeeper import sync
from bkeeper.client import BookKeeper, ClientConfig, WriteHandle
from bkeeper.common.errors import EntryTooLargeError
from bkeeper.wire.codes import Protocol

MIB = 1024 * 1024
TOO_LARGE = bytes(6 * MIB)


class Neighbour:
    """Another ledger of the same client, appending all along; it must never fail."""

    def __init__(self, handle: WriteHandle) -> None:
        self.handle = handle
        self.stopping = asyncio.Event()
        self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> int:
        count = 0
        while not self.stopping.is_set():
            assert await self.handle.append(b"neighbour %d" % count) == count
            count += 1
        return count

    async def wait_for_more(self, more: int = 20) -> None:
        target = self.handle.last_add_confirmed + more
        async with asyncio.timeout(30):
            while self.handle.last_add_confirmed < target:
                assert not self.task.done(), self.task.exception()
                await asyncio.sleep(0.01)

    async def stop(self) -> int:
        self.stopping.set()
        return await self.task


async def read_all(client: BookKeeper, ledger_id: int) -> list[bytes]:
    handle = await client.open_ledger(ledger_id, b"pw")
    return [entry.data async for entry in handle.read()]


@pytest.mark.parametrize("protocol", [Protocol.V2, Protocol.V3], ids=["v2", "v3"])
async def test_a_6_mib_append_fails_alone(shared_cluster: Any, protocol: Protocol) -> None:
    async with BookKeeper(shared_cluster.uri, ClientConfig(protocol=protocol)) as client:
        writer = await client.create_ledger(3, 3, 2, password=b"pw")
        # On the same bookies (4 are up): the same pooled connections.
        other = await client.create_ledger(3, 3, 2, password=b"pw", bookies=writer.ensemble)
        assert set(writer.ensemble) == set(other.ensemble)
        assert await writer.append(b"before") == 0
        neighbour = Neighbour(other)
        await neighbour.wait_for_more()

        size = f"an entry of {len(TOO_LARGE)} bytes is over the {writer.max_entry_bytes}"
        with pytest.raises(EntryTooLargeError, match=f"{size} .*max_frame_bytes.*nothing"):
            await writer.append(TOO_LARGE)
        with pytest.raises(EntryTooLargeError, match=size):
            await writer.append_async(TOO_LARGE)
        with pytest.raises(EntryTooLargeError, match=size):
            await writer.append_many([b"small", TOO_LARGE])
        with pytest.raises(EntryTooLargeError):
            await writer.append(bytes(writer.max_entry_bytes + 1))
        assert writer.last_add_pushed == 0  # nothing got an entry id

        assert await writer.append(b"after") == 1  # the writer goes on
        assert await writer.append(bytes(writer.max_entry_bytes)) == 2  # the largest fits
        await neighbour.wait_for_more()
        appended = await neighbour.stop()
        for handle in (writer, other):  # nobody was blamed: no ensemble change
            assert len(handle.metadata.segments) == 1
        await writer.close()
        await other.close()
        assert await read_all(client, writer.ledger_id) == [
            b"before",
            b"after",
            bytes(writer.max_entry_bytes),
        ]
        assert len(await read_all(client, other.ledger_id)) == appended


def test_the_blocking_client_refuses_it_too(shared_cluster: Any) -> None:
    with sync.BookKeeper(shared_cluster.uri) as client:
        writer = client.create_ledger(3, 3, 2, password=b"pw")
        assert writer.append(b"before") == 0
        with pytest.raises(EntryTooLargeError, match="max_frame_bytes"):
            writer.append(TOO_LARGE)
        with pytest.raises(EntryTooLargeError, match="max_frame_bytes"):
            writer.append_async(TOO_LARGE)
        with pytest.raises(EntryTooLargeError, match="max_frame_bytes"):
            writer.append_many([b"first", TOO_LARGE])  # none of them sent
        assert writer.append_many([b"a", b"b"]) == [1, 2]
        writer.close()


def test_the_shell_says_it_in_one_line(shared_cluster: Any) -> None:
    args = ["shell", "simpletest", "--entries", "3", "--entry-size", str(len(TOO_LARGE))]
    done = subprocess.run(
        [sys.executable, "-m", "bkeeper", *args, "--metadata", shared_cluster.uri],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    # One line says it.
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert "Traceback" not in done.stderr
    assert line.startswith("error: ledger ") and f"an entry of {len(TOO_LARGE)} bytes" in line
    assert "max_frame_bytes" in line


BOOKIE_LIMIT = 1 * MIB


@pytest.mark.parametrize(
    "shared_cluster", [(4, ("-o", f"max_frame_bytes={BOOKIE_LIMIT}"))], indirect=True
)
@pytest.mark.parametrize("protocol", [Protocol.V2, Protocol.V3], ids=["v2", "v3"])
async def test_a_bookie_with_a_smaller_limit_refuses_the_add_and_keeps_the_connection(
    shared_cluster: Any, protocol: Protocol
) -> None:
    """On a module cluster of bookies with the smaller limit (both protocols: it kills
    nothing); each test reads what its bookies logged while it ran."""
    logs = [shared_cluster.data_dir / f"bookie-{i}.log" for i in range(len(shared_cluster.ports))]
    offsets = [log.stat().st_size for log in logs]
    config = ClientConfig(protocol=protocol, batch_read_bytes_max=512 * 1024)
    async with BookKeeper(shared_cluster.uri, config) as client:
        writer = await client.create_ledger(3, 3, 2, password=b"pw")
        other = await client.create_ledger(3, 3, 2, password=b"pw", bookies=writer.ensemble)
        assert await writer.append(b"before") == 0
        neighbour = Neighbour(other)
        await neighbour.wait_for_more()
        with pytest.raises(EntryTooLargeError, match=r"EBADREQ.*max_frame_bytes"):
            await writer.append(bytes(2 * MIB))  # fits the client's 5 MiB, not the bookies'
        with pytest.raises(EntryTooLargeError):
            await writer.append(b"small")  # the writer stopped: entry 1 cannot be skipped
        await neighbour.wait_for_more()  # the shared connections were kept
        await neighbour.stop()
        assert len(writer.metadata.segments) == len(other.metadata.segments) == 1
    ensemble = {shared_cluster.index_of(bookie) for bookie in writer.ensemble}
    for index, (log, offset) in enumerate(zip(logs, offsets, strict=True)):
        text = log.read_bytes()[offset:].decode(errors="replace")
        assert ("frame length" in text) == (index in ensemble), (index, ensemble, text)
        assert "closing connection" not in text
