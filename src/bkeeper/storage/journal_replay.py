"""Journal replay at start: every record from the checkpoint mark on, in order.

Rules (see :mod:`bkeeper.storage.journal_format` for the format):

* Files are replayed in id order, the mark's file from the mark's offset, later files from
  their header on. Files before the mark's file are not read.
* A group is applied only when its header and all its records check out.
* Damage at the *tail* (with no valid group header after it, in its file or a later one:
  later files holding nothing past their header do not count) is one of:

  - a **torn write**: the group's header is cut short or damaged with no checksummed record
    after it, or the file ends before the group's records do. Only the group being written
    when the process died can look like that, and none of its records was acknowledged
    (acks wait for the group's fdatasync, which makes its length durable). The file is
    truncated at the start of that group, durably, and replay ends;
  - **suspect data**: the group's header checks out and the file holds all the bytes it
    announces, yet some records fail their checksum (a bit flip, or a filesystem that grew
    the file before the data reached the disk); or the header is damaged but checksummed
    records follow it. That group may have been acknowledged, so it is not cut: the good
    records of a group with a valid header are applied, and the ledgers of the rest go into
    *limbo* (they answer "unknown", never "absent", until repaired; see
    :mod:`bkeeper.storage.journal_damage` for how the ledgers are told, and when they cannot
    be, the whole storage goes into limbo). The bytes stay: the checkpoint that ends opening
    persists the limbo and retires the file, and a crash before it replays the same verdict.
* Any other damage has good data after it: corruption in the middle. Replay refuses with
  :class:`~bkeeper.common.errors.CorruptRecordError` naming the file and the offset, unless
  ``skip_corrupt`` is set, in which case the damaged record is skipped (or the rest of its
  group, or the span up to the next valid group, when lengths cannot be trusted), the good
  records are applied and the outcome lists what was skipped. Skipped records may have been
  acknowledged, so their ledgers (the whole storage for a span) go into limbo.
* A newest file holding only a torn header (a crash while it was created) is removed.
* Several journals (:mod:`bkeeper.storage.journal_set`): each from its own mark, with the
  rules above applied to each on its own ("the tail" is that journal's), their files taken in
  id order across journals (equal ids in the order of the directories).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from bkeeper.common import bugs
from bkeeper.common.errors import CorruptRecordError
from bkeeper.storage.filesystem import FileSystem, ReadableFile
from bkeeper.storage.journal import JournalPosition
from bkeeper.storage.journal_damage import RecordScan, scan_records
from bkeeper.storage.journal_format import (
    FILE_HEADER_BYTES,
    GROUP_HEADER_BYTES,
    GroupHeader,
    JournalRecord,
    decode_group_header,
    file_header_ok,
    journal_file_id,
    journal_file_name,
)

__all__ = [
    "ReplayOutcome",
    "find_group",
    "journal_file_ids",
    "replay_journal_dirs",
    "replay_journals",
]

log = logging.getLogger(__name__)

_SCAN_WINDOW_BYTES = 4 * 1024 * 1024
#: After a damaged group header at the tail, at most this much is read to look for records.
_HEADLESS_SCAN_BYTES_MAX = 128 * 1024 * 1024
#: The first five header bytes of every group record: payload length 16, kind GROUP.
_GROUP_SIGNATURE = b"\x00\x00\x00\x10\x00"


@dataclass
class ReplayOutcome:
    """What replay did: counts, where it cut torn tails, which damage it skipped, which
    suspect tail data it kept, and what must go into limbo because of those: the ledgers
    in ``limbo_ledgers``, or everything when ``limbo_all``."""

    records: int = 0
    files: int = 0
    #: Journal bytes read past the marks (groups applied or skipped), and all there were.
    bytes: int = 0
    bytes_total: int = 0
    cut: list[tuple[str, int]] = field(default_factory=list)
    skipped: list[tuple[str, int, str]] = field(default_factory=list)
    suspect: list[tuple[str, int, str]] = field(default_factory=list)
    limbo_ledgers: set[int] = field(default_factory=set)
    limbo_all: bool = False

    def enter_limbo(self, ledgers: set[int] | None) -> None:
        """Put ``ledgers`` into limbo; None: every ledger."""
        if ledgers is None:
            self.limbo_all = True
        else:
            self.limbo_ledgers.update(ledgers)


def journal_file_ids(fs: FileSystem, directory: str) -> list[int]:
    """Ids of the journal files in ``directory``, ascending."""
    ids = (journal_file_id(name) for name in fs.list_dir(directory))
    return sorted(i for i in ids if i is not None)


def replay_journals(
    fs: FileSystem,
    directory: str,
    mark: JournalPosition,
    skip_corrupt: bool,
    apply: Callable[[JournalRecord], None],
    known: Callable[[int], bool],
) -> ReplayOutcome:
    """Apply every journal record of ``directory`` from ``mark`` on, in order; see the
    module rules.

    ``known(ledger_id)`` says whether the engine knows the ledger (after the records
    applied so far): the ledgers of damaged records are told with it."""
    return replay_journal_dirs(fs, [(directory, mark)], skip_corrupt, apply, known)


def replay_journal_dirs(
    fs: FileSystem,
    journals: Sequence[tuple[str, JournalPosition]],
    skip_corrupt: bool,
    apply: Callable[[JournalRecord], None],
    known: Callable[[int], bool],
    progress: Callable[[ReplayOutcome], None] | None = None,
) -> ReplayOutcome:
    """Apply every record of several journals, each ``(directory, mark)`` from its mark on,
    files in id order across the journals; see the module rules. ``progress(outcome)`` is
    called once ``outcome.bytes_total`` is known and after every group (``outcome.bytes``
    grows)."""
    outcome = ReplayOutcome()
    plan: list[tuple[int, int, _FileReplay, int]] = []  # file id, journal, replayer, start
    for number, (directory, mark) in enumerate(journals):
        ids = [i for i in journal_file_ids(fs, directory) if i >= mark.file_id]
        if mark.offset > FILE_HEADER_BYTES and (not ids or ids[0] != mark.file_id):
            path = os.path.join(directory, journal_file_name(mark.file_id))
            raise CorruptRecordError(path, mark.offset, "journal file named by the mark is missing")
        last_with_groups = _last_with_groups(fs, directory, ids)
        for file_id in ids:
            start = mark.offset if file_id == mark.file_id else FILE_HEADER_BYTES
            newest = file_id >= last_with_groups
            replayer = _FileReplay(fs, directory, file_id, newest, skip_corrupt, known, progress)
            plan.append((file_id, number, replayer, start))
            size = fs.size(os.path.join(directory, journal_file_name(file_id)))
            outcome.bytes_total += max(0, size - start)
    plan.sort(key=lambda step: step[:2])
    if progress is not None:
        progress(outcome)
    for _, _, replayer, start in plan:
        replayer.run(start, apply, outcome)
        outcome.files += 1
    return outcome


def _last_with_groups(fs: FileSystem, directory: str, ids: list[int]) -> int:
    """The id of the last file holding anything past its header (the first id if none).

    Only the last group written can be torn, and it is in that file: a later file without
    groups (opening starts a new file before the checkpoint that retires the old ones, and
    may crash in between) does not put that group in the middle."""
    for file_id in reversed(ids):
        if fs.size(os.path.join(directory, journal_file_name(file_id))) > FILE_HEADER_BYTES:
            return file_id
    return ids[0] if ids else 0


class _FileReplay:
    """Replays one journal file (``newest``: no later file holds a group)."""

    def __init__(
        self,
        fs: FileSystem,
        directory: str,
        file_id: int,
        newest: bool,
        skip: bool,
        known: Callable[[int], bool],
        progress: Callable[[ReplayOutcome], None] | None = None,
    ) -> None:
        self._fs = fs
        self._known = known
        self._progress = progress
        self._path = os.path.join(directory, journal_file_name(file_id))
        self._file_id = file_id
        self._newest = newest
        self._skip = skip

    def run(
        self, start: int, apply: Callable[[JournalRecord], None], outcome: ReplayOutcome
    ) -> None:
        handle = self._fs.open_read(self._path)
        try:
            self._run(handle, start, apply, outcome)
        finally:
            handle.close()

    def _run(
        self,
        handle: ReadableFile,
        start: int,
        apply: Callable[[JournalRecord], None],
        outcome: ReplayOutcome,
    ) -> None:
        size = handle.size()
        if not file_header_ok(handle.read_at(0, FILE_HEADER_BYTES), self._file_id):
            if self._newest and size <= FILE_HEADER_BYTES:
                log.warning("%s: removing journal file with a torn header", self._path)
                self._fs.remove(self._path)
                outcome.cut.append((self._path, 0))
                return
            resume = self._on_damage(handle, outcome, _Damage(0, 0, "bad file header", 1, -1))
            if resume is None:
                return
            start = max(start, resume)
        if start > size:
            raise CorruptRecordError(self._path, start, "journal ends before the checkpoint mark")
        position: int | None = start
        last_seq = -1
        while position is not None and position < size:
            before = position
            position, last_seq = self._group(handle, size, position, last_seq, apply, outcome)
            outcome.bytes += (size if position is None else position) - before
            if self._progress is not None:
                self._progress(outcome)

    def _group(
        self,
        handle: ReadableFile,
        size: int,
        position: int,
        last_seq: int,
        apply: Callable[[JournalRecord], None],
        outcome: ReplayOutcome,
    ) -> tuple[int | None, int]:
        """Replay the group at ``position``; the next position (None: stop) and last seq."""
        head = handle.read_at(position, GROUP_HEADER_BYTES)
        header = decode_group_header(head, 0)
        if isinstance(header, str) or header.seq <= last_seq:
            reason = f"bad group header: {header}" if isinstance(header, str) else "stale group"
            damage = _Damage(position, position, reason, position + 1, last_seq)
            if isinstance(header, str) and self._at_tail(handle, damage):
                scan = self._headless(handle, size, position)
                if scan.records:  # checksummed records follow: not a torn write
                    ledgers = None if scan.ledgers is None else scan.ledgers | scan.good_ledgers
                    self._keep_suspect(outcome, damage, ledgers)
                    return None, last_seq
            return self._on_damage(handle, outcome, damage), last_seq
        end = position + GROUP_HEADER_BYTES + header.records_bytes
        if end > size:
            reason = "group shorter than its header says"
            damage = _Damage(position, size, reason, position + 1, header.seq)
            return self._on_damage(handle, outcome, damage), header.seq
        data = handle.read_at(position, end - position)
        scan = scan_records(data, GROUP_HEADER_BYTES, len(data), self._known, header.count)
        if scan.damage is not None:
            offset, reason = scan.damage
            damage = _Damage(position, position + offset, reason, end, header.seq, resume=end)
            if self._at_tail(handle, damage):  # whole, so it may have been acknowledged
                if bugs.ACTIVE and bugs.active("journal-tail-absent"):
                    return self._on_damage(handle, outcome, damage), header.seq  # cut: torn
                self._keep_suspect(outcome, damage, scan.ledgers)
            elif self._on_damage(handle, outcome, damage, scan.ledgers) is None:
                return None, header.seq
        for record in scan.records:
            apply(record)
        outcome.records += len(scan.records)
        return end, header.seq

    def _headless(self, handle: ReadableFile, size: int, position: int) -> RecordScan:
        """The records after a damaged group header at ``position`` (none apply)."""
        start = position + GROUP_HEADER_BYTES
        length = min(size - start, _HEADLESS_SCAN_BYTES_MAX)
        if length <= 0:
            return RecordScan()
        scan = scan_records(handle.read_at(start, length), 0, length, self._known)
        if start + length < size:
            scan.ledgers = None  # bytes left unread: cannot tell what they held
        return scan

    def _at_tail(self, handle: ReadableFile, damage: _Damage) -> bool:
        """Whether ``damage`` is in the newest file with no valid group after it."""
        return self._newest and find_group(handle, damage.search_from, damage.seq) is None

    def _keep_suspect(
        self, outcome: ReplayOutcome, damage: _Damage, ledgers: set[int] | None
    ) -> None:
        which = "every ledger" if ledgers is None else f"ledgers {sorted(ledgers)}"
        log.error(
            "%s: corrupt journal data at %d in its last group (%s), which may have been "
            "acknowledged: %s in limbo until repaired",
            self._path,
            damage.offset,
            damage.reason,
            which,
        )
        outcome.suspect.append((self._path, damage.offset, damage.reason))
        outcome.enter_limbo(ledgers)

    def _on_damage(
        self,
        handle: ReadableFile,
        outcome: ReplayOutcome,
        damage: _Damage,
        ledgers: set[int] | None = None,
    ) -> int | None:
        """Decide torn tail vs corruption; the position to go on from, or None to stop.

        ``ledgers`` are those the damaged records belong to when skipped (None: unknown)."""
        following = find_group(handle, damage.search_from, damage.seq)
        if following is None and self._newest:
            log.warning("%s: cutting torn tail at %d (%s)", self._path, damage.group, damage.reason)
            self._fs.truncate(self._path, damage.group)
            outcome.cut.append((self._path, damage.group))
            return None
        if not self._skip:
            raise CorruptRecordError(self._path, damage.offset, damage.reason)
        log.error(
            "%s: skipping corrupt journal data at %d: %s", self._path, damage.offset, damage.reason
        )
        outcome.skipped.append((self._path, damage.offset, damage.reason))
        outcome.enter_limbo(ledgers if damage.resume is not None else None)
        return damage.resume if damage.resume is not None else following


@dataclass(frozen=True, slots=True)
class _Damage:
    """Where replay found damage: the group it is in, the bad offset, why, where a following
    good group may start and the seq it must exceed, and where to resume when skipping."""

    group: int
    offset: int
    reason: str
    search_from: int
    seq: int
    resume: int | None = None


def find_group(handle: ReadableFile, start: int, after_seq: int) -> int | None:
    """The offset of the first valid group header at or after ``start`` with a sequence
    number above ``after_seq``, or None (also used by ``bkeeper shell readjournal``)."""
    size = handle.size()
    position = start
    while position < size:
        window = handle.read_at(position, _SCAN_WINDOW_BYTES + GROUP_HEADER_BYTES)
        index = window.find(_GROUP_SIGNATURE)
        while 0 <= index < _SCAN_WINDOW_BYTES:
            header = decode_group_header(window, index)
            if isinstance(header, GroupHeader) and header.seq > after_seq:
                return position + index
            index = window.find(_GROUP_SIGNATURE, index + 1)
        position += _SCAN_WINDOW_BYTES
    return None
