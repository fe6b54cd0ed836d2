"""What the commands that read a bookie's files share: options, error lines, output."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import click
from rich.console import Console
from rich.table import Table

from bkeeper.cli._errors import CommandError
from bkeeper.cli._tables import console
from bkeeper.common.errors import StorageError
from bkeeper.storage import FileSystem
from bkeeper.storage.inspect_dirs import BookieDirs, bookie_dirs

__all__ = [
    "DATA_DIR_OPTION",
    "JOURNAL_DIR_OPTION",
    "JSON_OPTION",
    "LEDGER_DIR_OPTION",
    "LIMIT_OPTION",
    "failures",
    "learn_dirs",
    "print_json",
    "read",
    "show",
]

_T = TypeVar("_T")

#: Rows a table shows unless ``--limit`` says otherwise.
_ROWS_DEFAULT = 1000


def _console() -> Console:
    return console()


@contextmanager
def failures() -> Iterator[None]:
    """Storage and OS errors as the one line a command fails with."""
    try:
        yield
    except (StorageError, OSError) as exc:
        raise CommandError(str(exc)) from exc


def read(call: Callable[[], _T]) -> _T:
    with failures():
        return call()


def print_json(value: object) -> None:
    click.echo(json.dumps(value, indent=2))


DATA_DIR_OPTION = click.option(
    "--data-dir",
    required=True,
    help="The bookie's data directory (as given to 'bkeeper bookie --data-dir').",
)
LEDGER_DIR_OPTION = click.option(
    "--ledger-dir",
    "ledger_dirs",
    multiple=True,
    type=click.Path(file_okay=False),
    help="A ledger dir of the bookie, as given to 'bkeeper bookie --ledger-dir' (repeatable; "
    "the first holds the checkpoint). Default: those its checkpoint names, found in "
    "DATA_DIR/current/ledgers.",
)
JOURNAL_DIR_OPTION = click.option(
    "--journal-dir",
    "journal_dirs",
    multiple=True,
    type=click.Path(file_okay=False),
    help="A journal dir of the bookie, as given to 'bkeeper bookie --journal-dir' "
    "(repeatable). Default: those its checkpoint names.",
)
JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
LIMIT_OPTION = click.option(
    "--limit",
    default=_ROWS_DEFAULT,
    show_default=True,
    type=click.IntRange(0),
    help="Show at most this many rows (0: all); the rest are counted.",
)


def learn_dirs(
    fs: FileSystem, data_dir: str, ledger_dirs: tuple[str, ...], journal_dirs: tuple[str, ...]
) -> BookieDirs:
    """The bookie's dirs (from its checkpoint, or those given); when the dirs given differ
    from the checkpoint's, one line on stderr says so."""
    dirs = read(lambda: bookie_dirs(fs, data_dir, ledger_dirs, journal_dirs))
    if dirs.disagreement is not None:
        click.echo(f"note: {dirs.disagreement}", err=True)
    return dirs


def show(*tables: Table, note: str = "") -> None:
    """Print ``tables``, then ``note`` as a line of its own (a caption would be squeezed
    into the width of the table)."""
    console = _console()
    for table in tables:
        console.print(table)
    if note:
        console.print(note, highlight=False, markup=False, soft_wrap=True)
