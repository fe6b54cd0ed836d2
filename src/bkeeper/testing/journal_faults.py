"""Media faults in a bookie's journal, for tests: flip bits in records of its last group.

``journal_patches`` reads a journal file's bytes and says which bytes to change so that the
last ``count`` entries of a ledger in the file's last group fail their checksum (one bit of
each entry's payload flipped). The caller writes the patches: ``MemoryFileSystem.corrupt``
for the in-memory cluster, :func:`apply_patches` for a real bookie's directory (stopped).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from bkeeper.storage.framing import RECORD_HEADER_BYTES
from bkeeper.storage.journal_format import (
    FILE_HEADER_BYTES,
    GROUP_HEADER_BYTES,
    JournalRecord,
    RecordKind,
    decode_group_header,
    decode_record,
    journal_file_id,
)

__all__ = [
    "JournalPatches",
    "apply_patches",
    "journal_patches",
    "last_group_ledgers",
    "newest_journal_file",
]

#: Where in an entry record the bit is flipped: past the 32-byte entry header and a digest.
_PAYLOAD_OFFSET = 60


@dataclass(frozen=True)
class JournalPatches:
    """Bytes to write (offset, new byte) and the entry ids whose records they damage."""

    patches: tuple[tuple[int, bytes], ...]
    entry_ids: tuple[int, ...]
    group_offset: int


def newest_journal_file(journal_dir: str | Path) -> str:
    """The path of the newest journal file in ``journal_dir``."""
    names = [n for n in os.listdir(journal_dir) if journal_file_id(n) is not None]
    if not names:
        raise FileNotFoundError(f"no journal file in {journal_dir}")
    return os.path.join(journal_dir, max(names))


def journal_patches(data: bytes, ledger_id: int, count: int | None = None) -> JournalPatches:
    """Patches flipping one payload bit of each of the last ``count`` entries (None: all
    of them) of ``ledger_id`` in the last group of the journal file ``data``.

    Which entries share the last group depends on timing (an idle journal writes the first
    record at once, then groups what arrives within its wait window): callers use the ids
    returned."""
    group, records = _last_group(data)
    entries = [
        r
        for r in records
        if r.kind is RecordKind.ADD_ENTRY
        and r.ledger_id == ledger_id
        and len(r.data) > _PAYLOAD_OFFSET
    ]
    if not entries or (count is not None and len(entries) < count):
        raise ValueError(
            f"the last group holds {len(entries)} entries of ledger {ledger_id}, not {count}"
        )
    chosen = entries if count is None else entries[-count:]
    patches = tuple(
        (offset, bytes([data[offset] ^ 0x10]))
        for offset in (r.offset + RECORD_HEADER_BYTES + _PAYLOAD_OFFSET for r in chosen)
    )
    return JournalPatches(patches, tuple(r.entry_id for r in chosen), group)


def last_group_ledgers(data: bytes) -> list[int]:
    """The ledgers with entries in the last group of the journal file ``data``, the one
    with the most entries first (ValueError: no group, or the last one damaged already)."""
    _, records = _last_group(data)
    counts: dict[int, int] = {}
    for r in records:
        if r.kind is RecordKind.ADD_ENTRY and len(r.data) > _PAYLOAD_OFFSET:
            counts[r.ledger_id] = counts.get(r.ledger_id, 0) + 1
    return sorted(counts, key=lambda ledger_id: (-counts[ledger_id], ledger_id))


def apply_patches(path: str | Path, patches: JournalPatches) -> None:
    """Write ``patches`` into the file at ``path`` (of a stopped bookie)."""
    with open(path, "r+b") as f:
        for offset, value in patches.patches:
            f.seek(offset)
            f.write(value)


def _last_group(data: bytes) -> tuple[int, list[JournalRecord]]:
    position, last = FILE_HEADER_BYTES, -1
    while position + GROUP_HEADER_BYTES <= len(data):
        header = decode_group_header(data, position)
        if isinstance(header, str):
            break
        last, position = position, position + GROUP_HEADER_BYTES + header.records_bytes
    if last < 0:
        raise ValueError("the journal file holds no group")
    header = decode_group_header(data, last)
    assert not isinstance(header, str)
    end = min(len(data), last + GROUP_HEADER_BYTES + header.records_bytes)
    records, offset = [], last + GROUP_HEADER_BYTES
    while offset < end:
        record, offset, reason = decode_record(data[:end], offset)
        if record is None:
            raise ValueError(f"the last group is damaged already: {reason}")
        records.append(record)
    return last, records
