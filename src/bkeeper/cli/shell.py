"""``bkeeper shell ...``: admin commands in the manner of BookKeeper's ``bookkeeper shell``."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from bkeeper.client.bookie_client import BookieClient
from bkeeper.common.errors import BKeeperError
from bkeeper.meta.cluster import ClusterMetadata
from bkeeper.wire.codes import GetBookieInfoField, Protocol, StatusCode
from bkeeper.wire.messages import GetBookieInfoRequest, GetBookieInfoResponse

__all__ = ["shell"]

_METADATA = click.option(
    "--metadata",
    "metadata_uri",
    default=lambda: os.environ.get("BKEEPER_METADATA", "zk://127.0.0.1:2181/ledgers"),
    show_default="$BKEEPER_METADATA or zk://127.0.0.1:2181/ledgers",
    help="Metadata service URI.",
)


def _console() -> Console:
    console = Console()
    return console if console.is_terminal else Console(width=160)


def _run(coro: Coroutine[Any, Any, None]) -> None:
    from bkeeper.cli.bookie import run_event_loop

    run_event_loop(coro)


@click.group()
def shell() -> None:
    """Cluster administration."""


@shell.command()
@_METADATA
@click.option("--readonly", is_flag=True, help="Only read-only bookies.")
@click.option("--all", "show_all", is_flag=True, help="Writable and read-only bookies.")
def listbookies(metadata_uri: str, readonly: bool, show_all: bool) -> None:
    """List the registered bookies."""

    async def run() -> None:
        async with await ClusterMetadata.open(metadata_uri) as cluster:
            bookies = await cluster.registry.bookies()
            rows = []
            if show_all or not readonly:
                rows += [(b, "writable") for b in sorted(bookies.writable)]
            if show_all or readonly:
                rows += [(b, "read-only") for b in sorted(bookies.read_only)]
            table = Table(title=f"bookies at {metadata_uri}")
            for column in ("bookie id", "mode", "address"):
                table.add_column(column)
            for bookie_id, mode in rows:
                info = await cluster.registry.service_info(bookie_id)
                endpoint = info.endpoint()
                address = f"{endpoint.host}:{endpoint.port}" if endpoint else bookie_id
                table.add_row(bookie_id, mode, address)
            _console().print(table)
            if not rows:
                click.echo("no bookies registered", err=True)

    _run(run())


def _gib(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**30:,.1f} GiB"


@shell.command()
@_METADATA
def bookieinfo(metadata_uri: str) -> None:
    """Free and total disk space of every registered bookie (GET_BOOKIE_INFO)."""

    async def info_of(host: str, port: int) -> GetBookieInfoResponse:
        client = await BookieClient.connect(host, port, Protocol.V3, timeout_s=5)
        try:
            mask = GetBookieInfoField.TOTAL_DISK_CAPACITY | GetBookieInfoField.FREE_DISK_SPACE
            response: GetBookieInfoResponse = await asyncio.wait_for(
                client.request(GetBookieInfoRequest(int(mask))), 10
            )
            return response
        finally:
            await client.aclose()

    async def run() -> None:
        async with await ClusterMetadata.open(metadata_uri) as cluster:
            bookies = await cluster.registry.bookies()
            table = Table(title=f"bookie info at {metadata_uri}")
            for column in ("bookie id", "mode", "free", "total", "used"):
                table.add_column(
                    column, justify="left" if column in ("bookie id", "mode") else "right"
                )
            every = [(b, "writable") for b in sorted(bookies.writable)]
            every += [(b, "read-only") for b in sorted(bookies.read_only)]
            for bookie_id, mode in every:
                endpoint = (await cluster.registry.service_info(bookie_id)).endpoint()
                if endpoint is None:
                    table.add_row(bookie_id, mode, "no endpoint", "", "")
                    continue
                try:
                    info = await info_of(endpoint.host, endpoint.port)
                except (BKeeperError, TimeoutError) as exc:
                    table.add_row(bookie_id, mode, f"unreachable: {exc}", "", "")
                    continue
                if info.status is not StatusCode.EOK:
                    table.add_row(bookie_id, mode, info.status.name, "", "")
                    continue
                total, free = info.total_disk_capacity or 0, info.free_disk_space or 0
                used = f"{100 * (1 - free / total):.1f}%" if total else "-"
                table.add_row(bookie_id, mode, _gib(free), _gib(total), used)
            _console().print(table)

    _run(run())
