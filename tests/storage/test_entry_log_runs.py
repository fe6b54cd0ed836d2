"""Entry-log reads in runs (``EntryLogReader.read_many``): same bodies as one-by-one reads,
runs broken at log and distance boundaries, long bodies, and checksums still checked."""

from __future__ import annotations

import pytest

from bkeeper.common.errors import CorruptRecordError
from bkeeper.storage import MemoryFileSystem
from bkeeper.storage.entry_log import EntryLogReader, EntryLogWriter, LogIds


def write_logs(fs: MemoryFileSystem) -> tuple[list[int], list[bytes]]:
    fs.makedirs("/d")
    bodies = [b"entry-%d-" % i + bytes([i % 256]) * (i * 37 % 300) for i in range(400)]
    bodies[10] = b"x" * 20_000  # longer than the read-ahead
    bodies[11] = b"y" * 3_000_000  # longer than a run
    locations: list[int] = []
    for log_id, part in ((1, bodies[:250]), (2, bodies[250:])):
        writer = EntryLogWriter(fs, "/d", LogIds(log_id), 1 << 30)
        locations += writer.append(part)
        writer.sync()
        writer.close()
    return locations, bodies


def test_runs_equal_single_reads_in_any_order():
    fs = MemoryFileSystem()
    locations, bodies = write_logs(fs)
    reader = EntryLogReader(fs, "/d", 4)
    assert reader.read_many(locations) == bodies
    assert [reader.read(x) for x in locations] == bodies
    shuffled = locations[300:] + locations[:300:3] + locations[5:8]
    expected = bodies[300:] + bodies[:300:3] + bodies[5:8]
    assert reader.read_many(shuffled) == expected
    assert reader.read_many([]) == []


def test_a_damaged_record_in_a_run_is_reported():
    fs = MemoryFileSystem()
    locations, bodies = write_logs(fs)
    offset = locations[20] & 0xFFFFFFFF
    fs.corrupt("/d/0000000000000001.log", offset + 8 + 2, b"\xff")
    reader = EntryLogReader(fs, "/d", 4)
    with pytest.raises(CorruptRecordError, match="checksum"):
        reader.read_many(locations[15:30])
    assert reader.read_many(locations[21:30]) == bodies[21:30]  # the rest of the run is fine
