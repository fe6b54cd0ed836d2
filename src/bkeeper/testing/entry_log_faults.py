"""Media faults in a bookie's entry logs, for tests: flip one bit in entry records.

:func:`flip_entry_log_records` reads a stopped bookie's index as of its last checkpoint
(:func:`~bkeeper.storage.inspect.load_checkpointed_index`: the entries whose bodies are in
entry logs, not only in the journal) and flips one payload bit of each of a ledger's last
``count`` records there, as a failing disk would. The record's checksum then fails; the
entry's index location is unchanged, so the bookie still believes it holds the entry.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bkeeper.common.errors import StorageError
from bkeeper.storage.dirs import LedgerDirs
from bkeeper.storage.filesystem import OsFileSystem
from bkeeper.storage.inspect import load_checkpointed_index
from bkeeper.storage.inspect_dirs import resolve_dirs

__all__ = ["FlippedEntries", "flip_entry_log_records"]

#: An entry record's header: body length, CRC-32C of the body (``bkeeper.storage.entry_log``).
_RECORD = struct.Struct(">II")
_OFFSET_MASK = (1 << 32) - 1
#: Where in an entry's body the bit is flipped: past the 32-byte entry header and a digest.
_PAYLOAD_OFFSET = 60


@dataclass(frozen=True)
class FlippedEntries:
    """The ledger and the entries whose entry-log records now fail their checksum."""

    ledger_id: int
    entry_ids: tuple[int, ...]


def flip_entry_log_records(
    data_dir: str | Path, ledger_ids: Sequence[int], count: int = 5, *, any_ledger: bool = False
) -> FlippedEntries | None:
    """Damage the last ``count`` entry-log records of the last of ``ledger_ids`` that has any
    in the bookie at ``data_dir`` (stopped); with ``any_ledger``, when none of them has, those
    of the newest other ledger that has. None when no ledger asked for has any (nothing
    checkpointed yet, or the ledgers are not on this bookie)."""
    fs = OsFileSystem()
    try:
        layout = resolve_dirs(fs, str(data_dir)).layout
        _root, ledgers = load_checkpointed_index(fs, layout)
    except (StorageError, FileNotFoundError):
        return None  # no index yet: nothing in entry logs
    dirs = LedgerDirs(fs, layout.ledger_dirs)
    known = set(dirs.log_ids())
    order = list(reversed(ledger_ids))
    if any_ledger:
        asked = set(order)
        order += sorted((lid for lid in ledgers if lid not in asked), reverse=True)
    for ledger_id in order:
        state = ledgers.get(ledger_id)
        if state is None:
            continue
        stored = [
            (entry_id, dirs.log_path(location >> 32), location & _OFFSET_MASK)
            for entry_id, location in state.locations.items()
            if location >> 32 in known
        ]
        if not stored:
            continue
        chosen = stored[-count:]
        for _entry_id, path, offset in chosen:
            _flip(path, offset)
        return FlippedEntries(ledger_id, tuple(entry_id for entry_id, _, _ in chosen))
    return None


def _flip(path: str, offset: int) -> None:
    """Flip one payload bit of the entry record at ``offset`` of the log at ``path``."""
    fd = os.open(path, os.O_RDWR)
    try:
        length, _crc = _RECORD.unpack(os.pread(fd, _RECORD.size, offset))
        at = offset + _RECORD.size + min(_PAYLOAD_OFFSET, length - 1)
        (byte,) = os.pread(fd, 1, at)
        os.pwrite(fd, bytes([byte ^ 0x10]), at)
        os.fsync(fd)
    finally:
        os.close(fd)
