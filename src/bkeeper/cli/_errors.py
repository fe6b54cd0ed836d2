"""How a command says it failed: one line on stderr, ``error: ...``, and its exit status."""

from __future__ import annotations

from typing import IO, Any

import click

__all__ = ["CommandError"]


class CommandError(click.ClickException):
    """A command failed for a reason it explains in one line (exit status 1 unless given)."""

    exit_code = 1

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True, file=file)
