"""``bkeeper bench storage``: the storage engine alone, acknowledged adds/s and fsyncs/s.

Opens a :class:`~bkeeper.storage.Storage` on the real filesystem in a fresh temporary
directory, makes ``count`` ``add_entry`` calls of ``entry_bytes``-byte bodies (one ledger)
with a token each, and waits until ``on_durable`` has reported every token. Adds are made in
bursts of ``burst`` (as an event loop handles a socket read's worth of requests), giving the
other threads the interpreter between bursts.
"""

from __future__ import annotations

import shutil
import struct
import tempfile
import threading
import time
from collections.abc import Callable

from bkeeper.common.errors import BKeeperError, TooManyRequestsError
from bkeeper.storage import Storage, StorageConfig
from bkeeper.testing.benchmarks.results import BenchResult

__all__ = ["bench_storage_adds"]

_HEAD = struct.Struct(">qqqq")
_LEDGER_ID = 7
#: Adds between two calls of the ``progress`` callback.
PROGRESS_EVERY_ADDS = 8192
#: How long to wait for the last adds to be reported durable before giving up.
DURABLE_WAIT_S = 300.0


def bench_storage_adds(
    directory: str,
    count: int = 200_000,
    entry_bytes: int = 1024,
    burst: int = 64,
    progress: Callable[[int], None] | None = None,
) -> BenchResult:
    """Run the benchmark in a fresh directory under ``directory`` (removed afterwards);
    ``progress`` is told how many adds were made so far, every few thousand."""
    durable = 0
    errors: list[BaseException] = []
    done = threading.Event()

    def on_durable(tokens: list[object], error: BaseException | None) -> None:
        nonlocal durable
        if error is not None:
            errors.append(error)
            done.set()
            return
        durable += len(tokens)
        if durable >= count:
            done.set()

    payload = b"x" * max(0, entry_bytes - _HEAD.size)
    bodies = [_HEAD.pack(_LEDGER_ID, e, e - 1, len(payload)) + payload for e in range(count)]
    size = _HEAD.size + len(payload)
    data_dir = tempfile.mkdtemp(prefix="bkeeper-bench-", dir=directory)
    try:
        storage = Storage.open(StorageConfig(data_dir=data_dir), on_durable=on_durable)
        try:
            groups_before = storage.stats().journal_groups_written
            start = time.perf_counter()
            _add_all(storage, b"k" * 20, bodies, burst, progress)
            if not done.wait(DURABLE_WAIT_S):
                raise BKeeperError(f"{count - durable} adds not durable after {DURABLE_WAIT_S} s")
            seconds = time.perf_counter() - start
            groups = storage.stats().journal_groups_written - groups_before
        finally:
            storage.close()
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    if errors:
        raise BKeeperError(f"storage failed an add: {errors[0]}") from errors[0]
    return BenchResult(
        f"storage adds, {size} B, bursts of {burst}",
        count,
        seconds,
        count * size,
        extra={
            "fsyncs/s": f"{groups / seconds:,.0f}",
            "entries/fsync": f"{count / max(groups, 1):,.0f}",
        },
    )


def _add_all(
    storage: Storage,
    key: bytes,
    bodies: list[bytes],
    burst: int,
    progress: Callable[[int], None] | None,
) -> None:
    add = storage.add_entry
    entry_id = 0
    reported = 0
    while entry_id < len(bodies):
        end = min(entry_id + burst, len(bodies))
        try:
            while entry_id < end:
                add(_LEDGER_ID, entry_id, key, bodies[entry_id], token=entry_id)
                entry_id += 1
        except TooManyRequestsError:
            time.sleep(0.0005)
        time.sleep(0)  # an event loop would poll its sockets here
        if progress is not None and entry_id - reported >= PROGRESS_EVERY_ADDS:
            progress(entry_id)
            reported = entry_id
    if progress is not None:
        progress(entry_id)
