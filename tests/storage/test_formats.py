"""Pure codecs of the on-disk formats: record frames, journal records, index, checkpoint."""

from __future__ import annotations

import random
import struct
from array import array

import pytest
from crc32c import crc32c
from hypothesis import given
from hypothesis import strategies as st
from storage_helpers import entry_body

from bkeeper.common.errors import CorruptRecordError
from bkeeper.storage import JournalPosition, MemoryFileSystem
from bkeeper.storage.checkpoint_file import CheckpointRecord, JournalMark
from bkeeper.storage.framing import FrameStatus, decode_frame, encode_frame
from bkeeper.storage.index_file import (
    IndexDelta,
    LocationRun,
    encode_delta,
    encode_index_header,
    load_index,
)
from bkeeper.storage.journal_format import (
    RecordKind,
    decode_group_header,
    decode_record,
    encode_group_header,
    journal_file_id,
    journal_file_name,
    ledger_record,
)
from bkeeper.storage.ledger_state import LedgerLocations, LedgerSnapshot

KINDS = frozenset(range(8))


@given(st.integers(0, 7), st.binary(max_size=300))
def test_frame_round_trip(kind: int, payload: bytes) -> None:
    data = b"junk" + encode_frame(kind, payload)
    frame = decode_frame(data, 4, KINDS)
    assert frame.status is FrameStatus.OK
    assert (frame.kind, frame.payload, frame.end) == (kind, payload, len(data))


@given(st.binary(min_size=1, max_size=64), st.data())
def test_any_damaged_byte_is_detected(payload: bytes, data: st.DataObject) -> None:
    frame = bytearray(encode_frame(1, payload))
    index = data.draw(st.integers(0, len(frame) - 1))
    frame[index] ^= data.draw(st.integers(1, 255))
    assert decode_frame(bytes(frame), 0, KINDS).status is not FrameStatus.OK


def test_short_frames_are_truncated() -> None:
    frame = encode_frame(1, b"payload")
    for cut in range(len(frame)):
        assert decode_frame(frame[:cut], 0, KINDS).status is FrameStatus.TRUNCATED


def test_journal_records_decode() -> None:
    body = entry_body(5, 9, 8)
    add = encode_frame(RecordKind.ADD_ENTRY, body)
    record, end, _ = decode_record(add, 0)
    assert record is not None and end == len(add)
    assert (record.kind, record.ledger_id, record.entry_id, record.data) == (
        RecordKind.ADD_ENTRY,
        5,
        9,
        body,
    )
    key = ledger_record(RecordKind.MASTER_KEY, 5, b"key")
    record, _, _ = decode_record(key, 0)
    assert record is not None and (record.ledger_id, record.data) == (5, b"key")
    fence = ledger_record(RecordKind.FENCE, 7)
    record, _, _ = decode_record(fence, 0)
    assert record is not None and (record.kind, record.ledger_id) == (RecordKind.FENCE, 7)


def test_damaged_journal_record_reports_whether_its_length_holds() -> None:
    data = bytearray(encode_frame(RecordKind.ADD_ENTRY, entry_body(1, 1)))
    data[-1] ^= 1
    record, end, reason = decode_record(bytes(data), 0)
    assert record is None and end == len(data) and "checksum" in reason
    data[4] = 200  # an unknown kind: the header itself is untrustworthy
    record, end, _ = decode_record(bytes(data), 0)
    assert record is None and end == -1


def test_group_header_and_file_names() -> None:
    header = decode_group_header(encode_group_header(3, 1000, 7), 0)
    assert not isinstance(header, str)
    assert (header.seq, header.records_bytes, header.count) == (3, 1000, 7)
    assert isinstance(decode_group_header(b"\x00" * 25, 0), str)
    assert journal_file_id(journal_file_name(0xABC)) == 0xABC
    assert journal_file_id("checkpoint") is None


def test_index_delta_round_trip() -> None:
    fs = MemoryFileSystem()
    fs.makedirs("/d")
    first = IndexDelta(
        deleted=(),
        ledgers=(
            LedgerSnapshot(1, b"k1", False, 4, None),
            LedgerSnapshot(2, b"k2", True, -1, b"lac body", limbo=True),
            LedgerSnapshot(3, b"k3", False, -1, None),
        ),
        runs=(
            LocationRun(1, array("q", [0, 1, 5]), array("Q", [100, 200, 300])),
            LocationRun(3, array("q", [0]), array("Q", [400])),
        ),
    )
    second = IndexDelta(
        deleted=(3,),
        ledgers=(
            LedgerSnapshot(1, b"k1", True, 6, b"x", limbo=True),
            LedgerSnapshot(2, b"k2", True, -1, b"lac body", limbo=False),
        ),
        runs=(LocationRun(1, array("q", [6]), array("Q", [500])),),
    )
    data = encode_index_header(1) + encode_delta(first) + encode_delta(second)
    f = fs.open_append("/d/index")
    f.write(data + b"debris")
    states = load_index(fs, "/d/index", len(data))
    assert sorted(states) == [1, 2]
    one, two = states[1], states[2]
    assert (one.master_key, one.fenced, one.lac, one.explicit_lac) == (b"k1", True, 6, b"x")
    assert one.limbo and not two.limbo  # the flag, set and cleared by later records
    assert list(one.locations.items()) == [(0, 100), (1, 200), (5, 300), (6, 500)]
    assert one.last_entry_id == 6
    assert (two.fenced, two.explicit_lac, two.last_entry_id) == (True, b"lac body", -1)
    with pytest.raises(CorruptRecordError):
        load_index(fs, "/d/index", len(data) + 3)


def test_checkpoint_record_round_trip_and_damage() -> None:
    marks = (
        JournalMark("current/journal", JournalPosition(3, 4096)),
        JournalMark("/mnt/j2/journal", JournalPosition(5, 16)),
    )
    record = CheckpointRecord(marks, 2, 777, True, ("current/ledgers", "/mnt/l2"))
    data = record.encode()
    assert CheckpointRecord.decode(data, "cp") == record
    assert record.mark_of("/mnt/j2/journal") == JournalPosition(5, 16)
    assert record.mark_of("/elsewhere") is None
    for at in range(len(data)):
        damaged = bytearray(data)
        damaged[at] ^= 1
        with pytest.raises(CorruptRecordError, match="cp at offset 0"):
            CheckpointRecord.decode(bytes(damaged), "cp")
    with pytest.raises(CorruptRecordError, match="cp at offset 0"):
        CheckpointRecord.decode(data[:-5] + crc32c(data[:-5]).to_bytes(4, "big"), "cp")


def test_a_version_1_checkpoint_still_opens() -> None:
    """The 48-byte checkpoint written before several directories were allowed: one journal
    mark (of current/journal), one ledger directory (current/ledgers)."""
    body = struct.pack(">4sIQQQQI", b"BKCP", 1, 3, 4096, 2, 777, 1)
    record = CheckpointRecord.decode(body + crc32c(body).to_bytes(4, "big"), "cp")
    assert record == CheckpointRecord(
        (JournalMark("current/journal", JournalPosition(3, 4096)),), 2, 777, True
    )
    assert record.ledger_dirs == ("current/ledgers",) and record.mark == JournalPosition(3, 4096)


def test_locations_dense_then_sparse() -> None:
    locations = LedgerLocations()
    for entry_id in (0, 3, 1):
        locations.set(entry_id, 10 + entry_id)
    assert locations.get(2) == 0 and locations.get(3) == 13 and locations.get(-1) == 0
    assert locations.entry_ids() == [0, 1, 3]
    far = 1 << 20
    locations.set(far, 99)
    assert locations.get(far) == 99 and locations.get(1) == 11
    assert locations.entry_ids() == [0, 1, 3, far]
    assert locations.max_entry_id == far and len(locations) == 4


@pytest.mark.parametrize("seed", range(20))
def test_locations_agree_with_a_dict_for_any_ids(seed: int) -> None:
    """Dense runs, gaps, ids behind the first one, huge ids and overwrites, in any order:
    ``get``, ``items`` and ``len`` answer as a plain dict would."""
    rng = random.Random(seed)
    model: dict[int, int] = {}
    locations = LedgerLocations()
    start = rng.choice([0, 5, 1 << 40])
    ids = [start + i for i in range(rng.randrange(300))]
    ids += [rng.randrange(1 << 63) for _ in range(50)]
    ids += [start + rng.randrange(2000) for _ in range(300)]
    ids += list(range(start + 3000, start + 2500, -1))
    ids += [(1 << 63) - 1, 0]
    if seed % 2:
        rng.shuffle(ids)
    for location, entry_id in enumerate(ids, 1):
        locations.set(entry_id, location)
        model[entry_id] = location
    assert list(locations.items()) == sorted(model.items())
    assert len(locations) == len(model)
    assert locations.max_entry_id == max(model)
    for entry_id in [*model, -1, start + 2999, (1 << 63) - 2]:
        assert locations.get(entry_id) == model.get(entry_id, 0)
