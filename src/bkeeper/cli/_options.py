"""Options shared by several commands."""

from __future__ import annotations

import os
import sys

import click

__all__ = ["confirm_deletion", "metadata_option"]

metadata_option = click.option(
    "--metadata",
    "metadata_uri",
    default=lambda: os.environ.get("BKEEPER_METADATA", "zk://127.0.0.1:2181/ledgers"),
    show_default="$BKEEPER_METADATA or zk://127.0.0.1:2181/ledgers",
    help="Metadata service URI.",
)


def confirm_deletion(question: str) -> None:
    """Ask ``question`` on the terminal; without one, fail (exit 2) saying ``--force`` is
    needed rather than waiting on a prompt nobody sees."""
    if not sys.stdin.isatty():
        raise click.UsageError(
            "refusing to delete without confirmation: standard input is not a terminal; "
            "pass --force"
        )
    click.confirm(question, abort=True)
