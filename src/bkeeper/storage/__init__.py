"""The bookie storage engine, usable as a library with no network.

Journal with group commit (:mod:`~bkeeper.storage.journal`), write cache and read cache,
append-only entry logs, an in-memory location index persisted to an index file at each
checkpoint, per-ledger state (master key, fenced, explicit LAC), checkpoint and replay. All
file access goes through the :class:`FileSystem` port; :class:`MemoryFileSystem` can crash
and lose exactly what was not made durable.

Imports ``bkeeper.common`` only.
"""

from bkeeper.storage.add_batch import AddBatch, entry_lac
from bkeeper.storage.config import StorageConfig
from bkeeper.storage.disk_space import DiskState
from bkeeper.storage.filesystem import FileSystem, OsFileSystem, ReadableFile, WritableFile
from bkeeper.storage.journal import DurableCallback, GroupTokens, JournalPosition
from bkeeper.storage.journal_replay import ReplayOutcome
from bkeeper.storage.memory_fs import MemoryFileSystem
from bkeeper.storage.storage import Storage, StorageStats

__all__ = [
    "AddBatch",
    "DiskState",
    "DurableCallback",
    "FileSystem",
    "GroupTokens",
    "JournalPosition",
    "MemoryFileSystem",
    "OsFileSystem",
    "ReadableFile",
    "ReplayOutcome",
    "Storage",
    "StorageConfig",
    "StorageStats",
    "WritableFile",
    "entry_lac",
]
