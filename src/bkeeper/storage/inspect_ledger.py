"""One ledger as a bookie's index holds it (read-only): what ``bkeeper shell ledger ID``
shows, in the manner of Apache BookKeeper's ``bookkeeper shell ledger``.

The index is read as of the last checkpoint (:func:`~bkeeper.storage.inspect.
load_checkpointed_index`, with its rules for a running bookie): entries added since are in
the journal and the write cache only, and show up after the next checkpoint. Each entry's
location is split into its entry log and offset; the log's path is the ledger directory that
holds it (None when no directory does: ``localconsistencycheck`` reports that as damage).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import islice

from bkeeper.storage.dirs import LedgerDirs
from bkeeper.storage.filesystem import FileSystem
from bkeeper.storage.inspect import Mark, load_checkpointed_index, mark_of
from bkeeper.storage.inspect_dirs import BookieDirs, resolve_dirs

__all__ = ["IndexedEntry", "LedgerIndexView", "ledger_index"]

_OFFSET_MASK = (1 << 32) - 1


@dataclass(frozen=True, slots=True)
class IndexedEntry:
    entry_id: int
    log_id: int
    offset: int
    log_path: str | None

    def as_dict(self) -> dict[str, object]:
        return {
            "entry": self.entry_id,
            "log_id": self.log_id,
            "offset": self.offset,
            "log": self.log_path,
        }


@dataclass(frozen=True, slots=True)
class LedgerIndexView:
    """Ledger ``ledger_id`` in the index as of ``checkpoint``: its flags, its master key's
    length, its explicit LAC (bytes of the body), ``entries_total`` entries with a location,
    the first (lowest ids) of which are in ``entries``."""

    ledger_id: int
    checkpoint: Mark
    fenced: bool
    limbo: bool
    master_key_bytes: int
    explicit_lac_bytes: int | None
    first_entry_id: int | None
    last_entry_id: int | None
    entries_total: int
    entries: tuple[IndexedEntry, ...]

    @property
    def entries_left_out(self) -> int:
        return self.entries_total - len(self.entries)

    def as_dict(self) -> dict[str, object]:
        return {
            "ledger": self.ledger_id,
            "checkpoint": self.checkpoint.as_dict(),
            "fenced": self.fenced,
            "limbo": self.limbo,
            "master_key_bytes": self.master_key_bytes,
            "explicit_lac_bytes": self.explicit_lac_bytes,
            "first_entry": self.first_entry_id,
            "last_entry": self.last_entry_id,
            "entries_total": self.entries_total,
            "entries_left_out": self.entries_left_out,
            "entries": [entry.as_dict() for entry in self.entries],
        }


def ledger_index(
    fs: FileSystem, where: str | BookieDirs, ledger_id: int, entries_max: int | None
) -> tuple[Mark | None, LedgerIndexView | None]:
    """The checkpoint (None: the bookie never made one) and ``ledger_id`` as its index holds
    it (None: the index has no such ledger); at most ``entries_max`` entries described
    (None: all), every one counted."""
    layout = resolve_dirs(fs, where).layout
    root, ledgers = load_checkpointed_index(fs, layout)
    if root is None:
        return None, None
    mark = mark_of(layout, root)
    state = ledgers.get(ledger_id)
    if state is None:
        return mark, None
    dirs = LedgerDirs(fs, layout.ledger_dirs)
    known = set(dirs.log_ids())

    def path_of(log_id: int) -> str | None:
        return dirs.log_path(log_id) if log_id in known else None

    shown = tuple(
        IndexedEntry(entry_id, location >> 32, location & _OFFSET_MASK, path_of(location >> 32))
        for entry_id, location in islice(state.locations.items(), entries_max)
    )
    total = len(state.locations)
    first = next(iter(state.locations.items()), (None, 0))[0]
    last = state.locations.max_entry_id if total else None
    explicit = state.explicit_lac
    return mark, LedgerIndexView(
        ledger_id, mark, state.fenced, state.limbo, len(state.master_key),
        None if explicit is None else len(explicit), first, last, total, shown,
    )  # fmt: skip
