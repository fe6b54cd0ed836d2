"""The groups and records of one journal file, read-only (``bkeeper shell readjournal``).

Walks the file as replay does (:mod:`bkeeper.storage.journal_replay`), with the same codec
(:func:`~bkeeper.storage.journal_format.decode_group_header`) and the same record checks
(:func:`~bkeeper.storage.journal_damage.scan_records`), but changes nothing: where replay
would cut a torn tail or refuse corruption, this reports a :class:`JournalDamage` and goes
on at the next valid group, if there is one.

Damage with no valid group after it is at the file's *tail*: in the newest file of a running
bookie that may be a group being written right now; in a stopped bookie's newest file, a
group torn by a crash (replay cuts it) or suspect data (its bytes are all there yet fail
their checksums: replay keeps it and puts its ledgers in limbo). Damage with a valid group
after it is corruption in the middle of the file.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

from bkeeper.common.errors import StorageError
from bkeeper.storage.filesystem import FileSystem, ReadableFile
from bkeeper.storage.inspect import bookie_layout
from bkeeper.storage.journal_damage import scan_records
from bkeeper.storage.journal_format import (
    FILE_HEADER_BYTES,
    GROUP_HEADER_BYTES,
    GroupHeader,
    JournalRecord,
    RecordKind,
    decode_group_header,
    file_header_ok,
    journal_file_id,
    journal_file_name,
)
from bkeeper.storage.journal_replay import find_group

__all__ = [
    "JournalDamage",
    "JournalGroup",
    "JournalItem",
    "JournalRecordView",
    "journal_path",
    "read_journal",
]

_LEDGER_ID_BYTES = 8


@dataclass(frozen=True, slots=True)
class JournalRecordView:
    """One good record: the sequence number of its group, where it starts, its kind, ledger
    and entry (-1 unless an entry) and its payload bytes (for an entry, the entry body)."""

    group_seq: int
    offset: int
    kind: str
    ledger_id: int
    entry_id: int
    length: int

    def as_dict(self) -> dict[str, object]:
        return {
            "group_seq": self.group_seq,
            "offset": self.offset,
            "kind": self.kind,
            "ledger": self.ledger_id,
            "entry": self.entry_id,
            "length": self.length,
        }


@dataclass(frozen=True, slots=True)
class JournalGroup:
    """One group whose header checks out: its offset, sequence number, bytes (header
    included), the record count its header gives and the good records found in it."""

    offset: int
    seq: int
    size_bytes: int
    count: int
    records: tuple[JournalRecordView, ...]

    def as_dict(self) -> dict[str, object]:
        return {
            "offset": self.offset,
            "seq": self.seq,
            "bytes": self.size_bytes,
            "count": self.count,
            "good_records": len(self.records),
        }


@dataclass(frozen=True, slots=True)
class JournalDamage:
    """Damage at ``offset`` (in the group at ``group_offset``; -1 for the file header).
    ``next_group``: where the next valid group starts, None when none follows (the file's
    tail). ``ledgers``: the ledgers damaged records may belong to, None when they cannot be
    told."""

    offset: int
    group_offset: int
    reason: str
    next_group: int | None
    ledgers: tuple[int, ...] | None

    @property
    def at_tail(self) -> bool:
        return self.next_group is None

    def as_dict(self) -> dict[str, object]:
        return {
            "offset": self.offset,
            "group_offset": self.group_offset,
            "reason": self.reason,
            "at_tail": self.at_tail,
            "next_group": self.next_group,
            "ledgers": None if self.ledgers is None else list(self.ledgers),
        }


JournalItem = JournalGroup | JournalDamage


def journal_path(fs: FileSystem, data_dir: str | None, which: str) -> tuple[str, int]:
    """The path and file id of a journal file given as a file id (decimal, in the journal
    directory of ``data_dir``) or as a path (its name must be a journal file name)."""
    if which.isdigit():
        if data_dir is None:
            raise StorageError(f"journal file id {which}: give the bookie's --data-dir")
        file_id = int(which)
        path = os.path.join(bookie_layout(fs, data_dir).journal, journal_file_name(file_id))
    else:
        path = which
        found = journal_file_id(os.path.basename(path))
        if found is None:
            raise StorageError(f"{path}: not a journal file name (16 hex digits, then .txn)")
        file_id = found
    if not fs.exists(path):
        raise StorageError(f"{path}: no such journal file")
    return path, file_id


def read_journal(fs: FileSystem, path: str, file_id: int) -> Iterator[JournalItem]:
    """The groups of the journal file at ``path``, in order, with the damage found between
    them (module rules). Reads one group at a time; the file stays open until the iterator
    is exhausted or closed."""
    handle = fs.open_read(path)
    try:
        yield from _Walk(handle, file_id).items()
    finally:
        handle.close()


class _Walk:
    def __init__(self, handle: ReadableFile, file_id: int) -> None:
        self._handle = handle
        self._file_id = file_id
        self._size = handle.size()
        #: Ledgers of the good records so far: damaged records naming one of them (or one
        #: a corrected bit flip of their ledger id gives) are attributed to it.
        self._seen: set[int] = set()

    def items(self) -> Iterator[JournalItem]:
        position: int | None = FILE_HEADER_BYTES
        if not file_header_ok(self._handle.read_at(0, FILE_HEADER_BYTES), self._file_id):
            position = self._next_group(1, -1)
            yield JournalDamage(0, -1, "bad file header", position, None)
        last_seq = -1
        while position is not None and position < self._size:
            head = decode_group_header(self._handle.read_at(position, GROUP_HEADER_BYTES), 0)
            if isinstance(head, str) or head.seq <= last_seq:
                reason = f"bad group header: {head}" if isinstance(head, str) else "stale group"
                following = self._next_group(position + 1, last_seq)
                yield JournalDamage(position, position, reason, following, None)
                position = following
                continue
            last_seq = head.seq
            end = position + GROUP_HEADER_BYTES + head.records_bytes
            if end > self._size:
                reason = (
                    f"group shorter than its header says ({self._size - position} of "
                    f"{end - position} bytes in the file)"
                )
                following = self._next_group(position + 1, head.seq)
                yield JournalDamage(position, position, reason, following, None)
                position = following
                continue
            yield from self._group(position, end, head)
            position = end

    def _group(self, position: int, end: int, head: GroupHeader) -> Iterator[JournalItem]:
        data = self._handle.read_at(position, end - position)
        seen = self._seen
        scan = scan_records(data, GROUP_HEADER_BYTES, len(data), seen.__contains__, head.count)
        records = tuple(_view(head.seq, position, record) for record in scan.records)
        yield JournalGroup(position, head.seq, end - position, head.count, records)
        seen.update(scan.good_ledgers)
        if scan.damage is not None:
            offset, reason = scan.damage
            following = self._next_group(end, head.seq)
            ledgers = None if scan.ledgers is None else tuple(sorted(scan.ledgers))
            yield JournalDamage(position + offset, position, reason, following, ledgers)

    def _next_group(self, start: int, after_seq: int) -> int | None:
        return find_group(self._handle, start, after_seq)


def _view(group_seq: int, group_offset: int, record: JournalRecord) -> JournalRecordView:
    length = len(record.data)
    if record.kind is not RecordKind.ADD_ENTRY:
        length += _LEDGER_ID_BYTES
    return JournalRecordView(
        group_seq,
        group_offset + record.offset,
        record.kind.name,
        record.ledger_id,
        record.entry_id,
        length,
    )
