"""Options shared by several commands."""

from __future__ import annotations

import os

import click

__all__ = ["metadata_option"]

metadata_option = click.option(
    "--metadata",
    "metadata_uri",
    default=lambda: os.environ.get("BKEEPER_METADATA", "zk://127.0.0.1:2181/ledgers"),
    show_default="$BKEEPER_METADATA or zk://127.0.0.1:2181/ledgers",
    help="Metadata service URI.",
)
