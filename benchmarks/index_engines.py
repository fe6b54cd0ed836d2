"""Measure candidate location-index engines: put and get rates of (ledger, entry) -> location.

Usage: ``python benchmarks/index_engines.py [--count 1000000] [--ledgers 100]``

Each candidate stores ``count`` locations (``ledgers`` ledgers, entry ids dense from 0, as a
bookie receives them), makes them durable the way it would at a checkpoint, then reads every
one back in random order. Candidates that are not installed are skipped (``pip install lmdb
rocksdict`` to include them). Prints one line per candidate: puts/s, gets/s, bytes on disk.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import struct
import tempfile
import time
from array import array
from collections.abc import Callable

KEY = struct.Struct(">qq")
VALUE = struct.Struct(">Q")
Keys = list[tuple[int, int]]


def _location(ledger_id: int, entry_id: int) -> int:
    return ((ledger_id & 0xFFFF) << 32) | (entry_id * 1100 + 64)


def bench_arrays(keys: Keys, lookups: Keys, directory: str) -> tuple[float, float, int]:
    """bkeeper's own index: per-ledger ``array('Q')`` in memory, written to a file at checkpoint."""
    start = time.perf_counter()
    index: dict[int, array[int]] = {}
    for ledger_id, entry_id in keys:
        locations = index.get(ledger_id)
        if locations is None:
            locations = index[ledger_id] = array("Q")
        if entry_id == len(locations):
            locations.append(_location(ledger_id, entry_id))
    path = os.path.join(directory, "index")
    with open(path, "wb") as f:  # the checkpoint: one record per ledger, then fsync
        for ledger_id, locations in index.items():
            f.write(struct.pack(">qI", ledger_id, len(locations)))
            f.write(locations.tobytes())
        f.flush()
        os.fsync(f.fileno())
    put_s = time.perf_counter() - start
    start = time.perf_counter()
    for ledger_id, entry_id in lookups:
        assert index[ledger_id][entry_id]
    return put_s, time.perf_counter() - start, os.path.getsize(path)


def bench_dict(keys: Keys, lookups: Keys, directory: str) -> tuple[float, float, int]:
    """A plain dict keyed by (ledger, entry): the in-memory upper bound, no persistence."""
    start = time.perf_counter()
    index: dict[tuple[int, int], int] = {}
    for key in keys:
        index[key] = _location(*key)
    put_s = time.perf_counter() - start
    start = time.perf_counter()
    for key in lookups:
        assert index[key]
    return put_s, time.perf_counter() - start, 0


def bench_lmdb(keys: Keys, lookups: Keys, directory: str) -> tuple[float, float, int]:
    import lmdb

    env = lmdb.open(os.path.join(directory, "lmdb"), map_size=1 << 32, sync=True)
    start = time.perf_counter()
    batch = 10_000
    for i in range(0, len(keys), batch):
        with env.begin(write=True) as txn:
            for key in keys[i : i + batch]:
                txn.put(KEY.pack(*key), VALUE.pack(_location(*key)), append=True)
    env.sync(True)
    put_s = time.perf_counter() - start
    start = time.perf_counter()
    with env.begin() as txn:
        for key in lookups:
            assert txn.get(KEY.pack(*key))
    get_s = time.perf_counter() - start
    size = sum(e.stat().st_size for e in os.scandir(os.path.join(directory, "lmdb")))
    env.close()
    return put_s, get_s, size


def bench_rocksdict(keys: Keys, lookups: Keys, directory: str) -> tuple[float, float, int]:
    from rocksdict import Options, Rdict, WriteBatch, WriteOptions

    path = os.path.join(directory, "rocks")
    db = Rdict(path, Options(raw_mode=True))
    options = WriteOptions()
    options.disable_wal = True  # the journal is the WAL; flush() at checkpoint persists
    db.set_write_options(options)
    start = time.perf_counter()
    batch_size = 10_000
    for i in range(0, len(keys), batch_size):
        batch = WriteBatch(raw_mode=True)
        for key in keys[i : i + batch_size]:
            batch.put(KEY.pack(*key), VALUE.pack(_location(*key)))
        db.write(batch)
    db.flush(True)
    put_s = time.perf_counter() - start
    start = time.perf_counter()
    for key in lookups:
        assert db[KEY.pack(*key)]
    get_s = time.perf_counter() - start
    db.close()
    size = sum(
        os.path.getsize(os.path.join(root, name))
        for root, _, names in os.walk(path)
        for name in names
    )
    return put_s, get_s, size


CANDIDATES: dict[str, Callable[[Keys, Keys, str], tuple[float, float, int]]] = {
    "array('Q') per ledger + index file": bench_arrays,
    "dict[(ledger, entry)] (memory only)": bench_dict,
    "lmdb (batched txns, sync)": bench_lmdb,
    "rocksdict (write batches, no WAL, flush)": bench_rocksdict,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--ledgers", type=int, default=100)
    args = parser.parse_args()
    per_ledger = args.count // args.ledgers
    keys = [(ledger, entry) for ledger in range(args.ledgers) for entry in range(per_ledger)]
    lookups = keys[:]
    random.Random(1).shuffle(lookups)
    print(f"{len(keys):,} locations in {args.ledgers} ledgers")
    for name, bench in CANDIDATES.items():
        directory = tempfile.mkdtemp(prefix="bkeeper-index-")
        try:
            put_s, get_s, size = bench(keys, lookups, directory)
        except ImportError as exc:
            print(f"{name:45s} skipped: {exc}")
            continue
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        print(
            f"{name:45s} puts/s {len(keys) / put_s:>12,.0f}   gets/s {len(keys) / get_s:>12,.0f}"
            f"   disk {size / 1e6:7.1f} MB"
        )


if __name__ == "__main__":
    main()
