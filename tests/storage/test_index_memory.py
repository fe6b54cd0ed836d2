"""The location index costs memory (and index file bytes) in proportion to the entries
stored, whatever their ids: huge, sparse, descending (a dense array would take 8 MiB for
one entry with id 2^20 on a new ledger, again after every restart)."""

from __future__ import annotations

import gc
import os
import random
import tracemalloc
from pathlib import Path

from storage_helpers import KEY, entry_body

from bkeeper.storage import Storage, StorageConfig

#: Bytes of Python memory the index may spend per entry (a dict slot and two int objects
#: for a scattered id is about 150; a dense slot is 8).
BYTES_PER_ENTRY_MAX = 256
#: Fixed allowance: the read cache (bounded below) and the engine's small objects.
FIXED_BYTES_MAX = 512 * 1024
READ_CACHE_BYTES = 64 * 1024


def _ids() -> dict[int, list[int]]:
    rng = random.Random(11)
    return {
        1: [0, 1 << 20],
        2: [1 << 20],  # the filed case: a new ledger whose first entry id is 2^20
        3: [0, 1 << 40, (1 << 63) - 1],
        4: sorted({rng.randrange(1 << 63) for _ in range(3000)}),
        5: list(range(999, -1, -1)),  # descending
        6: list(range(1000)),  # dense
    }


def _config(tmp_path: Path) -> StorageConfig:
    return StorageConfig(
        data_dir=str(tmp_path / "data"),
        journal_max_group_wait_ms=0.0,
        read_cache_bytes_max=READ_CACHE_BYTES,
    )


def _traced_growth(action: object) -> int:
    gc.collect()
    before = tracemalloc.get_traced_memory()[0]
    action()  # type: ignore[operator]
    gc.collect()
    return tracemalloc.get_traced_memory()[0] - before


def test_index_memory_is_proportional_to_entries_for_any_ids(tmp_path: Path) -> None:
    config = _config(tmp_path)
    ids = _ids()
    count = sum(map(len, ids.values()))
    budget = BYTES_PER_ENTRY_MAX * count + FIXED_BYTES_MAX
    storage = Storage.open(config)
    storage.add_entry(99, 0, KEY, entry_body(99, 0))  # warm up the lazily made objects
    storage.checkpoint()
    tracemalloc.start()
    try:

        def add_all() -> None:
            for ledger_id, entry_ids in ids.items():
                for entry_id in entry_ids:
                    storage.add_entry(ledger_id, entry_id, KEY, entry_body(ledger_id, entry_id))
            storage.checkpoint()  # flushed: every entry is in the location index

        grown = _traced_growth(add_all)
        assert grown < budget, f"{grown} bytes for {count} entries"
        storage.close()
        reopened: list[Storage] = []
        grown = _traced_growth(lambda: reopened.append(Storage.open(config)))
        assert grown < budget, f"{grown} bytes after a restart for {count} entries"
    finally:
        tracemalloc.stop()
    storage = reopened[0]
    try:
        for ledger_id, entry_ids in ids.items():
            assert storage.list_entries(ledger_id) == sorted(entry_ids)
            assert storage.last_entry_id(ledger_id) == max(entry_ids)
            for entry_id in entry_ids[:50]:
                assert storage.read_entry(ledger_id, entry_id) == entry_body(ledger_id, entry_id)
    finally:
        storage.close()
    ledgers_dir = tmp_path / "data" / "current" / "ledgers"
    index_bytes = sum(
        os.path.getsize(ledgers_dir / name)
        for name in os.listdir(ledgers_dir)
        if name.startswith("index-")
    )
    assert index_bytes < 40 * count + 4096
