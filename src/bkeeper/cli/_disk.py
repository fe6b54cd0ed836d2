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
from bkeeper.common.errors import StorageError

__all__ = [
    "DATA_DIR_OPTION",
    "JSON_OPTION",
    "LIMIT_OPTION",
    "failures",
    "print_json",
    "read",
    "show",
]

_T = TypeVar("_T")

#: Rows a table shows unless ``--limit`` says otherwise.
_ROWS_DEFAULT = 1000


def _console() -> Console:
    console = Console()
    return console if console.is_terminal else Console(width=160)


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
JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
LIMIT_OPTION = click.option(
    "--limit",
    default=_ROWS_DEFAULT,
    show_default=True,
    type=click.IntRange(0),
    help="Show at most this many rows (0: all); the rest are counted.",
)


def show(*tables: Table, note: str = "") -> None:
    """Print ``tables``, then ``note`` as a line of its own (a caption would be squeezed
    into the width of the table)."""
    console = _console()
    for table in tables:
        console.print(table)
    if note:
        console.print(note, highlight=False, markup=False, soft_wrap=True)
