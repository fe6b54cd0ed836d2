"""Damaged entry-log records (bit rot while a bookie is stopped): a read or a scrub marks
the entry damaged and its ledger in limbo, the entry answers "unknown" (never a bad body,
never "absent") and is left out of the entries listed until a whole copy is added again."""

from __future__ import annotations

from pathlib import Path

import pytest
from storage_helpers import KEY, Acks, entry_body, small_config

from bkeeper.common.errors import DataUnknownError
from bkeeper.storage import AddBatch, MemoryFileSystem, Storage
from bkeeper.storage.scrub import scrub
from bkeeper.testing.entry_log_faults import flip_entry_log_records

ENTRIES = 50


def stored_then_damaged(tmp_path: Path) -> tuple[Storage, tuple[int, ...]]:
    """Ledger 1 (entries 0..49) and ledger 2 in entry logs, checkpointed; the bookie
    stopped; the last 5 records of ledger 1 flipped; opened again."""
    config = small_config(str(tmp_path / "bookie"), write_cache_bytes_max=1 << 20)
    acks = Acks()
    storage = Storage.open(config, on_durable=acks)
    for entry_id in range(ENTRIES):
        storage.add_entry(1, entry_id, KEY, entry_body(1, entry_id, entry_id - 1), token=entry_id)
    storage.add_entry(2, 0, KEY, entry_body(2, 0), token="two")
    acks.wait_for("two")
    storage.checkpoint()
    storage.close()
    flipped = flip_entry_log_records(tmp_path / "bookie", [1], count=5)
    assert flipped is not None and flipped.ledger_id == 1
    assert flipped.entry_ids == tuple(range(ENTRIES - 5, ENTRIES))
    return Storage.open(config, on_durable=Acks()), flipped.entry_ids


def test_a_read_of_a_damaged_record_answers_unknown_and_puts_the_ledger_in_limbo(
    tmp_path: Path,
) -> None:
    storage, damaged = stored_then_damaged(tmp_path)
    try:
        assert not storage.in_limbo(1)
        with pytest.raises(DataUnknownError, match=f"ledger 1 entry {damaged[0]}: damaged"):
            storage.read_entry(1, damaged[0])
        assert storage.in_limbo(1) and storage.is_fenced(1)
        assert storage.list_entries(1) == [e for e in range(ENTRIES) if e != damaged[0]]
        # a batch read stops before the damaged entry, and one starting there is unknown
        assert len(storage.read_entries(1, 40, 100, 1 << 20)) == damaged[0] - 40
        with pytest.raises(DataUnknownError):
            storage.read_entries(1, damaged[1], 10, 1 << 20)
        assert storage.read_entry(2, 0) == entry_body(2, 0)
    finally:
        storage.close()


def test_a_scrub_finds_every_damaged_record_and_a_copy_added_again_repairs_it(
    tmp_path: Path,
) -> None:
    storage, damaged = stored_then_damaged(tmp_path)
    try:
        report = scrub(storage, bytes_per_s=1 << 30)
        assert report.damaged == {1: list(damaged)}
        assert report.ledgers == 2 and report.bytes_read > 0 and not report.stopped
        assert storage.limbo_ledgers() == [1]
        assert storage.list_entries(1) == list(range(ENTRIES - 5))
        for entry_id in damaged:  # what the integrity check does with a replica's copy
            body = entry_body(1, entry_id, entry_id - 1)
            storage.add_entry(1, entry_id, KEY, body, recovery=True)
        assert storage.list_entries(1) == list(range(ENTRIES))
        assert storage.read_entry(1, damaged[0]) == entry_body(1, damaged[0], damaged[0] - 1)
        storage.checkpoint()  # flushed: the new records replace the damaged ones
        assert scrub(storage, bytes_per_s=1 << 30).damaged == {}
        assert storage.read_entry(1, damaged[-1]) == entry_body(1, damaged[-1], damaged[-1] - 1)
    finally:
        storage.close()


@pytest.mark.parametrize("lane", ["single", "batch"])
def test_a_copy_added_again_repairs_a_damaged_entry_through_either_add_call(
    tmp_path: Path, lane: str
) -> None:
    """``add_entry`` and ``add_entries`` are one engine body: a recovery add of a damaged
    entry repairs it through either. The batch call could not take a recovery add (the
    damaged ledger is fenced) and did not clear the damaged mark, so after the flush the
    new copy read as "unknown" and was left out of the entries listed."""
    storage, damaged = stored_then_damaged(tmp_path)
    try:
        assert scrub(storage, bytes_per_s=1 << 30).damaged == {1: list(damaged)}
        bodies = [entry_body(1, entry_id, entry_id - 1) for entry_id in damaged]
        if lane == "single":
            for entry_id, body in zip(damaged, bodies, strict=True):
                storage.add_entry(1, entry_id, KEY, body, recovery=True)
        else:
            batch = AddBatch(recovery=True)
            for entry_id, body in zip(damaged, bodies, strict=True):
                batch.ledger_ids.append(1)
                batch.entry_ids.append(entry_id)
                batch.lacs.append(entry_id - 1)
                batch.master_keys.append(KEY)
                batch.bodies.append(body)
            storage.add_entries(batch)
            assert batch.refused == []
        storage.checkpoint()  # flushed: the index points at the new copies
        assert storage.list_entries(1) == list(range(ENTRIES))
        for entry_id, body in zip(damaged, bodies, strict=True):
            assert storage.read_entry(1, entry_id) == body
        assert scrub(storage, bytes_per_s=1 << 30).damaged == {}
    finally:
        storage.close()


def test_compaction_keeps_a_log_whose_scan_stops_at_a_damaged_record(tmp_path: Path) -> None:
    """Compaction copies a log's live records as a scan finds them; the scan ends at a
    damaged record (its length cannot be trusted). The log was then removed with the live
    records past the damage, never copied: ledger 2's entries were lost (reads failed with
    FileNotFoundError). The log is now kept, and every entry stays readable."""
    config = small_config(
        str(tmp_path / "bookie"), write_cache_bytes_max=1 << 20, compaction_rate_bytes_per_s=0
    )
    acks = Acks()
    storage = Storage.open(config, on_durable=acks)
    for ledger_id, count in ((1, 10), (2, 10), (3, 60)):  # one flush: one log, in this order
        for entry_id in range(count):
            body = entry_body(ledger_id, entry_id, payload=b"p" * 200)
            storage.add_entry(ledger_id, entry_id, KEY, body, token=(ledger_id, entry_id))
    acks.wait_for((3, 59))
    storage.checkpoint()
    storage.close()
    flipped = flip_entry_log_records(tmp_path / "bookie", [1], count=1)  # before ledger 2's
    assert flipped is not None and flipped.entry_ids == (9,)
    acks = Acks()
    storage = Storage.open(config, on_durable=acks)
    try:
        storage.delete_ledger(3, token="gone")
        acks.wait_for("gone")
        result = storage.collect_garbage(minor=True, major=True)
        assert result.logs_compacted == 0 and not result.error
        for entry_id in range(10):
            assert storage.read_entry(2, entry_id) == entry_body(2, entry_id, payload=b"p" * 200)
        assert storage.read_entry(1, 8) == entry_body(1, 8, payload=b"p" * 200)
        with pytest.raises(DataUnknownError):
            storage.read_entry(1, 9)
    finally:
        storage.close()


def test_a_crash_at_any_step_of_that_compaction_loses_nothing_past_the_damage() -> None:
    """The same log on the in-memory filesystem, with a crash at each mutating step of the
    pass: a crash after the copy was committed left the next open to finish the compaction
    (``finish_interrupted``), which removed the source log whole, and with it ledger 2's
    entries past the damaged record. Every entry of ledger 2 now reads back after each."""
    payload = b"p" * 200
    steps = 0
    for crash_at in range(1, 500):
        fs = MemoryFileSystem()
        config = small_config("/data", write_cache_bytes_max=1 << 20, compaction_rate_bytes_per_s=0)
        acks = Acks()
        storage = Storage.open(config, fs, acks)
        for ledger_id, count in ((1, 10), (2, 10), (3, 60)):
            for entry_id in range(count):
                body = entry_body(ledger_id, entry_id, payload=payload)
                storage.add_entry(ledger_id, entry_id, KEY, body, token=(ledger_id, entry_id))
        acks.wait_for((3, 59))
        storage.checkpoint()
        storage.delete_ledger(3, token="gone")
        acks.wait_for("gone")
        location = storage._engine.ledgers[1].locations.get(9)
        path = storage._ledger_dirs.log_path(location >> 32)
        at = (location & 0xFFFFFFFF) + 8 + 60  # a payload byte of ledger 1's entry 9
        fs.corrupt(path, at, bytes([fs.read_file(path)[at] ^ 0x10]))
        fs.schedule_crash(crash_at)
        try:
            storage.collect_garbage(minor=True, major=True)
        except OSError:
            pass
        except Exception as exc:  # a crash seen through a wrapper
            assert fs.crashed, exc
        if not fs.crashed:
            fs.cancel_crash()
            storage.close()
            steps = crash_at
            break
        storage.abort()
        reopened = Storage.open(config, fs.restart())
        for entry_id in range(10):
            assert reopened.read_entry(2, entry_id) == entry_body(2, entry_id, payload=payload)
        reopened.close()
    assert steps > 3


def test_the_verify_nemesis_flips_another_ledger_when_the_bookie_holds_no_recent_one(
    tmp_path: Path,
) -> None:
    """``verify``'s ``corrupt-entry-log`` asks for the workload's recent ledgers; a bookie
    that holds none of them (left out of their ensembles) has the newest other ledger it
    holds flipped instead (a CI run flipped nothing and failed on it). Asked for those only,
    nothing is flipped."""
    config = small_config(str(tmp_path / "bookie"), write_cache_bytes_max=1 << 20)
    acks = Acks()
    storage = Storage.open(config, on_durable=acks)
    for ledger_id in (1, 2):
        for entry_id in range(3):
            storage.add_entry(ledger_id, entry_id, KEY, entry_body(ledger_id, entry_id),
                              token=(ledger_id, entry_id))  # fmt: skip
    acks.wait_for((2, 2))
    storage.checkpoint()
    storage.close()
    assert flip_entry_log_records(tmp_path / "bookie", [7, 9], count=1) is None
    flipped = flip_entry_log_records(tmp_path / "bookie", [7, 9], count=1, any_ledger=True)
    assert flipped is not None and (flipped.ledger_id, flipped.entry_ids) == (2, (2,))
    storage = Storage.open(config, on_durable=Acks())
    try:
        with pytest.raises(DataUnknownError, match="ledger 2 entry 2: damaged"):
            storage.read_entry(2, 2)
        assert storage.read_entry(1, 2) == entry_body(1, 2)
    finally:
        storage.close()
