"""The Storage API: keys, fencing, explicit LAC, reads, delete, checkpoint and restart."""

from __future__ import annotations

from dataclasses import replace

import pytest
from storage_helpers import KEY, OTHER_KEY, Acks, entry_body, lac_body, open_storage, small_config

from bkeeper.common.errors import (
    BadRequestError,
    ConfigError,
    LedgerFencedError,
    NoSuchEntryError,
    NoSuchLedgerError,
    UnauthorizedAccessError,
)
from bkeeper.storage import MemoryFileSystem, Storage, StorageConfig


@pytest.fixture
def fs() -> MemoryFileSystem:
    return MemoryFileSystem()


def _restart(storage: Storage, fs: MemoryFileSystem) -> tuple[Storage, Acks]:
    storage.close()
    return open_storage(fs, storage.config)


def test_config_is_validated_naming_the_field() -> None:
    with pytest.raises(ConfigError, match="write_cache_bytes_max"):
        StorageConfig(data_dir="/d", write_cache_bytes_max=0)
    with pytest.raises(ConfigError, match="journal_max_group_wait_ms"):
        StorageConfig(data_dir="/d", journal_max_group_wait_ms=-1)
    with pytest.raises(ConfigError, match="entry_log_bytes_max"):
        StorageConfig(data_dir="/d", entry_log_bytes_max=1 << 33)
    with pytest.raises(ConfigError, match="data_dir"):
        StorageConfig(data_dir="")
    with pytest.raises(ConfigError, match="journal_skip_corrupt_records"):
        StorageConfig(data_dir="/d", journal_skip_corrupt_records=1)  # type: ignore[arg-type]


def test_entries_are_readable_at_once_and_after_restart(fs: MemoryFileSystem) -> None:
    storage, acks = open_storage(fs)
    for entry_id in range(5):
        storage.add_entry(
            3, entry_id, KEY, memoryview(entry_body(3, entry_id, entry_id - 1)), token=entry_id
        )
    assert storage.read_entry(3, 2) == entry_body(3, 2, 1)
    assert storage.read_entry(3, -1) == entry_body(3, 4, 3)
    assert storage.last_entry_id(3) == 4 and storage.last_add_confirmed(3) == 3
    acks.wait_for(4)
    storage, _ = _restart(storage, fs)
    assert storage.list_entries(3) == [0, 1, 2, 3, 4]
    assert storage.read_entry(3, 4) == entry_body(3, 4, 3)
    assert storage.last_add_confirmed(3) == 3
    storage.close()


def test_missing_ledgers_and_entries(fs: MemoryFileSystem) -> None:
    storage, _ = open_storage(fs)
    with pytest.raises(NoSuchLedgerError):
        storage.read_entry(1, 0)
    with pytest.raises(NoSuchLedgerError):
        storage.last_entry_id(1)
    assert storage.last_add_confirmed(1) == -1 and not storage.ledger_exists(1)
    storage.add_entry(1, 1, KEY, entry_body(1, 1))
    with pytest.raises(NoSuchEntryError):
        storage.read_entry(1, 0)
    storage.fence(2, KEY)
    with pytest.raises(NoSuchEntryError):
        storage.read_entry(2, -1)
    storage.close()


def test_body_must_name_the_ledger_and_entry(fs: MemoryFileSystem) -> None:
    storage, _ = open_storage(fs)
    with pytest.raises(BadRequestError):
        storage.add_entry(1, 2, KEY, entry_body(1, 3))
    with pytest.raises(BadRequestError):
        storage.add_entry(1, 0, KEY, b"short")
    with pytest.raises(BadRequestError):
        storage.set_explicit_lac(1, KEY, lac_body(2, 5))
    storage.close()


def test_master_key_first_one_wins_and_persists(fs: MemoryFileSystem) -> None:
    storage, acks = open_storage(fs)
    storage.add_entry(1, 0, KEY, entry_body(1, 0), token=0)
    with pytest.raises(UnauthorizedAccessError):
        storage.add_entry(1, 1, OTHER_KEY, entry_body(1, 1))
    with pytest.raises(UnauthorizedAccessError):
        storage.fence(1, OTHER_KEY)
    with pytest.raises(UnauthorizedAccessError):
        storage.set_explicit_lac(1, OTHER_KEY, lac_body(1, 0))
    acks.wait_for(0)
    after = fs.crash()
    storage.abort()
    storage, _ = open_storage(after)
    with pytest.raises(UnauthorizedAccessError):
        storage.add_entry(1, 1, OTHER_KEY, entry_body(1, 1))
    storage.add_entry(1, 1, KEY, entry_body(1, 1))
    storage.close()


def test_fencing_rejects_normal_adds_and_survives_restart(fs: MemoryFileSystem) -> None:
    storage, acks = open_storage(fs)
    storage.add_entry(1, 0, KEY, entry_body(1, 0))
    storage.fence(1, KEY, token="fenced")
    assert storage.is_fenced(1)
    with pytest.raises(LedgerFencedError):
        storage.add_entry(1, 1, KEY, entry_body(1, 1))
    storage.add_entry(1, 1, KEY, entry_body(1, 1), recovery=True, token="recovered")
    acks.wait_for("recovered")
    assert acks.tokens.index("fenced") < acks.tokens.index("recovered")
    after = fs.crash()
    storage.abort()
    storage, _ = open_storage(after)
    assert storage.is_fenced(1)
    with pytest.raises(LedgerFencedError):
        storage.add_entry(1, 2, KEY, entry_body(1, 2))
    storage.checkpoint()
    storage, _ = _restart(storage, after)
    assert storage.is_fenced(1) and storage.list_entries(1) == [0, 1]
    storage.close()


def test_fence_of_an_unknown_ledger_creates_it_fenced(fs: MemoryFileSystem) -> None:
    storage, acks = open_storage(fs)
    storage.fence(9, KEY, token="f")
    acks.wait_for("f")
    assert storage.ledger_exists(9) and storage.is_fenced(9)
    assert storage.list_entries(9) == []
    after = fs.crash()
    storage.abort()
    storage, _ = open_storage(after)
    assert storage.is_fenced(9)
    with pytest.raises(UnauthorizedAccessError):
        storage.fence(9, OTHER_KEY)
    storage.close()


def test_explicit_lac_is_kept_and_persisted(fs: MemoryFileSystem) -> None:
    storage, acks = open_storage(fs)
    storage.add_entry(1, 0, KEY, entry_body(1, 0, -1))
    assert storage.explicit_lac(1) is None
    storage.set_explicit_lac(1, KEY, lac_body(1, 0), token="lac")
    assert storage.explicit_lac(1) == lac_body(1, 0)
    assert storage.last_add_confirmed(1) == 0
    acks.wait_for("lac")
    after = fs.crash()
    storage.abort()
    storage, _ = open_storage(after)
    assert storage.explicit_lac(1) == lac_body(1, 0)
    storage.checkpoint()
    storage, _ = _restart(storage, after)
    assert storage.explicit_lac(1) == lac_body(1, 0) and storage.last_add_confirmed(1) == 0
    storage.close()


def test_deleted_ledgers_stay_deleted(fs: MemoryFileSystem) -> None:
    storage, acks = open_storage(fs)
    for ledger_id in (1, 2):
        for entry_id in range(40):
            storage.add_entry(
                ledger_id, entry_id, KEY, entry_body(ledger_id, entry_id, payload=b"d" * 300)
            )
    storage.checkpoint()  # ledger 1 is in the index and the entry logs now
    storage.delete_ledger(1, token="deleted")
    storage.delete_ledger(77)
    assert not storage.ledger_exists(1)
    with pytest.raises(NoSuchLedgerError):
        storage.read_entry(1, 0)
    acks.wait_for("deleted")
    after = fs.crash()
    storage.abort()
    storage, _ = open_storage(after)
    assert not storage.ledger_exists(1) and storage.ledger_ids() == [2]
    storage.checkpoint()
    storage, _ = _restart(storage, after)
    assert not storage.ledger_exists(1) and len(storage.list_entries(2)) == 40
    storage.close()


def test_reads_come_from_entry_logs_after_flush_and_restart(fs: MemoryFileSystem) -> None:
    storage, _ = open_storage(fs)
    bodies = {
        e: entry_body(5, e, e - 1, payload=bytes([e % 256]) * (100 + 37 * e)) for e in range(120)
    }
    for entry_id, body in bodies.items():
        if entry_id % 4 == 0:
            storage.checkpoint()  # the write cache is small: keep it from filling up
        storage.add_entry(5, entry_id, KEY, body)
    storage.checkpoint()
    assert storage.read_entry_nowait(5, 0) is None  # evicted from the small read cache
    assert storage.read_entry(5, 0) == bodies[0]
    storage, _ = _restart(storage, fs)
    assert all(storage.read_entry(5, e) == body for e, body in bodies.items())
    assert storage.stats().write_cache_bytes == 0
    logs = [n for n in fs.list_dir("/data/current/ledgers") if n.endswith(".log")]
    assert len(logs) > 1  # entry logs rolled by size
    storage.close()


def test_read_entries_stops_at_gaps_and_limits(fs: MemoryFileSystem) -> None:
    storage, _ = open_storage(fs)
    for entry_id in (0, 1, 2, 3, 5):
        storage.add_entry(1, entry_id, KEY, entry_body(1, entry_id, payload=b"r" * 68))
    size = len(entry_body(1, 0, payload=b"r" * 68))
    assert len(storage.read_entries(1, 0, 10, 10_000)) == 4
    assert len(storage.read_entries(1, 0, 2, 10_000)) == 2
    assert len(storage.read_entries(1, 0, 10, 2 * size)) == 2
    assert len(storage.read_entries(1, 0, 10, 1)) == 1
    with pytest.raises(NoSuchEntryError):
        storage.read_entries(1, 4, 10, 10_000)
    storage.close()


def test_checkpoint_then_more_adds_then_crash(fs: MemoryFileSystem) -> None:
    storage, acks = open_storage(fs)
    for entry_id in range(30):
        storage.add_entry(1, entry_id, KEY, entry_body(1, entry_id, entry_id - 1), token=entry_id)
    storage.checkpoint()
    for entry_id in range(30, 60):
        storage.add_entry(1, entry_id, KEY, entry_body(1, entry_id, entry_id - 1), token=entry_id)
    acks.wait_for(59)
    after = fs.crash()
    storage.abort()
    storage, _ = open_storage(after)
    assert storage.list_entries(1) == list(range(60))
    assert storage.read_entry(1, -1) == entry_body(1, 59, 58)
    assert storage.last_add_confirmed(1) == 58
    storage.close()


def test_force_ledger_and_delete_tokens(fs: MemoryFileSystem) -> None:
    storage, acks = open_storage(fs)
    storage.add_entry(1, 0, KEY, entry_body(1, 0), token="add")
    storage.force_ledger(1, token="force")
    acks.wait_for("force")
    assert acks.tokens == ["add", "force"]
    storage.close()


def test_index_is_rewritten_when_it_has_grown(fs: MemoryFileSystem) -> None:
    config = replace(small_config(), index_compaction_bytes_min=1)
    storage, _ = open_storage(fs, config)
    for ledger_id in range(1, 6):
        storage.add_entry(ledger_id, 0, KEY, entry_body(ledger_id, 0))
        storage.checkpoint()
        storage.delete_ledger(ledger_id)
    storage.add_entry(9, 0, KEY, entry_body(9, 0))
    storage.checkpoint()
    storage, _ = _restart(storage, fs)
    names = [n for n in fs.list_dir("/data/current/ledgers") if n.startswith("index-")]
    assert len(names) == 1 and names[0] != "index-0000000000000001.idx"
    assert storage.ledger_ids() == [9]
    storage.close()


def test_a_failed_checkpoint_loses_nothing(fs: MemoryFileSystem) -> None:
    storage, acks = open_storage(fs)
    storage.add_entry(1, 0, KEY, entry_body(1, 0), token=0)
    storage.fence(1, KEY, token="fence")
    storage.set_explicit_lac(1, KEY, lac_body(1, 0), token="lac")
    storage.delete_ledger(2)
    acks.wait_for("lac")
    fs.fail_syncs(OSError(5, "index disk hiccup"), path_contains="/index-")
    with pytest.raises(OSError):
        storage.checkpoint()
    fs.fail_syncs(None)
    storage.add_entry(1, 1, KEY, entry_body(1, 1), recovery=True, token=1)
    acks.wait_for(1)
    storage.checkpoint()  # the mark moves past the fence: the index must have it now
    after = fs.crash()
    storage.abort()
    storage, _ = open_storage(after)
    assert storage.is_fenced(1) and storage.explicit_lac(1) == lac_body(1, 0)
    assert storage.list_entries(1) == [0, 1]
    storage.close()


def test_old_journal_files_are_cut_down_then_removed(fs: MemoryFileSystem) -> None:
    config = replace(
        small_config(),
        journal_file_bytes_max=4096,
        journal_remove_step_bytes=512,
        journal_remove_pause_ms=0,
    )
    storage, acks = open_storage(fs, config)
    payload = b"p" * 300
    for entry_id in range(40):
        body = entry_body(1, entry_id, entry_id - 1, payload)
        storage.add_entry(1, entry_id, KEY, body, token=entry_id)
        acks.wait_for(entry_id)  # one group each, so the journal rolls every few entries
    journals = fs.list_dir("/data/current/journal")
    assert len(journals) > 3
    storage.checkpoint()
    left = fs.list_dir("/data/current/journal")
    assert len(left) == 1 and left[0] == max(journals), "every file before the mark is gone"
    after = fs.crash()
    storage.abort()
    storage, _ = open_storage(after, config)
    assert storage.list_entries(1) == list(range(40))
    assert storage.read_entry(1, 39) == entry_body(1, 39, 38, payload)
    storage.close()


def test_journal_removal_settings_are_validated() -> None:
    with pytest.raises(ConfigError, match="journal_remove_pause_ms"):
        replace(small_config(), journal_remove_pause_ms=-1)
    with pytest.raises(ConfigError, match="journal_remove_step_bytes"):
        replace(small_config(), journal_remove_step_bytes=0)
