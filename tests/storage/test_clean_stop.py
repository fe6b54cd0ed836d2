"""A clean stop leaves nothing for the next start to replay or scan, and says so; a crash's
replay is shown as it goes; the journal files an open retires are removed after it returns.

The seconds themselves are measured by ``bkeeper bench restart`` (docs/benchmarks.md): here,
the work an open does is counted (``Storage.open_report``)."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest
from storage_helpers import KEY, Acks, entry_body, small_config

from bkeeper.storage import MemoryFileSystem, OsFileSystem, Storage
from bkeeper.storage.checkpoint_file import read_checkpoint
from bkeeper.storage.dirs import StorageLayout
from bkeeper.storage.filesystem import FileSystem
from bkeeper.storage.journal_replay import ReplayOutcome
from bkeeper.storage.open_report import ReplayProgress

ENTRIES = 300


def _fill(storage: Storage, acks: Acks, ledger_id: int = 1) -> None:
    for entry_id in range(ENTRIES):
        body = entry_body(ledger_id, entry_id, entry_id - 1, b"x" * 200)
        storage.add_entry(ledger_id, entry_id, KEY, body, token=(ledger_id, entry_id))
    acks.wait_for((ledger_id, ENTRIES - 1))


def test_after_a_clean_stop_the_open_replays_nothing_and_scans_no_entry_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = small_config(
        str(tmp_path / "bookie"), entry_log_bytes_max=1 << 20, write_cache_bytes_max=1 << 20
    )
    acks = Acks()
    storage = Storage.open(config, on_durable=acks)
    _fill(storage, acks)  # in the write cache and the journal: no checkpoint yet
    storage.close()
    root = read_checkpoint(OsFileSystem(), StorageLayout.of(config).checkpoint)
    assert root is not None and root.clean

    with caplog.at_level(logging.INFO, logger="bkeeper.storage"):
        storage = Storage.open(config, on_durable=Acks())
    try:
        report = storage.open_report
        assert report is not None and report.clean_stop
        assert (report.journal_bytes, report.journal_records) == (0, 0)
        assert report.entry_logs >= 1 and report.entry_logs_scanned == 0
        assert report.index_entries == ENTRIES
        assert "the last stop was clean: no journal to replay" in caplog.text
        assert "replaying journal" not in caplog.text
        assert storage.read_entry(1, ENTRIES - 1) == entry_body(
            1, ENTRIES - 1, ENTRIES - 2, b"x" * 200
        )
        # the open's checkpoint is not a clean one: a crash now is not taken for a clean stop
        root = read_checkpoint(OsFileSystem(), StorageLayout.of(config).checkpoint)
        assert root is not None and not root.clean
    finally:
        storage.close()


def test_after_a_crash_the_open_replays_with_progress_and_scans_the_open_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = small_config(
        str(tmp_path / "bookie"),
        entry_log_bytes_max=1 << 20,
        journal_file_bytes_max=1 << 20,
        write_cache_bytes_max=1 << 20,
    )
    acks = Acks()
    storage = Storage.open(config, on_durable=acks)
    _fill(storage, acks)
    storage._flusher.flush()  # an entry log without its ledgers map yet
    storage.abort()  # kill -9

    with caplog.at_level(logging.INFO, logger="bkeeper.storage"):
        storage = Storage.open(config, on_durable=Acks())
    try:
        report = storage.open_report
        assert report is not None and not report.clean_stop
        assert report.journal_records >= ENTRIES and report.journal_bytes > ENTRIES * 200
        assert report.entry_logs_scanned == 1 and report.entry_log_bytes_scanned > 0
        assert "replaying journal: " in caplog.text
        assert f"replayed journal: {report.journal_records} records" in caplog.text
        assert storage.list_entries(1) == list(range(ENTRIES))
    finally:
        storage.close()


def test_replay_progress_says_how_far_it_is_at_most_every_interval() -> None:
    now = [0.0]
    lines: list[str] = []
    progress = ReplayProgress(lambda: now[0], interval_s=2.0, emit=lines.append)
    outcome = ReplayOutcome(bytes_total=340_000_000)
    progress(outcome)  # the start: what there is to read
    for done, at in ((50_000_000, 1.0), (120_000_000, 2.5), (130_000_000, 3.0), (340_000_000, 5.0)):
        now[0] = at
        outcome.bytes, outcome.records = done, done // 1000
        progress(outcome)
    assert lines == [
        "replaying journal: 340 MB from the checkpoint marks",
        "replaying journal: 35% (120 MB of 340 MB, 120,000 records)",
        "replaying journal: 100% (340 MB of 340 MB, 340,000 records)",
    ]
    quiet: list[str] = []
    ReplayProgress(lambda: 0.0, emit=quiet.append)(ReplayOutcome())  # nothing to replay
    assert quiet == []


class _HeldRemovals(MemoryFileSystem):
    """Removing a journal file waits until ``release`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.holding = False

    def remove(self, path: str) -> None:
        if self.holding and path.endswith(".txn"):
            self.release.wait()
        super().remove(path)

    def truncate(self, path: str, size: int) -> None:
        if self.holding and path.endswith(".txn"):
            self.release.wait()
        super().truncate(path, size)


def test_the_journal_files_an_open_retires_are_removed_after_it_returns() -> None:
    """Removing them (gently, hundreds of MB) held the bookie's start back."""
    fs = _HeldRemovals()
    config = small_config("/data", write_cache_bytes_max=1 << 20)
    acks = Acks()
    storage = Storage.open(config, fs=fs, on_durable=acks)
    _fill(storage, acks)
    storage.close()
    journal_dir = StorageLayout.of(config).journal_dirs[0]
    assert fs.list_dir(journal_dir)  # the last stop's journal files, all before the marks

    fs.holding = True
    opened: list[Storage] = []
    opening = threading.Thread(target=lambda: opened.append(_open(config, fs)))
    opening.start()
    opening.join(10.0)  # before: the open waited for the removal, held until released
    returned_first = not opening.is_alive()
    fs.release.set()
    opening.join()
    assert returned_first and opened
    storage = opened[0]
    storage.checkpoint()  # after the removal (it holds the removal lock meanwhile)
    storage.close()


def _open(config: object, fs: FileSystem) -> Storage:
    return Storage.open(config, fs=fs, on_durable=Acks())  # type: ignore[arg-type]


def test_a_checkpoint_ends_a_large_entry_log_so_a_crash_leaves_only_a_small_one_to_scan(
    tmp_path: Path,
) -> None:
    """The entry log being written has no ledgers map until it ends; after a crash the open
    reads it whole (up to ``entry_log_bytes_max``, 1 GiB: seconds)."""
    config = small_config(
        str(tmp_path / "bookie"),
        entry_log_bytes_max=1 << 20,
        entry_log_checkpoint_roll_bytes=32 * 1024,
        journal_file_bytes_max=1 << 20,
        write_cache_bytes_max=1 << 20,
    )
    acks = Acks()
    storage = Storage.open(config, on_durable=acks)
    _fill(storage, acks, ledger_id=1)  # some 70 KB
    storage.checkpoint()  # the log is over 32 KiB: ended, with its map
    storage.add_entry(2, 0, KEY, entry_body(2, 0), token="last")
    acks.wait_for("last")
    storage._flusher.flush()  # a new log, with one entry and no map
    storage.abort()

    storage = Storage.open(config, on_durable=Acks())
    try:
        report = storage.open_report
        assert report is not None and report.entry_logs == 2
        assert report.entry_logs_scanned == 1 and report.entry_log_bytes_scanned < 1024
        assert storage.list_entries(1) == list(range(ENTRIES))
    finally:
        storage.close()


def test_records_after_a_clean_stops_checkpoint_are_replayed_and_not_called_clean(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A run whose first checkpoint failed (a full disk) leaves the last clean stop's
    checkpoint in place while it journals; after its crash those records are replayed, and
    the open does not say the last stop was clean."""
    config = small_config(
        str(tmp_path / "bookie"), entry_log_bytes_max=1 << 20, write_cache_bytes_max=1 << 20
    )
    checkpoint = Path(StorageLayout.of(config).checkpoint)
    acks = Acks()
    storage = Storage.open(config, on_durable=acks)
    _fill(storage, acks, ledger_id=1)
    storage.close()
    clean_root = checkpoint.read_bytes()
    journal_dir = Path(StorageLayout.of(config).journal_dirs[0])
    kept = {path.name: path.read_bytes() for path in journal_dir.iterdir()}

    acks = Acks()
    storage = Storage.open(config, on_durable=acks)
    _fill(storage, acks, ledger_id=2)
    storage.abort()
    checkpoint.write_bytes(clean_root)  # as if this run's checkpoints had all failed,
    for name, data in kept.items():  # so none retired the last run's journal files either
        if not (journal_dir / name).exists():
            (journal_dir / name).write_bytes(data)

    with caplog.at_level(logging.INFO, logger="bkeeper.storage"):
        storage = Storage.open(config, on_durable=Acks())
    try:
        report = storage.open_report
        assert report is not None and not report.clean_stop
        assert report.journal_records >= ENTRIES
        assert "the last stop was clean" not in caplog.text
        assert storage.list_entries(2) == list(range(ENTRIES))
        assert storage.list_entries(1) == list(range(ENTRIES))
    finally:
        storage.close()
