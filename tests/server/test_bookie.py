"""A bookie in this process, over real TCP: every request type and its documented answers."""

from __future__ import annotations

import asyncio
import random
import struct
import threading
from pathlib import Path

import pytest

from bkeeper.common.errors import CookieMismatchError
from bkeeper.storage.filesystem import OsFileSystem, WritableFile
from bkeeper.storage.slow_sync import BeforeSyncFile
from bkeeper.wire import entryset
from bkeeper.wire.batch_frames import batch_bodies
from bkeeper.wire.codes import GetBookieInfoField, Protocol, StatusCode
from bkeeper.wire.digest import DigestManager, DigestType, master_key
from bkeeper.wire.messages import (
    AddRequest,
    AuthMessage,
    AuthRequest,
    BatchReadRequest,
    ForceLedgerRequest,
    GetBookieInfoRequest,
    GetListOfEntriesRequest,
    ReadLacRequest,
    ReadRequest,
    WriteLacRequest,
)

KEY = master_key(b"pw")
BOTH = pytest.mark.parametrize("protocol", [Protocol.V2, Protocol.V3])


def body(ledger: int, entry: int, payload: bytes = b"", lac: int = -1) -> bytes:
    return DigestManager(ledger, DigestType.CRC32C, b"pw").encode_entry(
        entry, lac, len(payload) * (entry + 1), payload or f"entry-{entry}".encode()
    )


async def add(
    client, ledger: int, entry: int, *, key: bytes = KEY, recovery: bool = False, lac: int = -1
):
    return await client.request(
        AddRequest(ledger, entry, key, body(ledger, entry, lac=lac), recovery=recovery)
    )


@BOTH
async def test_add_then_read_back(start_bookie, connect, protocol):
    bookie = await start_bookie()
    client = await connect(bookie, protocol)
    futures = [client.send(AddRequest(5, e, KEY, body(5, e))) for e in range(200)]
    responses = await asyncio.gather(*futures)
    assert [r.status for r in responses] == [StatusCode.EOK] * 200
    assert sorted(r.entry_id for r in responses) == list(range(200))
    for entry in (0, 57, 199):
        response = await client.request(ReadRequest(5, entry))
        assert response.status is StatusCode.EOK
        assert bytes(response.body) == body(5, entry)
    last = await client.request(ReadRequest(5, -1))
    assert last.status is StatusCode.EOK
    assert bytes(last.body) == body(5, 199)


@BOTH
async def test_missing_ledger_and_entry(start_bookie, connect, protocol):
    bookie = await start_bookie()
    client = await connect(bookie, protocol)
    assert (await client.request(ReadRequest(404, 0))).status is StatusCode.ENOLEDGER
    assert (await add(client, 6, 0)).status is StatusCode.EOK
    assert (await client.request(ReadRequest(6, 1))).status is StatusCode.ENOENTRY


@BOTH
async def test_wrong_master_key_is_unauthorized(start_bookie, connect, protocol):
    bookie = await start_bookie()
    client = await connect(bookie, protocol)
    assert (await add(client, 7, 0)).status is StatusCode.EOK
    assert (await add(client, 7, 1, key=master_key(b"other"))).status is StatusCode.EUA
    fence = ReadRequest(7, -1, fence=True, master_key=master_key(b"other"))
    assert (await client.request(fence)).status is StatusCode.EUA


@BOTH
async def test_fencing_blocks_adds_but_not_recovery_adds(start_bookie, connect, protocol):
    bookie = await start_bookie()
    client = await connect(bookie, protocol)
    for entry in range(3):
        assert (await add(client, 8, entry)).status is StatusCode.EOK
    fenced = await client.request(ReadRequest(8, -1, fence=True, master_key=KEY))
    assert fenced.status is StatusCode.EOK
    assert bytes(fenced.body) == body(8, 2)
    assert (await add(client, 8, 3)).status is StatusCode.EFENCED
    assert (await add(client, 8, 3, recovery=True)).status is StatusCode.EOK


@BOTH
async def test_pipelined_adds_to_a_fenced_and_an_open_ledger_get_each_their_answer(
    start_bookie, connect, protocol
):
    """Adds sent together (one chunk for the bookie, as a pipelining client's are) where
    the engine refuses some: each is answered with its own status (v3: its own txn id)."""
    bookie = await start_bookie()
    client = await connect(bookie, protocol)
    assert (await add(client, 10, 0)).status is StatusCode.EOK
    fenced = await client.request(ReadRequest(10, -1, fence=True, master_key=KEY))
    assert fenced.status is StatusCode.EOK
    requests = [
        AddRequest(ledger, e, KEY, body(ledger, e)) for e in range(1, 6) for ledger in (10, 11)
    ]
    responses = await asyncio.gather(*(client.send(request) for request in requests))
    assert [(r.ledger_id, r.entry_id, r.status) for r in responses] == [
        (
            request.ledger_id,
            request.entry_id,
            StatusCode.EFENCED if request.ledger_id == 10 else StatusCode.EOK,
        )
        for request in requests
    ]
    for entry in range(1, 6):
        assert bytes((await client.request(ReadRequest(11, entry))).body) == body(11, entry)
        assert (await client.request(ReadRequest(10, entry))).status is StatusCode.ENOENTRY


async def test_fencing_survives_restart(start_bookie, connect, tmp_path: Path):
    data = tmp_path / "restart"
    bookie = await start_bookie(data, bookie_id="restart-bookie")
    client = await connect(bookie)
    assert (await add(client, 9, 0)).status is StatusCode.EOK
    assert (
        await client.request(ReadRequest(9, -1, fence=True, master_key=KEY))
    ).status is StatusCode.EOK
    await bookie.aclose()
    bookie = await start_bookie(data, bookie_id="restart-bookie")
    client = await connect(bookie)
    assert (await add(client, 9, 1)).status is StatusCode.EFENCED
    assert (await add(client, 9, 1, recovery=True)).status is StatusCode.EOK
    assert bytes((await client.request(ReadRequest(9, 0))).body) == body(9, 0)


async def _until(condition) -> None:
    while not condition():
        await asyncio.sleep(0.005)


async def test_long_poll_returns_when_lac_advances(start_bookie, connect):
    bookie = await start_bookie()
    reader = await connect(bookie)
    writer = await connect(bookie)
    assert (await add(writer, 10, 0)).status is StatusCode.EOK
    poll = reader.send(ReadRequest(10, 1, piggyback=True, previous_lac=0, timeout_ms=10_000))
    await asyncio.wait_for(_until(lambda: bookie.state.lac_waiter_count == 1), 10)
    assert not poll.done()  # parked: LAC 0 has not passed previous_lac 0
    assert (await add(writer, 10, 1, lac=0)).status is StatusCode.EOK
    assert (await add(writer, 10, 2, lac=1)).status is StatusCode.EOK
    response = await asyncio.wait_for(poll, 5)
    assert response.status is StatusCode.EOK
    assert response.max_lac == 1
    assert bytes(response.body) == body(10, 1, lac=0)


async def test_long_poll_piggyback_as_apache_bookkeeper_asks(start_bookie, connect):
    """Apache BookKeeper's clients ask for the piggybacked entry as entry -1 (the entry is
    previous LAC + 1); the answer echoes -1 and carries that entry, not the last one."""
    bookie = await start_bookie()
    reader = await connect(bookie)
    writer = await connect(bookie)
    for entry in range(4):  # LAC 2 (carried by entry 3)
        assert (await add(writer, 14, entry, lac=entry - 1)).status is StatusCode.EOK
    response = await reader.request(
        ReadRequest(14, -1, piggyback=True, previous_lac=0, timeout_ms=10)
    )
    assert (response.status, response.entry_id, response.max_lac) == (StatusCode.EOK, -1, 2)
    assert bytes(response.body) == body(14, 1, lac=0)
    poll = reader.send(ReadRequest(14, -1, piggyback=True, previous_lac=2, timeout_ms=10_000))
    await asyncio.wait_for(_until(lambda: bookie.state.lac_waiter_count == 1), 10)
    assert (await add(writer, 14, 4, lac=3)).status is StatusCode.EOK
    response = await asyncio.wait_for(poll, 5)
    assert (response.max_lac, bytes(response.body)) == (3, body(14, 3, lac=2))


async def test_long_poll_wakes_when_the_lac_arrives_not_once_durable(
    start_bookie, connect, tmp_path
):
    """The add carrying a new LAC wakes the long polls as it arrives: the LAC names entries
    already on an ack quorum, so the reader need not wait for this bookie's fsync."""
    fs = GatedSyncFileSystem()
    bookie = await start_bookie(tmp_path / "gated", fs=fs)
    reader = await connect(bookie)
    writer = await connect(bookie)
    for entry in range(2):
        assert (await add(writer, 15, entry, lac=entry - 1)).status is StatusCode.EOK
    poll = reader.send(ReadRequest(15, -1, piggyback=True, previous_lac=0, timeout_ms=30_000))
    await asyncio.wait_for(_until(lambda: bookie.state.lac_waiter_count == 1), 10)
    fs.syncs_open.clear()  # no fsync ends until the gate opens
    try:
        adding = writer.send(AddRequest(15, 2, KEY, body(15, 2, lac=1)))
        response = await asyncio.wait_for(poll, 10)  # a hang bound, not a speed bound
        assert not adding.done()  # answered before the add that carried the LAC is durable
        assert (response.max_lac, bytes(response.body)) == (1, body(15, 1, lac=0))
    finally:
        fs.syncs_open.set()
    assert (await asyncio.wait_for(adding, 10)).status is StatusCode.EOK


class GatedSyncFileSystem(OsFileSystem):
    """The real filesystem whose fsyncs of appended files wait while ``syncs_open`` is
    clear (on the journal's or flusher's thread), then happen."""

    def __init__(self) -> None:
        self.syncs_open = threading.Event()
        self.syncs_open.set()

    def open_append(self, path: str) -> WritableFile:
        return BeforeSyncFile(super().open_append(path), self._wait)

    def _wait(self) -> None:
        if not self.syncs_open.wait(60):  # a hang bound: the test opens it within seconds
            raise OSError("the test never opened the fsync gate")


async def test_long_poll_times_out_with_current_lac(start_bookie, connect):
    bookie = await start_bookie()
    client = await connect(bookie)
    assert (await add(client, 11, 0)).status is StatusCode.EOK
    response = await asyncio.wait_for(
        client.request(ReadRequest(11, 1, previous_lac=5, timeout_ms=100)), 5
    )
    assert response.status is StatusCode.EOK
    assert response.max_lac == -1


async def test_explicit_lac_write_read_and_persist(start_bookie, connect, tmp_path: Path):
    data = tmp_path / "lac"
    bookie = await start_bookie(data, bookie_id="lac-bookie")
    client = await connect(bookie)
    manager = DigestManager(12, DigestType.CRC32C, b"pw")
    for entry in range(3):
        assert (await add(client, 12, entry)).status is StatusCode.EOK
    lac_body = manager.encode_lac(2)
    written = await client.request(WriteLacRequest(12, 2, KEY, lac_body))
    assert written.status is StatusCode.EOK
    await bookie.aclose()
    bookie = await start_bookie(data, bookie_id="lac-bookie")
    client = await connect(bookie)
    response = await client.request(ReadLacRequest(12))
    assert response.status is StatusCode.EOK
    assert manager.verify_lac(bytes(response.lac_body)) == 2
    assert bytes(response.last_entry_body) == body(12, 2)
    assert (await client.request(ReadLacRequest(999))).status is StatusCode.ENOLEDGER


async def test_force_info_entries_auth(start_bookie, connect):
    bookie = await start_bookie()
    client = await connect(bookie)
    for entry in (0, 1, 2, 5):
        assert (await add(client, 13, entry)).status is StatusCode.EOK
    assert (await client.request(ForceLedgerRequest(13))).status is StatusCode.EOK
    info = await client.request(
        GetBookieInfoRequest(
            GetBookieInfoField.TOTAL_DISK_CAPACITY | GetBookieInfoField.FREE_DISK_SPACE
        )
    )
    assert info.status is StatusCode.EOK
    assert info.total_disk_capacity >= info.free_disk_space > 0
    listed = await client.request(GetListOfEntriesRequest(13))
    assert listed.status is StatusCode.EOK
    assert list(entryset.decode_entry_ids(bytes(listed.availability))) == [0, 1, 2, 5]
    auth = await client.request(AuthRequest(AuthMessage("AuthDisabledPlugin")))
    assert auth.status is StatusCode.EOK


async def test_batch_read_v2(start_bookie, connect):
    bookie = await start_bookie()
    client = await connect(bookie, Protocol.V2)
    for entry in range(10):
        assert (await add(client, 14, entry)).status is StatusCode.EOK
    response = await client.request(BatchReadRequest(14, 3, 4, 1 << 20, request_id=77))
    assert response.status is StatusCode.EOK
    assert [bytes(b) for b in batch_bodies(response)] == [body(14, e) for e in range(3, 7)]


async def test_garbage_closes_only_that_connection(start_bookie, connect):
    bookie = await start_bookie()
    good = await connect(bookie)
    for garbage in (
        b"\x00\x00\x00\x00",  # zero length
        b"\xff\xff\xff\xf0junk",  # negative length
        struct.pack(">i", 64 * 1024 * 1024) + b"x",  # over the frame limit
        struct.pack(">i", 6) + b"\x0a\x04\xff\xff\xff\xff",  # broken v3 header
        b"\x7f" + random.Random(7).randbytes(4095),  # noise announcing a huge frame
    ):
        reader, writer = await asyncio.open_connection("127.0.0.1", bookie.port)
        writer.write(garbage)
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), 5)
        writer.close()
        assert data == b"", garbage[:8]  # closed at once, nothing answered
        assert (await add(good, 16, garbage[0] % 7 + 100)).status is StatusCode.EOK


async def test_unknown_v3_operation_gets_ebadreq(start_bookie):
    bookie = await start_bookie()
    reader, writer = await asyncio.open_connection("127.0.0.1", bookie.port)
    # Request { header { version: 3, operation: 3 (RANGE_READ_ENTRY), txnId: 42 } }
    header = bytes([0x08, 0x03, 0x10, 0x03, 0x18, 42])
    request = bytes([0x0A, len(header)]) + header
    writer.write(struct.pack(">i", len(request)) + request)
    await writer.drain()
    size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 5))[0]
    payload = await reader.readexactly(size)
    writer.close()
    # Response { header {version 3, operation 3, txnId 42}, status: EBADREQ (404) }
    assert payload.startswith(bytes([0x0A, len(header)]) + header)
    assert payload[2 + len(header) :] == bytes([0x10, 0x94, 0x03])


async def test_cookie_mismatch_refuses_start(start_bookie, tmp_path: Path):
    data = tmp_path / "cookie"
    bookie = await start_bookie(data, bookie_id="bookie-a")
    await bookie.aclose()
    with pytest.raises(CookieMismatchError, match="bookie-a"):
        await start_bookie(data, bookie_id="bookie-b")


class _BrokenMember:
    """A connection the table cannot look at: the sweep loop fails on it (a bookie bug)."""

    peer = "broken"
    closed = active = False
    last_seen = accepted_at = 0.0
    partial_bytes = 0
    busy = False

    @property
    def handshaken(self) -> bool:
        raise RuntimeError("sweep bug")

    def abort_transport(self) -> None:
        self.closed = True

    def close(self) -> None:
        self.closed = True


async def test_a_failing_background_loop_stops_the_bookie_and_aclose_raises_it(start_bookie):
    bookie = await start_bookie(connection_handshake_timeout_ms=100)
    assert bookie.connections.admit(_BrokenMember())
    await asyncio.wait_for(bookie.wait_stopped(), 10)  # stopped by the failure, not asked
    with pytest.raises(RuntimeError, match="sweep bug"):
        await bookie.aclose()
    assert bookie.storage is None  # the shutdown was complete before the error was raised
    await bookie.aclose()  # reported once
