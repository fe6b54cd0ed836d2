"""``bkeeper shell racks|setrack|deleterack|relocateledgers|setreplication``: where bookies
are, moving ledgers that break the placement policy, and changing a sealed ledger's
replication (docs/operations.md, "Racks and regions").

``setrack``/``deleterack`` edit the cluster's rack information (:mod:`bkeeper.meta.racks`,
the node Pulsar's ``pulsar-admin bookies set-bookie-rack`` writes); ``racks`` lists it with
each bookie's registration. ``relocateledgers`` is Java 4.17's command: it moves the ledgers
whose write quorums span too few racks (:mod:`bkeeper.autorecovery.relocate`), after a dry
run if asked (``--dry-run``). Thin: parse, call the library, print a table or ``--json``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Coroutine
from typing import Any, TypeVar

import click

from bkeeper.autorecovery.config import AutoRecoveryConfig
from bkeeper.autorecovery.relayout import RelayoutResult, relayout_ledger
from bkeeper.autorecovery.relocate import Relocation, relocate_ledgers
from bkeeper.cli._disk import JSON_OPTION, print_json
from bkeeper.cli._errors import CommandError
from bkeeper.cli._options import metadata_option
from bkeeper.cli._tables import console, titled_table
from bkeeper.cli.shell_ops import progress as progress_bar
from bkeeper.client import BookKeeper, ClientConfig
from bkeeper.client.placement import PLACEMENTS
from bkeeper.common.errors import ConfigError, LedgerNotFoundError, NotEnoughBookiesError
from bkeeper.meta.cluster import ClusterMetadata

__all__ = ["deleterack", "racks", "relocateledgers", "setrack", "setreplication"]

T = TypeVar("T")


def _run(coro: Coroutine[Any, Any, T]) -> T:
    from bkeeper.common.loop import run_event_loop

    return run_event_loop(coro)


@click.command()
@metadata_option
@JSON_OPTION
def racks(metadata_uri: str, as_json: bool) -> None:
    """Every bookie's network location (rack information and registrations together)."""

    async def run() -> list[dict[str, str]]:
        async with await ClusterMetadata.open(metadata_uri, require_cluster=True) as cluster:
            groups, _version = await cluster.racks.groups()
            bookies = await cluster.registry.bookies()
        rows: dict[str, dict[str, str]] = {}
        for group, entries in groups.items():
            for bookie, entry in entries.items():
                rows.setdefault(
                    bookie,
                    {"bookie_id": bookie, "location": entry.rack or "(unreadable)",
                     "hostname": entry.hostname, "group": group},
                )  # fmt: skip
        for bookie in bookies.writable | bookies.read_only:
            rows.setdefault(
                bookie,
                {"bookie_id": bookie, "location": "/default-rack (none set)", "hostname": "",
                 "group": ""},
            )  # fmt: skip
        for bookie, row in rows.items():
            row["mode"] = (
                "writable" if bookie in bookies.writable
                else "read-only" if bookie in bookies.read_only
                else "not registered"
            )  # fmt: skip
        return [rows[b] for b in sorted(rows)]

    rows = _run(run())
    if as_json:
        print_json(rows)
        return
    table = titled_table(f"bookie locations at {metadata_uri}")
    for column in ("bookie id", "location", "mode", "host name", "group"):
        table.add_column(column)
    for row in rows:
        table.add_row(row["bookie_id"], row["location"], row["mode"], row["hostname"] or "-",
                      row["group"] or "-")  # fmt: skip
    console().print(table)
    if not rows:
        click.echo("no bookie registered and no location set", err=True)


@click.command()
@metadata_option
@click.argument("bookie")
@click.argument("location")
@click.option("--hostname", default="", help="The bookie's host name, kept beside it (Pulsar's).")
def setrack(metadata_uri: str, bookie: str, location: str, hostname: str) -> None:
    """Set BOOKIE's network LOCATION (/rack or /region/rack) in the cluster's rack information;
    new ensembles and repairs use it at once, existing ledgers move with relocateledgers."""

    async def run() -> bool:
        async with await ClusterMetadata.open(metadata_uri, require_cluster=True) as cluster:
            return await cluster.racks.set(bookie, location, hostname)

    try:
        changed = _run(run())
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    click.echo(f"{bookie}: {location}" + ("" if changed else " (unchanged)"))


@click.command()
@metadata_option
@click.argument("bookie")
def deleterack(metadata_uri: str, bookie: str) -> None:
    """Remove BOOKIE's network location from the cluster's rack information (it is then on
    /default-rack, unless the bookie sets one again when it starts)."""

    async def run() -> bool:
        async with await ClusterMetadata.open(metadata_uri, require_cluster=True) as cluster:
            return await cluster.racks.delete(bookie)

    if not _run(run()):
        raise CommandError(f"{bookie} has no location set (bkeeper shell racks lists them)")
    click.echo(f"{bookie}: location removed")


def _ledger_ids(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        ids = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a comma-separated list of ledger ids") from None
    if not ids or any(i < 0 for i in ids):
        raise click.BadParameter(f"{text!r}: ledger ids are integers >= 0")
    return ids


@click.command()
@metadata_option
@click.option("--ledger-ids", "ledger_ids", default=None, metavar="ID,ID,...",
              help="Only these ledgers (default: every ledger).")  # fmt: skip
@click.option("--dry-run", is_flag=True, help="Only show which bookies would move where.")
@click.option("--placement", type=click.Choice(PLACEMENTS[1:]), default="rackaware",
              show_default=True, help="The policy to meet.")  # fmt: skip
@click.option("--min-racks-per-write-quorum", "min_racks", type=click.IntRange(1), default=2,
              show_default=True, help="Racks every write quorum must span.")  # fmt: skip
@JSON_OPTION
def relocateledgers(
    metadata_uri: str,
    ledger_ids: str | None,
    dry_run: bool,
    placement: str,
    min_racks: int,
    as_json: bool,
) -> None:
    """Move the ledgers whose write quorums span fewer racks than the placement asks onto
    bookies that mend them (Java's relocateledgers); try --dry-run first."""
    wanted = _ledger_ids(ledger_ids)
    config = ClientConfig(placement=placement, min_racks_per_write_quorum=min_racks)

    async def run() -> list[Relocation]:
        async with BookKeeper(metadata_uri, config) as bk:
            with progress_bar("planning" if dry_run else "relocating ledgers") as progress:
                return await relocate_ledgers(
                    bk, AutoRecoveryConfig(), ledger_ids=wanted, dry_run=dry_run,
                    on_progress=progress,
                )  # fmt: skip

    try:
        results = _run(run())
    except ConfigError as exc:
        raise CommandError(str(exc)) from None
    if as_json:
        print_json([dataclasses.asdict(r) for r in results])
    else:
        shown = [r for r in results if r.state != "adheres"]
        if not shown:
            click.echo(f"{len(results)} ledgers checked: every one adheres to the placement")
            return
        title = "plan" if dry_run else "relocation"
        table = titled_table(f"{title}: {len(shown)} of {len(results)} ledgers break the placement")
        for column in ("ledger", "state", "segments", "moves", "entries", "reason"):
            table.add_column(column, justify="right" if column == "entries" else "left")
        for r in shown:
            moves = "; ".join(
                f"from {first}: " + ", ".join(f"{old} -> {new}" for old, new in pairs.items())
                for first, pairs in sorted(r.moves.items())
            )
            table.add_row(str(r.ledger_id), r.state, ", ".join(map(str, r.violating)),
                          moves or "-", f"{r.entries:,}", r.reason)  # fmt: skip
        console().print(table)
    bad = [r for r in results if r.state in ("failed", "cannot")]
    if bad:
        first = bad[0]
        raise CommandError(
            f"{len(bad)} of {len(results)} ledgers still break the placement (ledger "
            f"{first.ledger_id}: {first.reason})"
        )


@click.command()
@metadata_option
@click.argument("ledger_id", type=click.IntRange(0))
@click.option("-e", "--ensemble", "ensemble_size", type=click.IntRange(1), required=True,
              help="Ensemble size.")  # fmt: skip
@click.option("-w", "--write-quorum", type=click.IntRange(1), required=True, help="Write quorum.")
@click.option("-a", "--ack-quorum", type=click.IntRange(1), required=True, help="Ack quorum.")
@click.option("--dry-run", is_flag=True, help="Only show the new ensembles and the copies.")
@JSON_OPTION
def setreplication(
    metadata_uri: str,
    ledger_id: int,
    ensemble_size: int,
    write_quorum: int,
    ack_quorum: int,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Change a sealed ledger's ensemble size and quorums online: its entries are copied to
    the bookies the new layout adds, then its metadata changes (readers are not stopped)."""

    async def run() -> RelayoutResult:
        async with BookKeeper(metadata_uri) as bk:
            return await relayout_ledger(
                bk, ledger_id, ensemble_size, write_quorum, ack_quorum, AutoRecoveryConfig(),
                dry_run=dry_run,
            )  # fmt: skip

    try:
        result = _run(run())
    except (ConfigError, NotEnoughBookiesError) as exc:
        raise CommandError(str(exc)) from None
    except LedgerNotFoundError:
        raise CommandError(f"no ledger {ledger_id}") from None
    if as_json:
        print_json(dataclasses.asdict(result))
        return
    before = "/".join(map(str, result.replication_before))
    after = "/".join(map(str, result.replication_after))
    copies = f"{result.entries:,} entries {'to copy' if dry_run else 'copied'}"
    click.echo(f"ledger {ledger_id}: {before} -> {after} ({result.state}; {copies})")
    for first, ensemble in sorted(result.ensembles.items()):
        click.echo(f"  from entry {first}: {', '.join(ensemble)}")
