"""The flusher's per-run bookkeeping: locations and read cache by runs."""

from __future__ import annotations

import pytest

from bkeeper.storage.caches import ReadCache
from bkeeper.storage.ledger_state import LedgerLocations


@pytest.mark.parametrize(
    "runs",
    [
        [list(range(0, 10)), list(range(10, 30))],  # dense, in order: appended
        [list(range(5, 10)), list(range(0, 5))],  # behind the first id: one by one
        [list(range(0, 3)), [3, 500, 10_000]],  # gaps
        [[7, 8], list(range(20, 25)), [9]],
    ],
)
def test_set_many_is_set_for_each(runs: list[list[int]]) -> None:
    many, single = LedgerLocations(), LedgerLocations()
    for ids in runs:
        locations = [1000 + i for i in ids]
        many.set_many(ids, locations)
        for entry_id, location in zip(ids, locations, strict=True):
            single.set(entry_id, location)
    assert list(many.items()) == list(single.items())
    assert (len(many), many.max_entry_id) == (len(single), single.max_entry_id)
    assert all(many.get(i) == 1000 + i for ids in runs for i in ids)


def test_read_cache_takes_and_evicts_whole_runs() -> None:
    cache = ReadCache(bytes_max=100)
    cache.put_run(1, [0, 1, 2], [b"a" * 20] * 3)
    cache.put_run(2, [0, 1], [b"b" * 20] * 2)
    assert cache.size_bytes == 100
    cache.put_run(1, [3], [b"c" * 10])  # over: the oldest run goes, all of it
    assert [cache.get(1, e) for e in range(4)] == [None, None, None, b"c" * 10]
    assert cache.get(2, 1) == b"b" * 20
    assert cache.size_bytes == 50
    cache.put_run(2, [1, 2], [b"d" * 5, b"e" * 5])  # entry 1 again: replaced, counted once
    assert cache.size_bytes == 50 - 20 + 10
    assert cache.get(2, 1) == b"d" * 5
    cache.put_run(3, [0], [b"x" * 101])  # larger than the cache: not kept
    assert cache.get(3, 0) is None
    cache.drop_ledger(2)
    assert cache.size_bytes == 10 and cache.get(2, 0) is None


def test_a_run_of_locations_is_get_for_each_up_to_the_first_missing() -> None:
    locations = LedgerLocations()
    locations.set_many(list(range(10, 20)), [100 + i for i in range(10)])
    locations.set(25, 999)  # a gap at 20-24
    for start in range(10, 26):
        for count in (1, 3, 20):
            run = locations.run(start, count)
            expected = []
            for entry_id in range(start, start + count):
                if not locations.get(entry_id):
                    break
                expected.append(locations.get(entry_id))
            assert run == expected, (start, count)
    assert locations.run(9, 5) is None  # before the dense array
    locations.set(1_000_000, 5)  # far ahead: in the sparse map
    assert locations.run(10, 5) is None
