"""Helpers for storage tests: entry bodies, an acknowledgement recorder, small configs."""

from __future__ import annotations

import errno
import os
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import replace

from bkeeper.storage import FileSystem, Storage, StorageConfig

KEY = b"k" * 20
OTHER_KEY = b"o" * 20
_HEAD = struct.Struct(">qqqq")
DATA_DIRS = ("/data/current/journal", "/data/current/ledgers")


def entry_body(ledger_id: int, entry_id: int, lac: int = -1, payload: bytes = b"") -> bytes:
    """An entry body as a client sends it (no digest: the engine treats it as opaque)."""
    payload = payload or f"entry {ledger_id}/{entry_id}".encode()
    return _HEAD.pack(ledger_id, entry_id, lac, len(payload)) + payload


def lac_body(ledger_id: int, lac: int) -> bytes:
    return struct.pack(">qq", ledger_id, lac) + b"digest"


def small_config(data_dir: str = "/data", **overrides: object) -> StorageConfig:
    """Limits small enough that a few hundred entries flush, roll journals and entry logs."""
    config = StorageConfig(
        data_dir=data_dir,
        journal_max_group_wait_ms=0.0,
        journal_file_bytes_max=16 * 1024,
        write_cache_bytes_max=32 * 1024,
        read_cache_bytes_max=8 * 1024,
        entry_log_bytes_max=24 * 1024,
    )
    return replace(config, **overrides)  # type: ignore[arg-type]


class Acks:
    """Records ``on_durable`` calls (from the journal thread) and lets a test wait for them."""

    def __init__(self) -> None:
        self.tokens: list[object] = []
        self.errors: list[tuple[list[object], BaseException]] = []
        self.groups: list[list[object]] = []
        self._cond = threading.Condition()

    def __call__(self, tokens: list[object], error: BaseException | None) -> None:
        with self._cond:
            if error is None:
                self.tokens.extend(tokens)
                self.groups.append(list(tokens))
            else:
                self.errors.append((list(tokens), error))
            self._cond.notify_all()

    def wait_for(self, token: object, timeout_s: float = 5.0) -> None:
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while token not in self.tokens:
                remaining = deadline - time.monotonic()
                assert remaining > 0, f"token {token!r} not acknowledged"
                self._cond.wait(remaining)

    def wait_count(self, count: int, timeout_s: float = 5.0) -> None:
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while len(self.tokens) + sum(len(t) for t, _ in self.errors) < count:
                remaining = deadline - time.monotonic()
                assert remaining > 0, f"only {len(self.tokens)} of {count} acknowledged"
                self._cond.wait(remaining)


def open_storage(fs: FileSystem, config: StorageConfig | None = None) -> tuple[Storage, Acks]:
    acks = Acks()
    return Storage.open(config or small_config(), fs, acks), acks


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    """Wait for ``condition`` (set by another thread) to hold, checking every millisecond."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.001)


def fill(fs: FileSystem, path: str, fraction: float | None = None) -> None:
    """Append to ``path`` until ``fraction`` of its filesystem is in use, or (None) it is
    full."""
    handle = fs.open_append(path)
    directory = os.path.dirname(path)
    total, free = fs.disk_usage(directory)
    target_free = 0 if fraction is None else int(total * (1.0 - fraction))
    try:
        while free > target_free:
            handle.write(b"\0" * min(64 * 1024, free - target_free))
            total, free = fs.disk_usage(directory)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc
    finally:
        handle.close()


def listing(fs: FileSystem, directories: tuple[str, ...] = DATA_DIRS) -> dict[str, int]:
    """Every file under the engine's directories with its size."""
    return {f"{d}/{name}": fs.size(f"{d}/{name}") for d in directories for name in fs.list_dir(d)}
