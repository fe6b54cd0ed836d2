"""``bkeeper bench index``: candidate location-index engines, put and get rates of
(ledger, entry) -> location.

Each candidate stores ``count`` locations (``ledgers`` ledgers; entry ids dense from 0 as a
bookie usually receives them, every third id as one bookie of a striped E=3/Qw=1 ledger,
random 63-bit ids, or dense from 2^20), makes them durable the way it would at a checkpoint,
then reads every one back in random order. Candidates that are not installed are skipped
(``pip install lmdb rocksdict`` to include them). Each gives puts/s, gets/s, bytes on disk and
Python memory held by the in-memory index (tracemalloc).

``bkeeper LedgerLocations`` is the engine's own index (``bkeeper.storage.ledger_state``) with
its real checkpoint encoding; ``previous LedgerLocations`` is the one it replaced (a dense
array from id 0 that allowed gaps of up to 2^20 slots), kept here to compare in the same run.
"""

from __future__ import annotations

import os
import random
import shutil
import struct
import tempfile
import time
import tracemalloc
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from bkeeper.storage.index_file import IndexDelta, LocationRun, encode_delta
from bkeeper.storage.ledger_state import LedgerLocations

__all__ = [
    "CANDIDATES",
    "ID_PATTERNS",
    "IndexEngineResult",
    "PreviousLedgerLocations",
    "bench_index_engines",
    "index_keys",
]

KEY = struct.Struct(">qq")
VALUE = struct.Struct(">Q")
Keys = list[tuple[int, int]]


def _location(ledger_id: int, entry_id: int) -> int:
    """A made-up location (log id << 32 | offset), never 0."""
    return (((ledger_id & 0xFFFF) + 1) << 32) | ((entry_id * 1100 + 64) & 0xFFFFFFFF)


class PreviousLedgerLocations:
    """A dense index, for comparison: dense from id 0, gaps of up to 2^20 slots zero-filled."""

    __slots__ = ("_dense", "_sparse", "max_entry_id")
    gap_max = 1 << 20

    def __init__(self) -> None:
        self._dense: array[int] = array("Q")
        self._sparse: dict[int, int] | None = None
        self.max_entry_id = -1

    def set(self, entry_id: int, location: int) -> None:
        self.max_entry_id = max(self.max_entry_id, entry_id)
        if self._sparse is not None:
            self._sparse[entry_id] = location
            return
        dense = self._dense
        if entry_id < len(dense):
            dense[entry_id] = location
        elif entry_id - len(dense) <= self.gap_max:
            gap = entry_id - len(dense)
            if gap:
                dense.frombytes(bytes(8 * gap))
            dense.append(location)
        else:
            self._sparse = dict(self.items())
            self._sparse[entry_id] = location
            self._dense = array("Q")

    def get(self, entry_id: int) -> int:
        if self._sparse is not None:
            return self._sparse.get(entry_id, 0)
        dense = self._dense
        return dense[entry_id] if 0 <= entry_id < len(dense) else 0

    def items(self) -> Iterator[tuple[int, int]]:
        if self._sparse is not None:
            yield from sorted(self._sparse.items())
            return
        for entry_id, location in enumerate(self._dense):
            if location:
                yield entry_id, location


Measured = tuple[float, float, int, int]
Locations = LedgerLocations | PreviousLedgerLocations


def _build(make: Callable[[], Locations], keys: Keys) -> dict[int, Locations]:
    index: dict[int, Locations] = {}
    for ledger_id, entry_id in keys:
        locations = index.get(ledger_id)
        if locations is None:
            locations = index[ledger_id] = make()
        locations.set(entry_id, _location(ledger_id, entry_id))
    return index


def _traced_bytes(build: Callable[[], object]) -> int:
    """Python memory held by what ``build`` returns (a second build, traced, untimed)."""
    tracemalloc.start()
    try:
        built = build()
        return tracemalloc.get_traced_memory()[0] if built is not None else 0
    finally:
        tracemalloc.stop()


def _bench_locations(
    make: Callable[[], Locations], keys: Keys, lookups: Keys, directory: str
) -> Measured:
    """Per-ledger location objects; the checkpoint writes them as the engine's index file."""
    start = time.perf_counter()
    index = _build(make, keys)
    runs = []
    for ledger_id, locations in index.items():
        items = list(locations.items())
        ids = array("q", (entry_id for entry_id, _ in items))
        runs.append(LocationRun(ledger_id, ids, array("Q", (loc for _, loc in items))))
    path = os.path.join(directory, "index")
    with open(path, "wb") as f:  # the checkpoint: the engine's LOCATIONS records, then fsync
        f.write(encode_delta(IndexDelta((), (), tuple(runs))))
        f.flush()
        os.fsync(f.fileno())
    put_s = time.perf_counter() - start
    start = time.perf_counter()
    for ledger_id, entry_id in lookups:
        assert index[ledger_id].get(entry_id)
    get_s = time.perf_counter() - start
    del index, runs
    memory = _traced_bytes(lambda: _build(make, keys))
    return put_s, get_s, os.path.getsize(path), memory


def bench_locations(keys: Keys, lookups: Keys, directory: str) -> Measured:
    return _bench_locations(LedgerLocations, keys, lookups, directory)


def bench_previous(keys: Keys, lookups: Keys, directory: str) -> Measured:
    return _bench_locations(PreviousLedgerLocations, keys, lookups, directory)


def bench_dict(keys: Keys, lookups: Keys, directory: str) -> Measured:
    """A plain dict keyed by (ledger, entry): the in-memory upper bound, no persistence."""

    def build() -> dict[tuple[int, int], int]:
        index: dict[tuple[int, int], int] = {}
        for key in keys:
            index[key] = _location(*key)
        return index

    start = time.perf_counter()
    index = build()
    put_s = time.perf_counter() - start
    start = time.perf_counter()
    for key in lookups:
        assert index[key]
    get_s = time.perf_counter() - start
    del index
    return put_s, get_s, 0, _traced_bytes(build)


def bench_lmdb(keys: Keys, lookups: Keys, directory: str) -> Measured:
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
    return put_s, get_s, size, 0


def bench_rocksdict(keys: Keys, lookups: Keys, directory: str) -> Measured:
    from rocksdict import Options, Rdict, WriteBatch, WriteOptions

    path = os.path.join(directory, "rocks")
    db = Rdict(path, Options(raw_mode=True))
    # rocksdict's stubs declare ``disable_wal`` a method; at runtime it is a property.
    options: Any = WriteOptions()
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
    return put_s, get_s, size, 0


CANDIDATES: dict[str, Callable[[Keys, Keys, str], Measured]] = {
    "bkeeper LedgerLocations + index file": bench_locations,
    "previous LedgerLocations + index file": bench_previous,
    "dict[(ledger, entry)] (memory only)": bench_dict,
    "lmdb (batched txns, sync)": bench_lmdb,
    "rocksdict (write batches, no WAL, flush)": bench_rocksdict,
}


ID_PATTERNS: dict[str, Callable[[int, random.Random], list[int]]] = {
    "dense": lambda n, rng: list(range(n)),
    "striped": lambda n, rng: list(range(0, 3 * n, 3)),
    "sparse": lambda n, rng: sorted({rng.randrange(1 << 63) for _ in range(n)}),
    "huge-first": lambda n, rng: list(range(1 << 20, (1 << 20) + n)),
}


@dataclass(frozen=True)
class IndexEngineResult:
    """One candidate's figures; ``skipped`` says why there are none (not installed)."""

    name: str
    locations: int
    put_s: float = 0.0
    get_s: float = 0.0
    disk_bytes: int = 0
    memory_bytes: int = 0
    skipped: str = ""

    @property
    def puts_per_s(self) -> float:
        return self.locations / self.put_s if self.put_s > 0 else 0.0

    @property
    def gets_per_s(self) -> float:
        return self.locations / self.get_s if self.get_s > 0 else 0.0


def index_keys(count: int, ledgers: int, ids: str, seed: int = 1) -> tuple[Keys, Keys]:
    """The (ledger, entry) keys in the order they are stored (``count // ledgers`` per ledger,
    entry ids as ``ids`` in :data:`ID_PATTERNS` says), and the same shuffled for the reads."""
    per_ledger = count // ledgers
    rng = random.Random(seed)
    pattern = ID_PATTERNS[ids]
    keys = [(ledger, entry) for ledger in range(ledgers) for entry in pattern(per_ledger, rng)]
    lookups = keys[:]
    rng.shuffle(lookups)
    return keys, lookups


def bench_index_engines(
    keys: Keys, lookups: Keys, progress: Callable[[str], None] | None = None
) -> list[IndexEngineResult]:
    """Every candidate of :data:`CANDIDATES` in its own temporary directory; ``progress`` is
    told each candidate's name as it starts."""
    results = []
    for name, bench in CANDIDATES.items():
        if progress is not None:
            progress(name)
        directory = tempfile.mkdtemp(prefix="bkeeper-index-")
        try:
            put_s, get_s, size, memory = bench(keys, lookups, directory)
        except ImportError as exc:  # an optional engine that is not installed
            results.append(IndexEngineResult(name, len(keys), skipped=str(exc)))
            continue
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        results.append(IndexEngineResult(name, len(keys), put_s, get_s, size, memory))
    return results
