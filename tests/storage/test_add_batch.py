"""``Storage.add_entries``: many entries with one call, the batch its own token."""

from __future__ import annotations

from dataclasses import replace

import pytest
from storage_helpers import KEY, OTHER_KEY, entry_body, open_storage, small_config

from bkeeper.common.errors import (
    BadRequestError,
    LedgerFencedError,
    TooManyRequestsError,
    UnauthorizedAccessError,
)
from bkeeper.storage import AddBatch, MemoryFileSystem


def batch_of(*entries: tuple[int, int], key: bytes = KEY) -> AddBatch:
    batch = AddBatch()
    for ledger_id, entry_id in entries:
        body = entry_body(ledger_id, entry_id, entry_id - 1)
        batch.ledger_ids.append(ledger_id)
        batch.entry_ids.append(entry_id)
        batch.lacs.append(entry_id - 1)
        batch.master_keys.append(key)
        batch.bodies.append(body)
    return batch


def test_a_batch_is_one_token_after_its_records_and_survives_a_crash() -> None:
    fs = MemoryFileSystem()
    storage, acks = open_storage(fs, replace(small_config(), write_cache_bytes_max=1 << 20))
    batch = batch_of(*[(1, e) for e in range(100)], *[(2, e) for e in range(50)])
    storage.add_entries(batch)
    assert batch.refused == []
    assert batch.parts == 1  # one journal: the token follows every record in it
    assert storage.read_entry(1, 99) == entry_body(1, 99, 98)  # readable at once
    acks.wait_for(batch)
    assert [group for group in acks.groups if batch in group] == [[batch]]
    after = fs.crash()
    storage.abort()
    storage, _ = open_storage(after)
    assert storage.list_entries(1) == list(range(100))
    assert storage.list_entries(2) == list(range(50))
    assert storage.last_add_confirmed(1) == 98
    assert storage.read_entry(2, 49) == entry_body(2, 49, 48)
    storage.close()


def test_refused_entries_are_listed_and_the_rest_added() -> None:
    fs = MemoryFileSystem()
    storage, acks = open_storage(fs)
    storage.add_entry(3, 0, KEY, entry_body(3, 0))
    storage.fence(4, KEY)
    batch = batch_of((3, 1), (4, 0), (3, 2))
    batch.master_keys[2] = OTHER_KEY  # ledger 3 has KEY
    batch.entry_ids.append(-1)  # a body naming entry -1
    batch.ledger_ids.append(3)
    batch.lacs.append(-1)
    batch.master_keys.append(KEY)
    batch.bodies.append(entry_body(3, -1))
    storage.add_entries(batch)
    assert [(i, type(e)) for i, e in batch.refused] == [
        (1, LedgerFencedError),
        (2, UnauthorizedAccessError),
        (3, BadRequestError),
    ]
    acks.wait_for(batch)
    assert storage.list_entries(3) == [0, 1]
    storage.close()


def test_nothing_added_means_no_token() -> None:
    fs = MemoryFileSystem()
    storage, acks = open_storage(fs)
    storage.fence(5, KEY, token="fence")
    batch = batch_of((5, 0), (5, 1))
    storage.add_entries(batch)
    assert len(batch.refused) == 2 and batch.parts == 0
    acks.wait_for("fence")
    storage.close()
    assert batch not in acks.tokens


def test_write_cache_and_journal_queue_limits_refuse_the_overflow() -> None:
    fs = MemoryFileSystem()
    config = replace(small_config(), journal_queue_entries_max=4)
    storage, acks = open_storage(fs, config)
    storage.add_entry(6, 0, KEY, entry_body(6, 0), token="first")
    acks.wait_for("first")  # the queue is empty again, the ledger known
    batch = batch_of(*[(6, e) for e in range(1, 7)])
    storage.add_entries(batch)  # the journal takes no group while the batch is added
    assert [i for i, _ in batch.refused] == [4, 5]
    assert all(isinstance(e, TooManyRequestsError) for _, e in batch.refused)
    acks.wait_for(batch)
    assert storage.list_entries(6) == [0, 1, 2, 3, 4]
    storage.close()


@pytest.mark.parametrize("ledgers", [(10, 11), (10, 12)])
def test_several_journals_each_get_the_token(ledgers: tuple[int, int]) -> None:
    fs = MemoryFileSystem()
    config = replace(small_config(), journal_dirs=("/j1", "/j2"))
    storage, acks = open_storage(fs, config)
    first, second = ledgers
    batch = batch_of((first, 0), (second, 0), (first, 1))
    storage.add_entries(batch)
    journals = 2 if (first - second) % 2 else 1
    assert batch.parts == journals
    acks.wait_count(journals)
    assert acks.tokens == [batch] * journals
    after = fs.crash()
    storage.abort()
    storage, _ = open_storage(after, config)
    assert storage.list_entries(first) == [0, 1]
    assert storage.list_entries(second) == [0]
    storage.close()


def test_a_full_write_cache_refuses_the_overflow() -> None:
    fs = MemoryFileSystem()
    config = replace(small_config(), write_cache_bytes_max=1000)
    storage, acks = open_storage(fs, config)
    batch = AddBatch()
    for entry_id in range(5):
        body = entry_body(7, entry_id, payload=b"x" * 268)  # 300 bytes: three fit in 1000
        batch.ledger_ids.append(7)
        batch.entry_ids.append(entry_id)
        batch.lacs.append(-1)
        batch.master_keys.append(KEY)
        batch.bodies.append(body)
    storage.add_entries(batch)
    assert [(i, str(e)) for i, e in batch.refused] == [
        (3, "write cache is full"),
        (4, "write cache is full"),
    ]
    acks.wait_for(batch)
    assert storage.list_entries(7) == [0, 1, 2]
    storage.close()
