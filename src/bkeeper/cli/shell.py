"""``bkeeper shell ...``: admin commands in the manner of BookKeeper's ``bookkeeper shell``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from typing import Any

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from bkeeper.cli import shell_admin, shell_disk, shell_recovery
from bkeeper.cli._options import confirm_deletion, metadata_option
from bkeeper.client.bookie_client import BookieClient
from bkeeper.client.bookkeeper import BookKeeper
from bkeeper.common.errors import BKeeperError, LedgerNotFoundError
from bkeeper.meta.cluster import ClusterMetadata
from bkeeper.wire.codes import GetBookieInfoField, Protocol, StatusCode
from bkeeper.wire.messages import GetBookieInfoRequest, GetBookieInfoResponse

__all__ = ["shell"]

_METADATA = metadata_option


def _console() -> Console:
    console = Console()
    return console if console.is_terminal else Console(width=160)


def _run(coro: Coroutine[Any, Any, None]) -> None:
    from bkeeper.cli.bookie import run_event_loop

    run_event_loop(coro)


@click.group()
def shell() -> None:
    """Cluster administration."""


# A bookie's files, read from its data directory; its garbage collection, over its admin API;
# auto-recovery (recover, decommissionbookie, listunderreplicated, whoisauditor, ...).
for _command in (*shell_disk.commands, *shell_admin.commands, *shell_recovery.commands):
    shell.add_command(_command)


@shell.command()
@_METADATA
@click.option("--readonly", is_flag=True, help="Only read-only bookies.")
@click.option("--all", "show_all", is_flag=True, help="Writable and read-only bookies.")
def listbookies(metadata_uri: str, readonly: bool, show_all: bool) -> None:
    """List the registered bookies."""

    async def run() -> None:
        async with await ClusterMetadata.open(metadata_uri, require_cluster=True) as cluster:
            bookies = await cluster.registry.bookies()
            rows: list[tuple[str, str]] = []
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
        async with await ClusterMetadata.open(metadata_uri, require_cluster=True) as cluster:
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


# -- ledgers ---------------------------------------------------------------------------------
def _client(metadata_uri: str) -> BookKeeper:
    return BookKeeper(metadata_uri)


def _printable(data: bytes, as_hex: bool) -> str:
    if not as_hex:
        try:
            text = data.decode()
            if text.isprintable():
                return text
        except UnicodeDecodeError:
            pass
    return "0x" + data.hex()


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    )


@shell.command()
@_METADATA
@click.option("--ensemble", default=3, show_default=True, type=click.IntRange(1))
@click.option("--write-quorum", default=3, show_default=True, type=click.IntRange(1))
@click.option("--ack-quorum", default=2, show_default=True, type=click.IntRange(1))
@click.option("--entries", default=1000, show_default=True, type=click.IntRange(1))
@click.option("--entry-size", default=100, show_default=True, type=click.IntRange(0))
@click.option("--keep", is_flag=True, help="Keep the ledger instead of deleting it.")
def simpletest(
    metadata_uri: str,
    ensemble: int,
    write_quorum: int,
    ack_quorum: int,
    entries: int,
    entry_size: int,
    keep: bool,
) -> None:
    """Write ENTRIES entries to a new ledger, read them back and compare, then delete it."""
    if not ensemble >= write_quorum >= ack_quorum:
        raise click.BadParameter(
            f"need --ensemble >= --write-quorum >= --ack-quorum, got "
            f"{ensemble}/{write_quorum}/{ack_quorum}"
        )

    def body(i: int) -> bytes:
        head = b"simpletest-%08d-" % i
        return (head + bytes([i % 251]) * max(0, entry_size - len(head)))[: max(entry_size, 0)]

    async def run() -> None:
        async with _client(metadata_uri) as bk:
            started = time.perf_counter()
            handle = await bk.create_ledger(
                ensemble, write_quorum, ack_quorum, password=b"simpletest"
            )
            with _progress() as progress:
                task = progress.add_task(f"writing ledger {handle.ledger_id}", total=entries)
                futures = []
                for i in range(entries):
                    futures.append(await handle.append_async(body(i)))
                    if i % 100 == 99:
                        progress.update(task, completed=sum(f.done() for f in futures))
                for future in futures:
                    await future
                progress.update(task, completed=entries)
            await handle.close()
            written_s = time.perf_counter() - started
            reader = await bk.open_ledger(handle.ledger_id, b"simpletest", recovery=False)
            count = 0
            async for entry in reader.read(0, entries - 1):
                if entry.data != body(entry.entry_id):
                    raise BKeeperError(
                        f"ledger {handle.ledger_id} entry {entry.entry_id} reads back different"
                    )
                count += 1
            if count != entries:
                raise BKeeperError(f"read {count} of {entries} entries back")
            if not keep:
                await bk.delete_ledger(handle.ledger_id)
            click.echo(
                f"simpletest ok: ledger {handle.ledger_id}, {entries} entries of {entry_size} B "
                f"written ({entries / written_s:,.0f} entries/s) and read back"
                + (" (kept)" if keep else " (deleted)")
            )

    _run(run())


@shell.command()
@_METADATA
@click.option("--meta", "with_meta", is_flag=True, help="Also show each ledger's metadata.")
def listledgers(metadata_uri: str, with_meta: bool) -> None:
    """A table of the ledger ids (with --meta: state, quorums, last entry, length)."""

    async def run() -> None:
        async with _client(metadata_uri) as bk:
            table = Table(title=f"ledgers at {metadata_uri}")
            columns = ["ledger"]
            if with_meta:
                columns += ["state", "E/Qw/Qa", "last entry", "length", "digest"]
            for column in columns:
                table.add_column(column, justify="right" if column != "state" else "left")
            count = 0
            async for ledger_id in bk.list_ledgers():
                count += 1
                if not with_meta:
                    table.add_row(str(ledger_id))
                    continue
                try:
                    meta = await bk.ledger_metadata(ledger_id)
                except LedgerNotFoundError:
                    continue  # deleted meanwhile
                table.add_row(
                    str(ledger_id),
                    meta.state.name,
                    f"{meta.ensemble_size}/{meta.write_quorum}/{meta.ack_quorum}",
                    str(meta.last_entry_id),
                    f"{meta.length:,}",
                    meta.digest_type.name,
                )
            _console().print(table)
            if not count:
                click.echo("no ledgers", err=True)

    _run(run())


@shell.command()
@_METADATA
@click.argument("ledger_id", type=click.IntRange(0))
def ledgermetadata(metadata_uri: str, ledger_id: int) -> None:
    """Print one ledger's metadata: state, quorums, digest, end, segments and custom metadata."""

    async def run() -> None:
        async with _client(metadata_uri) as bk:
            meta = await bk.ledger_metadata(ledger_id)
            table = Table(title=f"ledger {ledger_id}", show_header=False)
            table.add_column("field")
            table.add_column("value")
            created = (
                time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(meta.ctime_ms / 1000)) + " UTC"
                if meta.ctime_ms
                else "-"
            )
            rows: list[tuple[str, str]] = [
                ("state", meta.state.name),
                ("ensemble / write quorum / ack quorum",
                 f"{meta.ensemble_size} / {meta.write_quorum} / {meta.ack_quorum}"),
                ("digest", meta.digest_type.name),
                ("last entry", str(meta.last_entry_id)),
                ("length", f"{meta.length:,} bytes"),
                ("created", created),
                ("metadata format", str(meta.format_version)),
            ]  # fmt: skip
            for first, ensemble in meta.segments.items():
                rows.append((f"segment from entry {first}", ", ".join(ensemble)))
            for key, raw in sorted(meta.custom_metadata.items()):
                rows.append((f"custom {key}", _printable(raw, False)))
            for field_name, text in rows:
                table.add_row(field_name, text)
            _console().print(table)

    _run(run())


@shell.command()
@_METADATA
@click.argument("ledger_id", type=click.IntRange(0))
@click.option("--from", "first", default=0, show_default=True, type=click.IntRange(0))
@click.option("--to", "last", default=None, type=click.IntRange(0), help="Default: the LAC.")
@click.option("--password", default="", help="The ledger's password.")
@click.option(
    "--recovery/--no-recovery",
    default=False,
    show_default=True,
    help="Open with recovery (fences the writer and seals the ledger).",
)
@click.option("--hex", "as_hex", is_flag=True, help="Print payloads as hex.")
def readledger(
    metadata_uri: str,
    ledger_id: int,
    first: int,
    last: int | None,
    password: str,
    recovery: bool,
    as_hex: bool,
) -> None:
    """Print entries of a ledger (entry id, then the payload as text or 0x-hex)."""

    async def run() -> None:
        async with _client(metadata_uri) as bk:
            handle = await bk.open_ledger(ledger_id, password.encode(), recovery=recovery)
            end = handle.last_add_confirmed
            if not handle.is_closed:
                end = await handle.read_last_add_confirmed()
            stop = end if last is None else min(last, end)
            if stop < first:
                click.echo(f"no entries in {first}..{stop} (last confirmed {end})", err=True)
                return
            with _progress() as progress:
                task = progress.add_task(f"reading ledger {ledger_id}", total=stop - first + 1)
                async for entry in handle.read(first, stop):
                    click.echo(f"{entry.entry_id}\t{_printable(entry.data, as_hex)}")
                    progress.advance(task)

    _run(run())


@shell.command()
@_METADATA
@click.argument("ledger_id", type=click.IntRange(0))
@click.option("--force", is_flag=True, help="Do not ask for confirmation.")
@click.option(
    "--no-fence",
    is_flag=True,
    help="Delete an open ledger without fencing its writer first (when its bookies are gone).",
)
def deleteledger(metadata_uri: str, ledger_id: int, force: bool, no_fence: bool) -> None:
    """Delete a ledger's metadata (bookies reclaim its data).

    An open ledger is first recovered (fenced and sealed), so its writer stops at once."""
    if not force:
        confirm_deletion(f"delete ledger {ledger_id}?")

    async def run() -> None:
        async with _client(metadata_uri) as bk:
            await bk.delete_ledger(ledger_id, fence=not no_fence)
            click.echo(f"deleted ledger {ledger_id}")

    _run(run())
