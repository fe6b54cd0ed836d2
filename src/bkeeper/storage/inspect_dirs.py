"""Which directories hold a bookie's files, for the commands that look at them (read-only).

A bookie has one or more ledger directories (entry logs; the first also holds the index and
the checkpoint) and one or more journal directories, one journal each
(:mod:`bkeeper.storage.dirs`). :func:`bookie_dirs` learns them as the engine does:

* the checkpoint is in the first ledger directory: the first of ``ledger_dirs`` given, else
  ``<data_dir>/current/ledgers``;
* the checkpoint names every ledger directory and every journal directory (a version-1
  checkpoint: the two defaults) by key, resolved against ``data_dir`` by
  :meth:`StorageLayout.path_of <bkeeper.storage.dirs.StorageLayout.path_of>`;
* directories given (``ledger_dirs``, ``journal_dirs``: what ``bkeeper bookie --ledger-dir /
  --journal-dir`` take) are used instead of the checkpoint's, each kind by itself (a bookie
  with no checkpoint yet, or an override); when they differ from those the checkpoint
  names, :attr:`BookieDirs.disagreement` says so in one line;
* otherwise the defaults, ``<data_dir>/current/ledgers`` and ``<data_dir>/current/journal``.

Every directory used must exist: ``StorageError`` naming it and where it came from.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from bkeeper.common.errors import StorageError
from bkeeper.storage.checkpoint_file import read_checkpoint
from bkeeper.storage.dirs import StorageLayout
from bkeeper.storage.filesystem import FileSystem

__all__ = ["BookieDirs", "bookie_dirs", "given_dirs", "joined", "resolve_dirs"]

#: What a missing default directory's error adds: the bookie may keep its files elsewhere.
_GIVE_DIRS = "; give --ledger-dir and --journal-dir if the bookie was started with them"


@dataclass(frozen=True, slots=True)
class BookieDirs:
    """A bookie's directories: ``layout`` (its ledger and journal directories, the first
    ledger directory holding the index and the checkpoint); ``disagreement``: one line when
    directories given differ from those the checkpoint names, else None."""

    layout: StorageLayout
    disagreement: str | None

    @property
    def ledger_dirs(self) -> tuple[str, ...]:
        return self.layout.ledger_dirs

    @property
    def journal_dirs(self) -> tuple[str, ...]:
        return self.layout.journal_dirs


def bookie_dirs(
    fs: FileSystem,
    data_dir: str,
    ledger_dirs: Sequence[str] = (),
    journal_dirs: Sequence[str] = (),
) -> BookieDirs:
    """The directories of the bookie whose data directory is ``data_dir`` (module rules)."""
    if not fs.exists(data_dir):
        raise StorageError(f"{data_dir}: no such directory")
    given = StorageLayout(data_dir, ledger_dirs, journal_dirs)
    root = read_checkpoint(fs, given.checkpoint)
    if root is None:
        _check_exist(fs, given, bool(ledger_dirs), bool(journal_dirs), None)
        return BookieDirs(given, None)
    named = StorageLayout(
        data_dir,
        [given.path_of(key) for key in root.ledger_dirs],
        [given.path_of(mark.key) for mark in root.marks],
    )
    layout = StorageLayout(
        data_dir,
        given.ledger_dirs if ledger_dirs else named.ledger_dirs,
        given.journal_dirs if journal_dirs else named.journal_dirs,
    )
    _check_exist(fs, layout, bool(ledger_dirs), bool(journal_dirs), given.checkpoint)
    return BookieDirs(layout, _disagreement(layout, named, given.checkpoint))


def resolve_dirs(fs: FileSystem, where: str | BookieDirs) -> BookieDirs:
    """``where`` as :class:`BookieDirs`: a data directory's, learnt from its checkpoint."""
    return where if isinstance(where, BookieDirs) else bookie_dirs(fs, where)


def given_dirs(fs: FileSystem, kind: str, dirs: Sequence[str]) -> tuple[str, ...]:
    """``dirs`` as given for ``kind`` (ledger or journal); ``StorageError`` naming the first
    that does not exist."""
    for path in dirs:
        if not fs.exists(path):
            raise StorageError(f"{kind} dir {path} (given): no such directory")
    return tuple(dirs)


def _check_exist(
    fs: FileSystem,
    layout: StorageLayout,
    ledgers_given: bool,
    journals_given: bool,
    checkpoint: str | None,
) -> None:
    defaults: list[str] = []
    for kind, dirs, given in (
        ("journal", layout.journal_dirs, journals_given),
        ("ledger", layout.ledger_dirs, ledgers_given),
    ):
        if given:
            given_dirs(fs, kind, dirs)
            continue
        for path in dirs:
            if fs.exists(path):
                continue
            if checkpoint is not None:
                raise StorageError(
                    f"{kind} dir {path} (named by the checkpoint {checkpoint}): no such directory"
                )
            defaults.append(os.path.relpath(path, layout.data_dir))
    if defaults:
        raise StorageError(
            f"{layout.data_dir} is not a bookie data directory "
            f"(no {' and '.join(defaults)} in it{_GIVE_DIRS})"
        )


def _disagreement(layout: StorageLayout, named: StorageLayout, checkpoint: str) -> str | None:
    differences = [
        f"{kind} dirs {joined(theirs)}, given {joined(ours)}"
        for kind, ours, theirs in (
            ("ledger", layout.ledger_dirs, named.ledger_dirs),
            ("journal", layout.journal_dirs, named.journal_dirs),
        )
        if tuple(map(layout.key, ours)) != tuple(map(layout.key, theirs))
    ]
    if not differences:
        return None
    return (
        f"the dirs given differ from those the checkpoint {checkpoint} names "
        f"({'; '.join(differences)}): showing the dirs given"
    )


def joined(names: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    if len(names) < 2:
        return "".join(names)
    return f"{', '.join(names[:-1])} and {names[-1]}"
