"""One ledger as a bookie's index holds it (bkeeper.storage.inspect_ledger, ``bkeeper shell
ledger ID``), against data written by a real Storage on the in-memory filesystem."""

from __future__ import annotations

from test_inspect import LEDGERS, ReadOnlyFs, build, locations

from bkeeper.storage import MemoryFileSystem
from bkeeper.storage.entry_log import entry_log_name
from bkeeper.storage.inspect_ledger import ledger_index


def test_a_ledger_is_its_flags_and_every_entry_location_in_entry_order() -> None:
    fs = MemoryFileSystem()
    build(fs)
    where = locations(fs)
    mark, view = ledger_index(ReadOnlyFs(fs), "/data", 2, None)
    assert mark is not None and view is not None
    assert view.checkpoint == mark
    assert (view.ledger_id, view.fenced, view.limbo, view.master_key_bytes) == (2, False, False, 20)
    assert view.explicit_lac_bytes is None
    assert (view.first_entry_id, view.last_entry_id, view.entries_total) == (0, 149, 150)
    assert view.entries_left_out == 0
    assert [(e.entry_id, e.log_id, e.offset) for e in view.entries] == [
        (entry, where[(2, entry)] >> 32, where[(2, entry)] & 0xFFFFFFFF) for entry in range(150)
    ]
    assert {e.log_path for e in view.entries} == {
        f"{LEDGERS}/{entry_log_name(log_id)}" for log_id in {e.log_id for e in view.entries}
    }
    assert view.as_dict()["entries"][0] == {
        "entry": 0,
        "log_id": view.entries[0].log_id,
        "offset": view.entries[0].offset,
        "log": view.entries[0].log_path,
    }


def test_entries_max_describes_the_first_and_counts_all() -> None:
    fs = MemoryFileSystem()
    build(fs)
    _mark, view = ledger_index(fs, "/data", 1, 10)
    assert view is not None
    assert [e.entry_id for e in view.entries] == list(range(10))
    assert (view.entries_total, view.entries_left_out) == (150, 140)


def test_a_missing_log_has_no_path_and_an_unknown_ledger_is_none() -> None:
    fs = MemoryFileSystem()
    build(fs)
    where = locations(fs)
    log_id = where[(3, 0)] >> 32
    fs.remove(f"{LEDGERS}/{entry_log_name(log_id)}")
    _mark, view = ledger_index(fs, "/data", 3, None)
    assert view is not None
    assert [e.log_path for e in view.entries if e.log_id == log_id] == [None] * sum(
        1 for entry in range(150) if where[(3, entry)] >> 32 == log_id
    )
    mark, absent = ledger_index(fs, "/data", 99, None)
    assert mark is not None and absent is None


def test_a_bookie_without_checkpoint_has_neither() -> None:
    fs = MemoryFileSystem()
    fs.makedirs(LEDGERS)
    fs.makedirs("/data/current/journal")
    assert ledger_index(fs, "/data", 1, None) == (None, None)
