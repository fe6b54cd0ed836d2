"""Smoke test on the real filesystem: the same engine, through os, in a temporary directory."""

from __future__ import annotations

from pathlib import Path

from storage_helpers import KEY, Acks, entry_body, lac_body, small_config

from bkeeper.storage import Storage


def test_real_filesystem_round_trip(tmp_path: Path) -> None:
    config = small_config(str(tmp_path / "bookie"), write_cache_bytes_max=1 << 20)
    acks = Acks()
    storage = Storage.open(config, on_durable=acks)
    for entry_id in range(200):
        body = entry_body(1, entry_id, entry_id - 1, payload=b"r" * 300)
        storage.add_entry(1, entry_id, KEY, body, token=entry_id)
    storage.fence(1, KEY, token="fence")
    storage.set_explicit_lac(1, KEY, lac_body(1, 199), token="lac")
    storage.add_entry(2, 0, KEY, entry_body(2, 0), token="other")
    storage.delete_ledger(2, token="delete")
    acks.wait_for("delete")
    storage.checkpoint()
    storage.add_entry(1, 200, KEY, entry_body(1, 200, 199), recovery=True, token=200)
    acks.wait_for(200)
    storage.abort()  # no close: the last add is only in the journal

    storage = Storage.open(config)
    assert storage.replay_outcome.records >= 1
    assert storage.list_entries(1) == list(range(201))
    assert storage.read_entry(1, 17) == entry_body(1, 17, 16, payload=b"r" * 300)
    assert storage.read_entry(1, -1) == entry_body(1, 200, 199)
    assert storage.is_fenced(1) and storage.explicit_lac(1) == lac_body(1, 199)
    assert not storage.ledger_exists(2)
    total, free = storage.disk_usage()
    assert total >= free > 0
    storage.close()
    journals = list((tmp_path / "bookie" / "current" / "journal").iterdir())
    # Everything before the last checkpoint is gone, and the second run wrote nothing, so it
    # created no journal file.
    assert journals == []
