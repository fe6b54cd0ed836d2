"""A bookie's v2 batch lane: the adds one chunk brings, handled together.

Raw TCP, so that the test decides what one write holds: runs of adds with other requests
between them, refusals in the middle of a run, frames cut anywhere, and no answer before the
journal's fdatasync covering the adds.
"""

from __future__ import annotations

import asyncio
import threading

from bkeeper.storage import MemoryFileSystem, WritableFile
from bkeeper.wire import v2
from bkeeper.wire.codes import StatusCode
from bkeeper.wire.digest import DigestManager, DigestType, master_key
from bkeeper.wire.framing import FrameDecoder
from bkeeper.wire.messages import AddRequest, AddResponse, ReadRequest, ReadResponse

KEY = master_key(b"pw")
OTHER = master_key(b"other")


def body(ledger_id: int, entry_id: int) -> bytes:
    return DigestManager(ledger_id, DigestType.CRC32C, b"pw").encode_entry(
        entry_id, entry_id - 1, 10 * (entry_id + 1), f"entry-{entry_id}".encode()
    )


def add(ledger_id: int, entry_id: int, key: bytes = KEY, recovery: bool = False) -> bytes:
    request = AddRequest(ledger_id, entry_id, key, body(ledger_id, entry_id), recovery=recovery)
    return v2.encode_request_frame(request)


class Peer:
    """A raw v2 client: writes bytes as given, reads whole responses."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.decoder = FrameDecoder()
        self.pending: list[object] = []

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def responses(self, count: int) -> list[object]:
        while len(self.pending) < count:
            chunk = await asyncio.wait_for(self.reader.read(65536), 30)
            assert chunk, "connection closed"
            self.decoder.receive_data(chunk)
            self.pending.extend(v2.decode_response(f) for f in self.decoder.frames())
        out, self.pending = self.pending[:count], self.pending[count:]
        return out


async def connect(bookie) -> Peer:
    reader, writer = await asyncio.open_connection("127.0.0.1", bookie.port)
    return Peer(reader, writer)


def statuses(responses: list[object]) -> dict[tuple[int, int], StatusCode]:
    return {(r.ledger_id, r.entry_id): r.status for r in responses if isinstance(r, AddResponse)}


async def test_runs_of_adds_around_a_read_in_one_write(start_bookie) -> None:
    bookie = await start_bookie()
    peer = await connect(bookie)
    first = b"".join(add(9, e) for e in range(50))
    read = v2.encode_request_frame(ReadRequest(9, 49))
    second = b"".join(add(9, e) for e in range(50, 60))
    await peer.send(first + read + second)
    responses = await peer.responses(61)
    reads = [r for r in responses if isinstance(r, ReadResponse)]
    assert [(r.status, bytes(r.body or b"")) for r in reads] == [(StatusCode.EOK, body(9, 49))]
    assert statuses(responses) == {(9, e): StatusCode.EOK for e in range(60)}
    connection = bookie.connections.connections[0]
    assert (connection.requests_in_flight, connection.bytes_in_flight) == (0, 0)


async def test_refusals_in_the_middle_of_a_run(start_bookie) -> None:
    bookie = await start_bookie()
    peer = await connect(bookie)
    await peer.send(add(10, 0) + add(11, 0))
    await peer.responses(2)
    fence = v2.encode_request_frame(ReadRequest(11, 0, fence=True, master_key=KEY))
    await peer.send(fence)
    await peer.responses(1)
    chunk = add(10, 1) + add(10, 2, OTHER) + add(11, 1) + add(11, 2, recovery=True) + add(10, 3)
    await peer.send(chunk)
    assert statuses(await peer.responses(5)) == {
        (10, 1): StatusCode.EOK,
        (10, 2): StatusCode.EUA,
        (11, 1): StatusCode.EFENCED,
        (11, 2): StatusCode.EOK,  # a recovery add (flags): through the single-add path
        (10, 3): StatusCode.EOK,
    }
    connection = bookie.connections.connections[0]
    assert (connection.requests_in_flight, connection.bytes_in_flight) == (0, 0)
    assert bookie.storage is not None
    assert bookie.storage.list_entries(10) == [0, 1, 3]


async def test_frames_cut_anywhere(start_bookie) -> None:
    bookie = await start_bookie()
    peer = await connect(bookie)
    stream = b"".join(add(12, e) for e in range(40))
    for at in range(0, len(stream), 7):
        await peer.send(stream[at : at + 7])
    assert statuses(await peer.responses(40)) == {(12, e): StatusCode.EOK for e in range(40)}


class _GatedFile:
    def __init__(self, inner: WritableFile, fs: GatedFs) -> None:
        self._inner, self._fs = inner, fs

    @property
    def path(self) -> str:
        return self._inner.path

    def write(self, data) -> None:  # type: ignore[no-untyped-def]
        self._inner.write(data)

    def sync(self) -> None:
        self._fs.syncing.set()
        assert self._fs.gate.wait(30), "gate never opened"
        self._inner.sync()

    def size(self) -> int:
        return self._inner.size()

    def close(self) -> None:
        self._inner.close()


class GatedFs(MemoryFileSystem):
    """Journal syncs wait for ``gate`` (once ``armed``), saying so with ``syncing``."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.gate = threading.Event()
        self.syncing = threading.Event()

    def open_append(self, path: str) -> WritableFile:
        inner = super().open_append(path)
        return _GatedFile(inner, self) if self.armed and path.endswith(".txn") else inner


async def test_no_answer_before_the_journal_sync(start_bookie) -> None:
    fs = GatedFs()
    bookie = await start_bookie(fs=fs, storage={"journal_file_bytes_max": 1 << 20})
    fs.armed = True  # the journal's first file is opened by its first group
    peer = await connect(bookie)
    await peer.send(b"".join(add(13, e) for e in range(30)))
    assert await asyncio.to_thread(fs.syncing.wait, 30)
    connection = bookie.connections.connections[0]
    assert connection.requests_in_flight == 30  # none answered
    assert not connection.queued_responses
    fs.gate.set()
    assert statuses(await peer.responses(30)) == {(13, e): StatusCode.EOK for e in range(30)}


async def test_the_bench_load_generator_gets_every_add_answered(start_bookie) -> None:
    from bkeeper.testing.benchmarks.bookie_v2 import bench_bookie_adds_v2

    bookie = await start_bookie()
    for rate in (None, 2000.0):
        result = await bench_bookie_adds_v2(
            "127.0.0.1", bookie.port, entry_bytes=100, duration_s=0.3, in_flight=200, rate=rate
        )
        assert result.operations > 0
        assert len(result.latencies_s) == result.operations
    assert bookie.storage is not None
    assert sum(len(bookie.storage.list_entries(i)) for i in bookie.storage.ledger_ids()) == (
        bookie.state.adds
    )
