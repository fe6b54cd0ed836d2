"""The real filesystem really syncs where the durability contract says.

Kill -9 tests cannot catch a missing fdatasync: written data survives SIGKILL in the page
cache. So this test records the system calls the engine makes through ``os`` (open, write,
fdatasync, fsync, rename; the functions of ``os`` are wrapped, not our code) while a real
:class:`Storage` on a temporary directory adds, fences, checkpoints and rolls files, and
checks the order of events:

* every ``on_durable`` callback comes after the journal's last write was fdatasynced;
* every rename is of a file that was synced first, and is followed by an fsync of the
  target's directory;
* every byte written to an entry log or index file is synced before the next checkpoint
  rename (the journal mark must never get ahead of the data it lets go).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from storage_helpers import KEY, Acks, entry_body, lac_body, small_config

from bkeeper.storage import Storage


@dataclass(frozen=True)
class Event:
    kind: str  # write | sync | dirsync | rename | durable
    path: str
    detail: Any = None


class Recorder:
    """Wraps os.open/close/write/fdatasync/fsync/replace; keeps the events under ``root``."""

    def __init__(self, root: str, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root = root
        self.events: list[Event] = []
        self._paths: dict[int, str] = {}
        self._lock = threading.Lock()
        real_open, real_close, real_write = os.open, os.close, os.write
        real_fdatasync, real_fsync, real_replace = os.fdatasync, os.fsync, os.replace

        def opened(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
            fd = real_open(path, flags, *args, **kwargs)
            with self._lock:
                self._paths[fd] = os.fspath(path)
            return fd

        def closed(fd: int) -> None:
            with self._lock:
                self._paths.pop(fd, None)
            real_close(fd)

        def wrote(fd: int, data: Any) -> int:
            written = real_write(fd, data)
            self._add("write", fd, written)
            return written

        def synced(real: Callable[[int], None]) -> Callable[[int], None]:
            def sync(fd: int) -> None:
                real(fd)
                path = self._paths.get(fd, "")
                self._add("dirsync" if os.path.isdir(path) else "sync", fd)

            return sync

        def replaced(source: Any, target: Any) -> None:
            real_replace(source, target)
            self.record(Event("rename", os.fspath(target), os.fspath(source)))

        monkeypatch.setattr(os, "open", opened)
        monkeypatch.setattr(os, "close", closed)
        monkeypatch.setattr(os, "write", wrote)
        monkeypatch.setattr(os, "fdatasync", synced(real_fdatasync))
        monkeypatch.setattr(os, "fsync", synced(real_fsync))
        monkeypatch.setattr(os, "replace", replaced)

    def _add(self, kind: str, fd: int, detail: Any = None) -> None:
        path = self._paths.get(fd, "")
        if path.startswith(self.root):
            self.record(Event(kind, path, detail))

    def record(self, event: Event) -> None:
        with self._lock:
            self.events.append(event)

    def on_durable(self, acks: Acks) -> Callable[[list[object], BaseException | None], None]:
        def callback(tokens: list[object], error: BaseException | None) -> None:
            self.record(Event("durable", "", list(tokens)))
            acks(tokens, error)

        return callback


def _journal(path: str) -> bool:
    return path.endswith(".txn")


def _check_durable_after_journal_sync(events: list[Event]) -> int:
    """Each callback: the journal file last written to before it was synced after that
    write. Returns the number of callbacks checked."""
    checked = 0
    for index, event in enumerate(events):
        if event.kind != "durable":
            continue
        before = events[:index]
        writes = [i for i, e in enumerate(before) if e.kind == "write" and _journal(e.path)]
        assert writes, f"callback {event.detail} before any journal write"
        last = before[writes[-1]]
        assert any(e.kind == "sync" and e.path == last.path for e in before[writes[-1] + 1 :]), (
            f"callback {event.detail} without an fdatasync of {last.path} after its last write"
        )
        checked += 1
    return checked


def _check_renames(events: list[Event]) -> int:
    """Each rename: its source synced before it, the target's directory fsynced after."""
    checked = 0
    for index, event in enumerate(events):
        if event.kind != "rename":
            continue
        source, directory = event.detail, os.path.dirname(event.path)
        before, after = events[:index], events[index + 1 :]
        written = [i for i, e in enumerate(before) if e.kind == "write" and e.path == source]
        if written:
            assert any(e.kind == "sync" and e.path == source for e in before[written[-1] + 1 :]), (
                f"{source} renamed to {event.path} before it was synced"
            )
        assert any(e.kind == "dirsync" and e.path == directory for e in after), (
            f"rename to {event.path} never made durable (no fsync of {directory})"
        )
        checked += 1
    return checked


def _check_data_synced_before_checkpoint(events: list[Event]) -> int:
    """Bytes written to entry logs and index files are synced before the next checkpoint
    (the rename of the checkpoint file) lets the journal go."""
    checked = 0
    unsynced: set[str] = set()
    for event in events:
        if event.kind == "write" and not _journal(event.path) and not event.path.endswith(".tmp"):
            unsynced.add(event.path)
        elif event.kind == "sync":
            unsynced.discard(event.path)
        elif event.kind == "rename" and os.path.basename(event.path) == "checkpoint":
            assert not unsynced, f"checkpoint persisted before {sorted(unsynced)} were synced"
            checked += 1
    return checked


def test_every_acknowledgement_and_checkpoint_follows_a_real_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = str(tmp_path / "bookie")
    recorder = Recorder(root, monkeypatch)
    acks = Acks()
    config = small_config(root, write_cache_bytes_max=64 * 1024)
    storage = Storage.open(config, on_durable=recorder.on_durable(acks))
    try:
        for entry_id in range(300):  # rolls journals and entry logs (small limits)
            body = entry_body(1, entry_id, entry_id - 1, payload=b"d" * 200)
            storage.add_entry(1, entry_id, KEY, body, token=entry_id)
            if entry_id % 100 == 99:
                acks.wait_for(entry_id)
                storage.checkpoint()
        storage.fence(1, KEY, token="fence")
        storage.set_explicit_lac(1, KEY, lac_body(1, 299), token="lac")
        acks.wait_for("lac")
        storage.checkpoint()
    finally:
        storage.close()
    events = list(recorder.events)
    assert sorted(
        t for e in events if e.kind == "durable" for t in e.detail if isinstance(t, int)
    ) == list(range(300))
    assert _check_durable_after_journal_sync(events) >= 2
    assert _check_renames(events) >= 4
    assert _check_data_synced_before_checkpoint(events) >= 4
    assert any(e.kind == "write" and e.path.endswith(".log") for e in events)
    assert len({e.path for e in events if _journal(e.path)}) >= 2  # journal files rolled


def test_the_checks_catch_a_missing_sync() -> None:
    """The checks above are not vacuous: each fails on a history missing its sync."""
    journal, log, checkpoint = "/d/j/0.txn", "/d/l/0.log", "/d/l/checkpoint"
    with pytest.raises(AssertionError, match="without an fdatasync"):
        _check_durable_after_journal_sync([Event("write", journal), Event("durable", "", [1])])
    with pytest.raises(AssertionError, match="before it was synced"):
        _check_renames(
            [Event("write", checkpoint + ".tmp"), Event("rename", checkpoint, checkpoint + ".tmp")]
        )
    with pytest.raises(AssertionError, match="never made durable"):
        _check_renames([Event("rename", checkpoint, checkpoint + ".tmp")])
    with pytest.raises(AssertionError, match="were synced"):
        _check_data_synced_before_checkpoint(
            [Event("write", log), Event("rename", checkpoint, checkpoint + ".tmp")]
        )
