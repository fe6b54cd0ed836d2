"""Command groups that import a sub-command's module only when that command runs.

A :class:`LazyGroup` holds a table of :class:`LazyCommand` rows (name, ``module:attribute``,
the short help of the listing, hidden or not), so ``bkeeper --help`` and ``bkeeper shell
--help`` print their listings without importing the client, the server, rich or aiohttp
(click's documented "lazily loading subcommands" pattern, with the listing's text kept in the
table; tests/cli/test_startup.py checks each row against its command so it cannot drift).

Invariants: a row's name is the name the command is registered under; a loaded command is
imported once and cached; a row whose import fails raises (a bug, not a missing command).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from gettext import gettext as _
from typing import Any

import click

__all__ = ["LazyCommand", "LazyGroup", "load_target"]

_NO_SUCH_COMMAND = getattr(click.exceptions, "NoSuchCommand", None)  # click >= 8.4


@dataclass(frozen=True)
class LazyCommand:
    """One sub-command of a :class:`LazyGroup`, known without importing it.

    ``target`` is ``module:attribute`` naming the :class:`click.Command`. ``short_help`` is
    the command's first help sentence, as click's listing shows it (``get_short_help_str``
    with no length limit).
    """

    name: str
    target: str
    short_help: str
    hidden: bool = False


def load_target(target: str) -> object:
    """Import ``module:attribute`` and return the attribute."""
    module_name, _colon, attribute = target.partition(":")
    return getattr(importlib.import_module(module_name), attribute)


class LazyGroup(click.Group):
    """A :class:`click.Group` whose table rows are imported on first use (module doc)."""

    def __init__(
        self, *args: Any, lazy_commands: Sequence[LazyCommand] = (), **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands = {row.name: row for row in lazy_commands}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        row = self.lazy_commands.get(cmd_name)
        if row is not None and cmd_name not in self.commands:
            self.add_command(_load(row), cmd_name)
        return super().get_command(ctx, cmd_name)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError as exc:
            # click >= 8.4 says "did you mean" from the commands loaded: offer every row.
            if _NO_SUCH_COMMAND is None or not isinstance(exc, _NO_SUCH_COMMAND):
                raise
            raise _NO_SUCH_COMMAND(
                exc.command_name, possibilities=self.list_commands(ctx), ctx=ctx
            ) from None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """As :meth:`click.Group.format_commands`, with a row's text for commands not loaded."""
        listed = [(name, self._listed(ctx, name)) for name in self.list_commands(ctx)]
        shown = [(name, cmd) for name, cmd in listed if cmd is not None and not cmd.hidden]
        if not shown:
            return
        limit = formatter.width - 6 - max(len(name) for name, _command in shown)
        rows = [(name, cmd.get_short_help_str(limit)) for name, cmd in shown]
        with formatter.section(_("Commands")):  # click's own title, translated as click does
            formatter.write_dl(rows)

    def _listed(self, ctx: click.Context, name: str) -> click.Command | None:
        row = self.lazy_commands.get(name)
        if row is None or name in self.commands:
            return super().get_command(ctx, name)
        # A stand-in carrying the row's text: click shortens it as it would the command's.
        return click.Command(name, help=row.short_help, hidden=row.hidden)


def _load(row: LazyCommand) -> click.Command:
    command = load_target(row.target)
    if not isinstance(command, click.Command):
        raise TypeError(f"{row.target} is a {type(command).__name__}, not a click command")
    return command
