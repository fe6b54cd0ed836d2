"""A damaged record in the journal's last group is not a torn write.

The group was fdatasynced before its adds were acknowledged, so a bit flip there may hide
acknowledged entries: the good records are applied, and the ledgers of the damaged ones go
into limbo (missing entries answer DataUnknownError, never NoSuchEntryError, and the ledger
is fenced) across restarts and checkpoints, until ``clear_limbo``.
"""

from __future__ import annotations

import random
import struct

import pytest
from storage_helpers import KEY, entry_body, open_storage, small_config

from bkeeper.common.errors import (
    DataUnknownError,
    LedgerFencedError,
    NoSuchEntryError,
    NoSuchLedgerError,
)
from bkeeper.storage import AddBatch, MemoryFileSystem, Storage, StorageConfig, journal_damage
from bkeeper.storage.framing import RECORD_HEADER_BYTES, encode_frame
from bkeeper.storage.journal_damage import ledger_id_candidates
from bkeeper.storage.journal_format import (
    FILE_HEADER_BYTES,
    GROUP_HEADER_BYTES,
    JournalRecord,
    decode_group_header,
    decode_record,
)

JOURNAL_DIR = "/data/current/journal"
LEDGERS = (1, 2, 3)
LAST_GROUP_ENTRIES = 20  # per ledger


def _config() -> StorageConfig:
    # Groups start at most every 300 ms: what is added within that window is one group.
    return small_config(journal_max_group_wait_ms=300.0, write_cache_bytes_max=1 << 20)


def _write() -> tuple[MemoryFileSystem, str, int, list[JournalRecord]]:
    """Entry 0 of each ledger, acknowledged; then entries 1..20 of each in one batch (one
    hold of the engine's lock: the journal takes them as one group, however slowly this
    thread runs), all acknowledged; then a crash. The disk, the journal file, the last
    group's offset and its records."""
    fs = MemoryFileSystem()
    storage, acks = open_storage(fs, _config())
    for ledger_id in LEDGERS:
        storage.add_entry(ledger_id, 0, KEY, entry_body(ledger_id, 0), token=(ledger_id, 0))
    acks.wait_for((LEDGERS[-1], 0))
    batch = AddBatch()
    for entry_id in range(1, LAST_GROUP_ENTRIES + 1):
        for ledger_id in LEDGERS:
            batch.ledger_ids.append(ledger_id)
            batch.entry_ids.append(entry_id)
            batch.lacs.append(entry_id - 1)
            batch.master_keys.append(KEY)
            batch.bodies.append(entry_body(ledger_id, entry_id, entry_id - 1))
    storage.add_entries(batch)
    assert batch.refused == []
    acks.wait_for(batch)
    after = fs.crash()
    storage.abort()
    (name,) = after.list_dir(JOURNAL_DIR)
    path = f"{JOURNAL_DIR}/{name}"
    group, records = _last_group(after.read_file(path))
    for ledger_id in LEDGERS:
        assert len([r for r in records if r.ledger_id == ledger_id]) >= 2
    return after, path, group, records


def _last_group(data: bytes) -> tuple[int, list[JournalRecord]]:
    position = FILE_HEADER_BYTES
    last = position
    while position < len(data):
        header = decode_group_header(data, position)
        assert not isinstance(header, str)
        last, position = position, position + GROUP_HEADER_BYTES + header.records_bytes
    records, offset = [], last + GROUP_HEADER_BYTES
    while offset < len(data):
        record, offset, reason = decode_record(data, offset)
        assert record is not None, reason
        records.append(record)
    return last, records


def _first_of(records: list[JournalRecord], ledger_id: int) -> JournalRecord:
    """The ledger's first record in the group (another of its entries follows it)."""
    return next(r for r in records if r.ledger_id == ledger_id)


def _flip(fs: MemoryFileSystem, path: str, offset: int, bit: int) -> None:
    byte = fs.read_file(path)[offset]
    fs.corrupt(path, offset, bytes([byte ^ (1 << bit)]))


def _assert_ledger_2_in_limbo_for(storage: Storage, lost: int) -> None:
    assert storage.list_entries(2) == [e for e in range(LAST_GROUP_ENTRIES + 1) if e != lost]
    with pytest.raises(DataUnknownError):
        storage.read_entry(2, lost)
    with pytest.raises(DataUnknownError):  # batch reads too
        storage.read_entries(2, lost, 10, 1 << 20)
    with pytest.raises(DataUnknownError):  # its last entry is unknown too
        storage.read_entry(2, -1)
    with pytest.raises(DataUnknownError):
        storage.read_entry(2, LAST_GROUP_ENTRIES + 1)
    assert storage.read_entry(2, lost + 1) == entry_body(2, lost + 1, lost)
    for ledger_id in (1, 3):  # the other ledgers of the group answer as before
        assert storage.list_entries(ledger_id) == list(range(LAST_GROUP_ENTRIES + 1))
        with pytest.raises(NoSuchEntryError):
            storage.read_entry(ledger_id, LAST_GROUP_ENTRIES + 1)
    with pytest.raises(NoSuchLedgerError):
        storage.read_entry(99, 0)


def test_bit_flip_in_a_record_of_the_last_group_puts_its_ledger_in_limbo() -> None:
    fs, path, _, records = _write()
    record = _first_of(records, 2)
    lost = record.entry_id
    _flip(fs, path, record.offset + RECORD_HEADER_BYTES + 40, 3)  # inside the entry payload
    storage, _ = open_storage(fs, _config())
    assert storage.replay_outcome.cut == []
    assert [s[:2] for s in storage.replay_outcome.suspect] == [(path, record.offset)]
    assert storage.limbo_ledgers() == [2] and not storage.limbo
    _assert_ledger_2_in_limbo_for(storage, lost)
    assert storage.is_fenced(2) and not storage.is_fenced(1)
    with pytest.raises(LedgerFencedError):  # no writer may add until it is repaired
        storage.add_entry(2, 21, KEY, entry_body(2, 21))
    storage.close()
    for _ in range(2):  # limbo is persisted: across restarts and checkpoints
        storage, _ = open_storage(fs, _config())
        assert storage.replay_outcome.suspect == []
        assert storage.limbo_ledgers() == [2]
        storage.checkpoint()
        _assert_ledger_2_in_limbo_for(storage, lost)
        storage.close()
    storage, acks = open_storage(fs, _config())
    body = entry_body(2, lost, lost - 1)
    storage.add_entry(2, lost, KEY, body, recovery=True, token="repair")
    acks.wait_for("repair")
    storage.clear_limbo(2)
    storage.close()
    storage, _ = open_storage(fs, _config())
    assert storage.limbo_ledgers() == []
    assert storage.read_entry(2, lost) == body
    with pytest.raises(NoSuchEntryError):
        storage.read_entry(2, LAST_GROUP_ENTRIES + 1)
    storage.close()


@pytest.mark.parametrize("bit", [0, 1, 5])
def test_bit_flip_in_the_ledger_id_still_names_the_ledger(bit: int) -> None:
    """Ledger id 2 with bit 0 flipped reads 3, another ledger of the group; the checksum
    tells that the damage may be in the id, so ledger 2 is in limbo (3 as well: the id read
    cannot be ruled out)."""
    fs, path, _, records = _write()
    record = _first_of(records, 2)
    _flip(fs, path, record.offset + RECORD_HEADER_BYTES + 7, bit)  # the id's low byte
    storage, _ = open_storage(fs, _config())
    read_id = 2 ^ (1 << bit)
    expected = sorted({2, read_id} & set(LEDGERS))
    assert storage.limbo_ledgers() == expected and not storage.limbo
    with pytest.raises(DataUnknownError):
        storage.read_entry(2, record.entry_id)
    storage.close()


def test_bit_flip_in_the_last_group_header_keeps_its_ledgers_unknown() -> None:
    """A damaged group header with checksummed records after it is not a torn write
    either: the records are not applied (their group cannot be trusted), and every ledger
    they name is in limbo."""
    fs, path, group, records = _write()
    _flip(fs, path, group + RECORD_HEADER_BYTES + 10, 2)  # the group's byte count
    storage, _ = open_storage(fs, _config())
    assert storage.replay_outcome.cut == []
    assert storage.limbo_ledgers() == list(LEDGERS)
    for ledger_id in LEDGERS:
        first = _first_of(records, ledger_id).entry_id
        assert storage.list_entries(ledger_id) == list(range(first))
        with pytest.raises(DataUnknownError):
            storage.read_entry(ledger_id, first)
    storage.close()


def test_a_damaged_record_that_cannot_be_delimited_puts_everything_in_limbo() -> None:
    fs, path, _, records = _write()
    record = _first_of(records, 2)
    fs.corrupt(path, record.offset, b"\xff\xff\xff\xff")  # its length: runs past the group
    storage, _ = open_storage(fs, _config())
    assert storage.limbo and storage.limbo_ledgers() == []
    with pytest.raises(DataUnknownError):
        storage.read_entry(1, LAST_GROUP_ENTRIES + 1)
    with pytest.raises(DataUnknownError):
        storage.read_entry(99, 0)
    storage.clear_limbo()
    with pytest.raises(NoSuchLedgerError):
        storage.read_entry(99, 0)
    storage.close()


@pytest.mark.parametrize("payload_bytes", [32, 1000, 300_000])
def test_ledger_id_candidates_find_the_id_a_damaged_record_named(payload_bytes: int) -> None:
    """Damage outside the ledger id: the id read. One or two flipped bits, or one damaged
    byte, inside it: the true id is among the candidates."""
    rng = random.Random(payload_bytes)
    for _ in range(12):
        ledger_id = rng.choice([0, 1, 2, 1 << 40, (1 << 63) - 1])
        frame = encode_frame(1, struct.pack(">q", ledger_id) + rng.randbytes(payload_bytes))
        stored = struct.unpack_from(">I", frame, 5)[0]
        message = frame[:5] + frame[RECORD_HEADER_BYTES:]
        outside = bytearray(message)
        outside[rng.randrange(13, len(message))] ^= 1 << rng.randrange(8)
        assert ledger_id_candidates(bytes(outside), stored) == {ledger_id}
        for flips in ([rng.randrange(64)], rng.sample(range(64), 2)):
            inside = bytearray(message)
            for bit in flips:
                inside[5 + bit // 8] ^= 1 << (bit % 8)
            assert ledger_id in ledger_id_candidates(bytes(inside), stored)
        inside = bytearray(message)
        inside[5 + rng.randrange(8)] ^= rng.randrange(1, 256)
        assert ledger_id in ledger_id_candidates(bytes(inside), stored)


def test_damaged_records_of_one_size_share_one_syndrome_table() -> None:
    """Each damaged record built its own table of ~4,000 error patterns (5 ms for a 1 KiB
    record): a journal group of a thousand damaged records took seconds of a bookie's start.
    Records of one length now share one (at most ID_MASK_TABLES_MAX kept)."""
    journal_damage._id_masks.cache_clear()
    frames = [encode_frame(1, struct.pack(">q", 7) + bytes([i]) * 1000) for i in range(50)]
    for frame in frames:
        stored = struct.unpack_from(">I", frame, 5)[0]
        message = bytearray(frame[:5] + frame[RECORD_HEADER_BYTES:])
        message[40] ^= 4
        assert ledger_id_candidates(bytes(message), stored) == {7}
    info = journal_damage._id_masks.cache_info()
    assert (info.misses, info.hits) == (1, 49)
    for size in range(journal_damage.ID_MASK_TABLES_MAX + 3):
        journal_damage._id_masks(100 + size)
    assert journal_damage._id_masks.cache_info().currsize == journal_damage.ID_MASK_TABLES_MAX


def _copy(fs: MemoryFileSystem) -> MemoryFileSystem:
    """A fresh disk holding the files of ``fs``'s engine, all durable."""
    copy = MemoryFileSystem()
    for directory in (JOURNAL_DIR, "/data/current/ledgers"):
        copy.makedirs(directory)
        for name in fs.list_dir(directory):
            f = copy.open_append(f"{directory}/{name}")
            f.write(fs.read_file(f"{directory}/{name}"))
            f.sync()
            f.close()
        copy.fsync_dir(directory)
    return copy


def test_a_crash_while_opening_keeps_the_suspect_group_and_its_limbo() -> None:
    """The damaged group is not cut: a crash after opening started a new journal file but
    before its checkpoint persisted the limbo must find the same group again, as the last
    one written (a journal file without groups after it does not make it "the middle")."""
    fs, path, _, records = _write()
    record = _first_of(records, 2)
    _flip(fs, path, record.offset + RECORD_HEADER_BYTES + 40, 3)
    crashed_at = []
    for operations in range(1, 200):
        disk = _copy(fs)
        disk.schedule_crash(operations)
        try:
            Storage.open(_config(), disk).close()
        except OSError:
            crashed_at.append(operations)
        else:
            break
        storage, _ = open_storage(disk.restart(), _config())
        assert storage.limbo_ledgers() == [2], operations
        with pytest.raises(DataUnknownError):
            storage.read_entry(2, record.entry_id)
        storage.close()
    assert len(crashed_at) >= 5  # the crash points covered replay, journal start, checkpoint
