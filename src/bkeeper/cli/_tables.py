"""Tables the commands print: as wide as the screen allows, titles on one line, long cells
folded.

rich sizes a table to its columns and wraps the title into that width, so a one-column
table under a long title (``ledgers at zk://...``) printed the title over four lines.
:func:`titled_table` makes the table at least as wide as its title (up to the width of the
output), and its columns fold a cell too long for the width (a path, a URI) over several
lines instead of widening the table past the screen or cutting the cell.

The width: the terminal's when standard output is one; otherwise ``$COLUMNS`` when set
(``COLUMNS=80 bkeeper shell listledgers | less``), else :data:`PIPE_WIDTH`, wide enough
that a script reading a pipe gets whole rows.
"""

from __future__ import annotations

import os
from typing import Any

from rich.console import Console
from rich.table import Column, Table

__all__ = ["PIPE_WIDTH", "console", "output_width", "titled_table"]

#: The width of the output when it is not a terminal and ``$COLUMNS`` is not set.
PIPE_WIDTH = 160
#: The narrowest width taken from ``$COLUMNS`` (a smaller value cannot hold a table).
_WIDTH_MIN = 20


def output_width() -> int:
    """The width tables are laid out in (module docstring)."""
    terminal = Console()
    if terminal.is_terminal:
        return terminal.width
    columns = os.environ.get("COLUMNS", "")
    if columns.isdecimal():
        return max(int(columns), _WIDTH_MIN)
    return PIPE_WIDTH


def console(stderr: bool = False) -> Console:
    """A console that prints in :func:`output_width` columns."""
    return Console(stderr=stderr, width=output_width())


class _FoldingTable(Table):
    """A table whose columns fold long cells unless told otherwise."""

    def add_column(self, header: Any = "", *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("overflow", "fold")
        super().add_column(header, *args, **kwargs)


def titled_table(title: str, *columns: str | Column, **kwargs: Any) -> Table:
    """A :class:`rich.table.Table` titled ``title`` (on one line: the table is at least as
    wide as the title, up to the output's width), its columns folding long cells;
    ``kwargs`` as for ``Table``."""
    kwargs.setdefault("min_width", min(len(title), output_width()))
    table = _FoldingTable(*columns, title=title, **kwargs)
    for column in table.columns:
        column.overflow = "fold"
    return table
