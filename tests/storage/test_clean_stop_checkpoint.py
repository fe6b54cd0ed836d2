"""What a crash leaves to replay is bounded by size too: a bookie checkpoints once
``checkpoint_journal_bytes`` were journaled since its last checkpoint, without waiting for
``checkpoint_interval_ms`` (10 s at 76 MB/s left 760 MB to replay after a kill -9)."""

from __future__ import annotations

import asyncio
import struct
import threading
from pathlib import Path

import pytest

from bkeeper.common.errors import ConfigError
from bkeeper.server import Bookie, BookieConfig
from bkeeper.storage import MemoryFileSystem, Storage, StorageConfig

KEY = b"k" * 20
KIB = 1024


def _body(ledger_id: int, entry_id: int) -> bytes:
    payload = b"p" * KIB
    return struct.pack(">qqqq", ledger_id, entry_id, entry_id - 1, len(payload)) + payload


def test_the_storage_says_a_checkpoint_is_due_once_enough_was_journaled() -> None:
    config = StorageConfig(data_dir="/data", checkpoint_journal_bytes=64 * KIB)
    forced = threading.Event()

    def on_durable(tokens: list[object], error: BaseException | None) -> None:
        if "forced" in tokens:
            forced.set()

    storage = Storage.open(config, fs=MemoryFileSystem(), on_durable=on_durable)
    try:
        assert not storage.checkpoint_due
        for entry_id in range(100):  # 100 KiB and more
            storage.add_entry(1, entry_id, KEY, _body(1, entry_id), token=entry_id)
        storage.force_ledger(1, token="forced")
        assert forced.wait(10)
        assert storage.journal_bytes_since_checkpoint > 100 * KIB
        assert storage.checkpoint_due
        storage.checkpoint()
        assert not storage.checkpoint_due and storage.journal_bytes_since_checkpoint == 0
    finally:
        storage.close()
    with pytest.raises(ConfigError, match="checkpoint_journal_bytes"):
        StorageConfig(data_dir="/data", checkpoint_journal_bytes=-1)


async def test_a_bookie_checkpoints_by_size_long_before_its_interval(tmp_path: Path) -> None:
    data_dir = str(tmp_path / "bookie")
    config = BookieConfig(data_dir=data_dir, port=0, checkpoint_interval_ms=3_600_000)
    storage_config = StorageConfig(data_dir=data_dir, checkpoint_journal_bytes=64 * KIB)
    bookie = Bookie(config, storage_config)
    await bookie.start()
    try:
        storage = bookie.storage
        assert storage is not None
        before = storage.stats().checkpoints
        for entry_id in range(100):
            storage.add_entry(1, entry_id, KEY, _body(1, entry_id))
        async with asyncio.timeout(10):  # the hour-long interval would never come
            while storage.stats().checkpoints == before:
                await asyncio.sleep(0.01)
        assert storage.journal_bytes_since_checkpoint < 64 * KIB
    finally:
        await bookie.aclose()
