"""The bookie side of BATCH_READ: ``Storage.read_entries`` over every place an entry can be
(write cache, read cache, entry logs), agreeing with ``read_entry``, and the v2 answer
built from the bodies it returns."""

from __future__ import annotations

import struct
from collections.abc import Iterator

import pytest

from bkeeper.common.errors import NoSuchEntryError, NoSuchLedgerError
from bkeeper.storage import MemoryFileSystem, Storage, StorageConfig
from bkeeper.wire import v2
from bkeeper.wire.codes import StatusCode
from bkeeper.wire.messages import BatchReadResponse

KEY = b"k" * 20
LEDGER = 9
_HEAD = struct.Struct(">qqqq")


def body(entry_id: int) -> bytes:
    payload = bytes([entry_id % 251]) * (60 + entry_id % 50)
    return _HEAD.pack(LEDGER, entry_id, entry_id - 1, len(payload)) + payload


@pytest.fixture
def storage() -> Iterator[Storage]:
    """300 entries of ledger 9: most in entry logs, some in the read cache, the last ones in
    the write cache; entry 300 missing, then 301..305 present."""
    config = StorageConfig(
        data_dir="/data",
        journal_max_group_wait_ms=0.0,
        write_cache_bytes_max=32 * 1024,
        read_cache_bytes_max=4 * 1024,
        entry_log_bytes_max=24 * 1024,
    )
    storage = Storage.open(config, MemoryFileSystem())
    for entry_id in [*range(300), *range(301, 306)]:
        if entry_id % 50 == 0:
            storage.checkpoint()
        storage.add_entry(LEDGER, entry_id, KEY, body(entry_id))
    yield storage
    storage.close()


def test_places_differ(storage: Storage) -> None:
    assert storage.read_entry_nowait(LEDGER, 0) is None  # on disk only
    assert storage.read_entry_nowait(LEDGER, 299) is not None  # in memory


@pytest.mark.parametrize("start", [0, 17, 149, 250, 299, 301])
@pytest.mark.parametrize(("count", "bytes_max"), [(1, 1 << 20), (40, 1 << 20), (500, 3000)])
def test_read_entries_agrees_with_read_entry(
    storage: Storage, start: int, count: int, bytes_max: int
) -> None:
    bodies = storage.read_entries(LEDGER, start, count, bytes_max)
    expected = []
    total = 0
    for entry_id in range(start, start + count):
        if entry_id == 300 or entry_id > 305:
            break
        total += len(body(entry_id))
        if expected and total > bytes_max:
            break
        expected.append(body(entry_id))
    assert bodies == expected


def test_first_entry_errors_and_last_entry(storage: Storage) -> None:
    with pytest.raises(NoSuchEntryError):
        storage.read_entries(LEDGER, 300, 10, 1 << 20)
    with pytest.raises(NoSuchEntryError):
        storage.read_entries(LEDGER, -2, 10, 1 << 20)
    with pytest.raises(NoSuchLedgerError):
        storage.read_entries(LEDGER + 1, 0, 10, 1 << 20)
    assert storage.read_entries(LEDGER, -1, 10, 1 << 20) == [body(305)]
    assert storage.read_entries(LEDGER, 0, 10, 1) == [body(0)]  # one even past the bytes


def test_the_v2_answer_carries_the_bodies_as_they_are(storage: Storage) -> None:
    bodies = storage.read_entries(LEDGER, 40, 100, 1 << 20)
    response = BatchReadResponse(StatusCode.EOK, LEDGER, 40, 7, tuple(bodies))
    frame = v2.encode_response_frame(response)
    assert struct.unpack_from(">i", frame)[0] == len(frame) - 4
    decoded = v2.decode_response(frame[4:])
    assert isinstance(decoded, BatchReadResponse)
    assert (decoded.request_id, decoded.start_entry_id) == (7, 40)
    assert [bytes(b) for b in decoded.bodies] == bodies
    error = BatchReadResponse(StatusCode.ENOENTRY, LEDGER, 40, 8, tuple(bodies))
    assert v2.decode_response(v2.encode_response_frame(error)[4:]).bodies == ()
