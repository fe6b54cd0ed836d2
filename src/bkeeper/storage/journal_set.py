"""Several journals: one per journal directory, each with its own thread and group commit.

A ledger's records always go to the same journal, the one of its id modulo the number of
journals (:meth:`JournalSet.for_ledger`), so each ledger's records are in order in one
journal; records of different ledgers need no order between them. Each journal has its own
mark in the checkpoint, read for all of them at one instant under the engine lock, and its
old files are deleted by itself once the checkpoint covers them.

File ids across journals: at open every journal starts a new file with the same id, one
more than any journal file id present (in the configured directories and in those the
checkpoint names) or named by the checkpoint, and each then rolls on by itself. So every
file of a run of the engine has a higher id than every file of the runs before, and replay
(:func:`bkeeper.storage.journal_replay.replay_journal_dirs`) applies the files of all
journals in id order: when the journal directories change between runs (a ledger's records
move to another journal), all of a ledger's earlier records are still applied before its
later ones, even if the checkpoint of the open that changed them was deferred (a full disk).

Changed directories (against the last checkpoint, which keys each mark by its directory,
:meth:`bkeeper.storage.dirs.StorageLayout.key`): a journal directory the checkpoint does not
name is replayed from its files with ids above every mark of the checkpoint, those written
since (a directory added by an open whose checkpoint was deferred); older files there are
from before it was dropped, and their records were checkpointed then. A directory the
checkpoint names but ``journal_dirs`` no longer lists may be dropped only when it holds
nothing past its mark; otherwise the open fails with one line naming it (its records would
be lost).
"""

from __future__ import annotations

import collections
import os
import threading
from collections.abc import Sequence

from bkeeper.common.clock import Clock
from bkeeper.common.errors import StorageError
from bkeeper.common.metrics import MetricSet
from bkeeper.common.threads import Threads
from bkeeper.storage.checkpoint_file import CheckpointRecord, JournalMark
from bkeeper.storage.config import StorageConfig
from bkeeper.storage.dirs import StorageLayout
from bkeeper.storage.disk_set import DiskSet
from bkeeper.storage.filesystem import FileSystem
from bkeeper.storage.journal import DurableCallback, Journal, JournalPosition
from bkeeper.storage.journal_format import FILE_HEADER_BYTES, journal_file_name
from bkeeper.storage.journal_replay import journal_file_ids
from bkeeper.storage.metrics import JournalMetrics

__all__ = [
    "JournalSet",
    "journal_files_before",
    "journal_starts",
    "next_journal_file_id",
]

_START = JournalPosition(0, FILE_HEADER_BYTES)


class JournalSet:
    """The journals of the engine, one per journal directory of ``layout``."""

    def __init__(
        self,
        fs: FileSystem,
        layout: StorageLayout,
        config: StorageConfig,
        lock: threading.Lock,
        on_durable: DurableCallback,
        file_id: int,
        disks: DiskSet | None = None,
        clock: Clock | None = None,
        metrics: MetricSet | None = None,
        threads: Threads | None = None,
    ) -> None:
        self._keys = layout.journal_keys
        self.journals: tuple[Journal, ...] = tuple(
            Journal(
                fs,
                directory,
                config,
                lock,
                on_durable,
                file_id,
                disks.space_of(directory) if disks is not None else None,
                clock,
                None if metrics is None else JournalMetrics(metrics),
                threads,
            )
            for directory in layout.journal_dirs
        )

    def for_ledger(self, ledger_id: int) -> Journal:
        """The journal that takes every record of the ledger."""
        journals = self.journals
        return journals[ledger_id % len(journals)]

    def marks_locked(self) -> tuple[JournalMark, ...]:
        """Each journal's durable position (the caller holds the engine lock, so that no
        record is half added: every record before a mark has its effect in memory)."""
        return tuple(
            JournalMark(key, journal.durable_position)
            for key, journal in zip(self._keys, self.journals, strict=True)
        )

    def roll_large_files(self, bytes_min: int) -> None:
        """Ask every journal whose current file holds at least ``bytes_min`` to start a new
        one (see :meth:`Journal.request_roll`)."""
        for journal in self.journals:
            if journal.file_bytes >= bytes_min:
                journal.request_roll()

    def start(self) -> None:
        for journal in self.journals:
            journal.start()

    def fail(self, error: BaseException) -> None:
        for journal in self.journals:
            journal.fail(error)

    def close(self) -> None:
        """Write everything queued in every journal (callbacks fired), stop their threads."""
        for journal in self.journals:
            journal.close()

    def abort(self) -> None:
        for journal in self.journals:
            journal.abort()

    @property
    def failed(self) -> bool:
        return any(journal.failed for journal in self.journals)

    @property
    def groups_written(self) -> int:
        return sum(journal.groups_written for journal in self.journals)

    @property
    def bytes_written(self) -> int:
        """Bytes made durable by every journal since the engine opened."""
        return sum(journal.bytes_written for journal in self.journals)

    @property
    def groups_cut(self) -> collections.Counter[str]:
        total: collections.Counter[str] = collections.Counter()
        for journal in self.journals:
            total.update(journal.groups_cut)
        return total

    @property
    def queued_records(self) -> int:
        return sum(journal.queued_records for journal in self.journals)

    @property
    def idle(self) -> bool:
        """Every journal thread waits with nothing queued (:attr:`Journal.idle`)."""
        return all(journal.idle for journal in self.journals)

    @property
    def file_id(self) -> int:
        """The highest id of the files being written."""
        return max(journal.file_id for journal in self.journals)


def journal_starts(
    fs: FileSystem, layout: StorageLayout, root: CheckpointRecord | None
) -> list[tuple[str, JournalPosition]]:
    """Each journal directory with the position its replay starts from; ``StorageError`` if
    the checkpoint names a directory no longer configured that holds records past its mark."""
    if root is None:
        return [(directory, _START) for directory in layout.journal_dirs]
    configured = set(layout.journal_keys)
    for key, mark in root.marks:
        if key not in configured:
            _check_dropped(fs, layout.path_of(key), mark)
    since = JournalPosition(max(mark.file_id for _, mark in root.marks) + 1, FILE_HEADER_BYTES)
    starts = []
    for directory, key in zip(layout.journal_dirs, layout.journal_keys, strict=True):
        start = root.mark_of(key)
        starts.append((directory, start if start is not None else since))
    return starts


def _check_dropped(fs: FileSystem, directory: str, mark: JournalPosition) -> None:
    if not fs.exists(directory):
        raise StorageError(
            f"journal directory {directory} of the last checkpoint is missing and not in "
            "journal_dirs: records in it may not be in entry logs yet; put it back"
        )
    for file_id in journal_file_ids(fs, directory):
        if file_id < mark.file_id:
            continue
        size = fs.size(os.path.join(directory, journal_file_name(file_id)))
        start = mark.offset if file_id == mark.file_id else FILE_HEADER_BYTES
        if size > start:
            raise StorageError(
                f"journal directory {directory} holds records past the last checkpoint but is "
                "not in journal_dirs: add it back for one start (the records are replayed "
                "and checkpointed), then it may go"
            )


def next_journal_file_id(
    fs: FileSystem,
    layout: StorageLayout,
    root: CheckpointRecord | None,
    starts: Sequence[tuple[str, JournalPosition]],
) -> int:
    """The id every journal's first file of this run gets (see the module docstring)."""
    dropped = [layout.path_of(key) for key, _ in root.marks] if root is not None else []
    highest = max((mark.file_id for _, mark in starts), default=0)
    for directory in dict.fromkeys([*(d for d, _ in starts), *dropped]):
        if fs.exists(directory):
            highest = max([highest, *journal_file_ids(fs, directory)])
    return highest + 1


def journal_files_before(
    fs: FileSystem, layout: StorageLayout, marks: Sequence[JournalMark]
) -> list[str]:
    """The journal files wholly before their journal's mark: no replay reads them."""
    old = []
    for key, position in marks:
        directory = layout.path_of(key)
        old += [
            os.path.join(directory, journal_file_name(file_id))
            for file_id in journal_file_ids(fs, directory)
            if file_id < position.file_id
        ]
    return old
