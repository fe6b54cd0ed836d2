"""Tables the commands print: as wide as the screen allows, titles on one line, long cells
folded.

rich sizes a table to its columns and wraps the title into that width, so a one-column
table under a long title (``ledgers at zk://...``) printed the title over four lines.
A :func:`titled_table` whose title is wider than its columns prints the title as a line of
its own above the table (wrapped only where it is wider than the output), and keeps the
columns at their own width (a script counting ``│ writable │`` still finds it); its columns
fold a cell too long for the width (a path, a URI) over several lines instead of widening
the table past the screen or cutting the cell.

The width: the terminal's when standard output is one; otherwise ``$COLUMNS`` when set
(``COLUMNS=80 bkeeper shell listledgers | less``), else :data:`PIPE_WIDTH`, wide enough
that a script reading a pipe gets whole rows.
"""

from __future__ import annotations

import os
from typing import Any

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Column, Table
from rich.text import Text

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
    """A table whose columns fold long cells unless told otherwise, and whose title, when
    wider than the columns, is a line of its own above them (module docstring)."""

    def add_column(self, header: Any = "", *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("overflow", "fold")
        super().add_column(header, *args, **kwargs)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        title = self.title
        if not isinstance(title, str):
            yield from super().__rich_console__(console, options)
            return
        width = self.__rich_measure__(console, options).maximum
        if cell_len(title) <= min(width, options.max_width):
            yield from super().__rich_console__(console, options)
            return
        self.title = None
        try:
            yield Text(title, style="table.title", overflow="fold")
            yield from super().__rich_console__(console, options)
        finally:
            self.title = title


def titled_table(title: str, *columns: str | Column, **kwargs: Any) -> Table:
    """A :class:`rich.table.Table` titled ``title`` (on one line above the table when wider
    than its columns), its columns folding long cells; ``kwargs`` as for ``Table``."""
    table = _FoldingTable(*columns, title=title, **kwargs)
    for column in table.columns:
        column.overflow = "fold"
    return table
