"""The index file loads its location runs in one step each (a restart of a bookie holding
millions of entries spent seconds setting them one by one): what is loaded equals what was
saved, whatever the ids (dense, striped, far apart, written again)."""

from __future__ import annotations

from array import array

from bkeeper.storage import MemoryFileSystem
from bkeeper.storage.index_file import (
    IndexDelta,
    LocationRun,
    encode_delta,
    encode_index_header,
    load_index,
)
from bkeeper.storage.ledger_state import LedgerLocations, LedgerSnapshot


def _run(ledger_id: int, pairs: list[tuple[int, int]]) -> LocationRun:
    return LocationRun(
        ledger_id, array("q", [e for e, _ in pairs]), array("Q", [loc for _, loc in pairs])
    )


def test_runs_of_every_shape_load_as_saved() -> None:
    dense = [(e, (1 << 32) | (16 + 40 * e)) for e in range(5000)]
    more = [(e, (2 << 32) | (16 + 40 * e)) for e in range(5000, 9000)]
    striped = [(e, (1 << 32) | (8 + e)) for e in range(0, 3000, 3)]
    far = [(1 << 40, 77), (3, 1 << 33)]
    again = [(e, (3 << 32) | (16 + e)) for e in range(100, 200)]  # compaction moved them
    zero_bytes = [(e, 1 << 56) for e in range(4)]  # aligned zero bytes inside, none zero
    runs = [
        _run(1, dense),
        _run(1, more),
        _run(2, striped),
        _run(3, far),
        _run(1, again),
        _run(4, zero_bytes),
    ]
    ledgers = tuple(LedgerSnapshot(i, b"k", False, -1, None, False) for i in (1, 2, 3, 4))
    data = encode_index_header(1) + encode_delta(IndexDelta((), ledgers, tuple(runs)))
    fs = MemoryFileSystem()
    fs.makedirs("/d")
    handle = fs.open_append("/d/index")
    handle.write(data)
    handle.close()
    loaded = load_index(fs, "/d/index", len(data))

    expected: dict[int, LedgerLocations] = {i: LedgerLocations() for i in (1, 2, 3, 4)}
    for run in runs:
        for entry_id, location in zip(run.entry_ids, run.locations, strict=True):
            expected[run.ledger_id].set(entry_id, location)
    for ledger_id, locations in expected.items():
        state = loaded[ledger_id]
        assert dict(state.locations.items()) == dict(locations.items())
        assert len(state.locations) == len(locations)
        assert state.last_entry_id == locations.max_entry_id
