"""Measure the storage engine alone: acknowledged adds per second and fsyncs per second.

Usage: ``python benchmarks/storage_adds.py [--count 200000] [--entry-size 1024] [--dir /tmp]``

Opens a :class:`~bkeeper.storage.Storage` on the real filesystem in a fresh temporary
directory, makes ``count`` ``add_entry`` calls of ``entry-size``-byte bodies (one ledger)
with a token each, and waits until ``on_durable`` has reported every token. Adds are made
in bursts of ``--burst`` (as an event loop handles a socket read's worth of requests), giving
the other threads the interpreter between bursts. Prints adds/s, journal fsyncs (groups)/s
and the mean group size; ``bench_storage_adds`` returns the same as a dict.
"""

from __future__ import annotations

import argparse
import shutil
import struct
import tempfile
import threading
import time

from bkeeper.common.errors import TooManyRequestsError
from bkeeper.storage import Storage, StorageConfig

_HEAD = struct.Struct(">qqqq")


def bench_storage_adds(
    directory: str, count: int = 200_000, entry_size: int = 1024, burst: int = 64
) -> dict[str, float]:
    """Run the benchmark in a fresh directory under ``directory``; the measurements."""
    data_dir = tempfile.mkdtemp(prefix="bkeeper-bench-", dir=directory)
    durable = 0
    done = threading.Event()

    def on_durable(tokens: list[object], error: BaseException | None) -> None:
        nonlocal durable
        if error is not None:
            raise error
        durable += len(tokens)
        if durable >= count:
            done.set()

    storage = Storage.open(StorageConfig(data_dir=data_dir), on_durable=on_durable)
    try:
        key = b"k" * 20
        payload = b"x" * max(0, entry_size - _HEAD.size)
        bodies = [_HEAD.pack(7, e, e - 1, len(payload)) + payload for e in range(count)]
        groups_before = storage.stats().journal_groups_written
        start = time.perf_counter()
        _add_all(storage, key, bodies, burst)
        done.wait()
        seconds = time.perf_counter() - start
        groups = storage.stats().journal_groups_written - groups_before
    finally:
        storage.close()
        shutil.rmtree(data_dir, ignore_errors=True)
    return {
        "adds": count,
        "seconds": seconds,
        "adds_per_s": count / seconds,
        "fsyncs_per_s": groups / seconds,
        "entries_per_fsync": count / max(groups, 1),
    }


def _add_all(storage: Storage, key: bytes, bodies: list[bytes], burst: int) -> None:
    add = storage.add_entry
    entry_id = 0
    while entry_id < len(bodies):
        end = min(entry_id + burst, len(bodies))
        try:
            while entry_id < end:
                add(7, entry_id, key, bodies[entry_id], token=entry_id)
                entry_id += 1
        except TooManyRequestsError:
            time.sleep(0.0005)
        time.sleep(0)  # an event loop would poll its sockets here


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--entry-size", type=int, default=1024)
    parser.add_argument("--burst", type=int, default=64)
    parser.add_argument("--dir", default=tempfile.gettempdir())
    args = parser.parse_args()
    result = bench_storage_adds(args.dir, args.count, args.entry_size, args.burst)
    print(
        f"{result['adds']:,} adds of {args.entry_size} B in {result['seconds']:.2f} s: "
        f"{result['adds_per_s']:,.0f} adds/s, {result['fsyncs_per_s']:,.0f} fsyncs/s, "
        f"{result['entries_per_fsync']:.0f} entries per fsync"
    )


if __name__ == "__main__":
    main()
