"""``bkeeper shell ...``: admin commands in the manner of BookKeeper's ``bookkeeper shell``."""

from __future__ import annotations

import asyncio
import json
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

from bkeeper.cli import (
    shell_admin,
    shell_cookie,
    shell_disk,
    shell_ledger,
    shell_ops,
    shell_recovery,
    shell_sanity,
)
from bkeeper.cli._options import confirm_deletion, metadata_option
from bkeeper.cli.shell_ledger import metadata_json, printable
from bkeeper.client.bookkeeper import BookKeeper
from bkeeper.common.errors import BKeeperError

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
# auto-recovery (recover, decommissionbookie, listunderreplicated, whoisauditor, ...);
# the cluster (listbookies, clusterinfo, initnewcluster, ...); ledgers (listledgers,
# readledger, ledger); cookies and bookieformat.
for _command in (
    *shell_disk.commands,
    *shell_admin.commands,
    *shell_recovery.commands,
    *shell_ops.commands,
    *shell_ledger.commands,
    *shell_cookie.commands,
    *shell_sanity.commands,
):
    shell.add_command(_command)


# -- ledgers ---------------------------------------------------------------------------------
def _client(metadata_uri: str) -> BookKeeper:
    return BookKeeper(metadata_uri)


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
                # All awaited (a failed ledger fails every pending append with one error:
                # the first is raised, none is left unretrieved).
                outcomes = await asyncio.gather(*futures, return_exceptions=True)
                for outcome in outcomes:
                    if isinstance(outcome, BaseException):
                        raise outcome
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
@click.argument("ledger_id", type=click.IntRange(0))
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def ledgermetadata(metadata_uri: str, ledger_id: int, as_json: bool) -> None:
    """Print one ledger's metadata: state, quorums, digest, end, segments and custom metadata."""

    async def run() -> None:
        async with _client(metadata_uri) as bk:
            meta = await bk.ledger_metadata(ledger_id)
            if as_json:
                click.echo(json.dumps(metadata_json(ledger_id, meta), indent=2))
                return
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
                rows.append((f"custom {key}", printable(raw, False)))
            for field_name, text in rows:
                table.add_row(field_name, text)
            _console().print(table)

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
