"""``bkeeper shell listbookies|bookieinfo|clusterinfo|whatisinstanceid|endpointinfo|
initnewcluster|nukeexistingcluster``: the cluster as a whole, in the manner of
Apache BookKeeper's ``bookkeeper shell`` commands of the same names (docs/operations.md).

Thin: parse, call the metadata store or the client, print a table (``--json`` for scripts).
Commands that wait show progress on stderr (only on a terminal). A mistake (an unknown
bookie, a root that is not the URI's) or a refusal (nuking a cluster whose bookies still run)
is one ``error:`` line on stderr and exit status 1; a bad option is exit status 2.
"""

from __future__ import annotations

import asyncio
import time
import typing
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from bkeeper.cli._disk import JSON_OPTION, print_json, show
from bkeeper.cli._errors import CommandError
from bkeeper.cli._options import metadata_option
from bkeeper.cli._progress import elapsed, status_line
from bkeeper.cli._tables import titled_table
from bkeeper.cli.shell_admin import endpoint_url
from bkeeper.client.bookie_client import BookieClient
from bkeeper.client.config import ClientConfig
from bkeeper.client.handshake import ClientSecurity, check_credentials, client_security
from bkeeper.client.placement import DEFAULT_RACK
from bkeeper.client.refusal import eua_unadmitted
from bkeeper.common.errors import (
    BKeeperError,
    ClusterExistsError,
    NoNodeError,
    UnauthorizedAccessError,
)
from bkeeper.common.tasks import within
from bkeeper.meta.bookie_info import HTTP_ENDPOINT_ID, BookieServiceInfo, Endpoint
from bkeeper.meta.cluster import ClusterMetadata, delete_tree
from bkeeper.meta.summary import cluster_summary
from bkeeper.wire.codes import GetBookieInfoField, Protocol, StatusCode, status_text
from bkeeper.wire.messages import GetBookieInfoRequest, GetBookieInfoResponse

__all__ = ["BOOKIE_INFO_TIMEOUT_S", "Advance", "commands", "progress", "registered"]

T = TypeVar("T")

#: How long ``bookieinfo`` waits for each bookie's answer by default.
BOOKIE_INFO_TIMEOUT_S = 10.0
#: Bookies ``bookieinfo`` asks at once.
_BOOKIE_INFO_CONCURRENCY = 16

_bookie_option = click.option(
    "--bookie",
    "bookie_id",
    required=True,
    metavar="ID",
    help="The bookie's id (host:port unless it has a --bookie-id), as listbookies shows it.",
)


def _run(coro: Coroutine[Any, Any, T]) -> T:
    from bkeeper.common.loop import run_event_loop

    return run_event_loop(coro)


class Advance(typing.Protocol):
    """``advance(done, total)``, or with the item just done: ``advance(3, 40, "ledger 12")``
    shows ``ledger 12 (3 of 40)``."""

    def __call__(self, done: int, total: int | None, item: str | None = None) -> None: ...


@contextmanager
def progress(description: str) -> Iterator[Advance]:
    """A bar on stderr when it is a terminal; otherwise a plain line
    (``description: 3 of 40, 12 s``, or ``description: ledger 12 (3 of 40), 12 s``) every
    :data:`~bkeeper.cli._progress.PLAIN_INTERVAL_S` while the work lasts. Yields
    :class:`Advance` (total None: not known yet)."""
    console = Console(stderr=True)
    if not console.is_terminal:
        state: list[tuple[int, int | None, str | None]] = [(0, None, None)]
        started = time.monotonic()

        def describe() -> str:
            done, total, item = state[0]
            count = f"{done}" if total is None else f"{done} of {total}"
            where = count if item is None else f"{item} ({count})"
            return f"{description}: {where}, {elapsed(time.monotonic() - started)}"

        def note(done: int, total: int | None, item: str | None = None) -> None:
            state[0] = (done, total, item)

        with status_line(describe, console):
            yield note
        return
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )
    with bar:
        task = bar.add_task(description, total=None)

        def advance(done: int, total: int | None, item: str | None = None) -> None:
            shown = description if item is None else f"{description}: {item}"
            bar.update(task, completed=done, total=total, description=shown)

        yield advance


async def registered(cluster: ClusterMetadata, bookie_id: str, where: str) -> BookieServiceInfo:
    """What ``bookie_id`` registered; ``CommandError`` naming the bookie when it is not."""
    try:
        return await cluster.registry.service_info(bookie_id)
    except NoNodeError:
        raise CommandError(
            f"bookie {bookie_id} is not registered at {where} "
            "(bkeeper shell listbookies --all shows those that are)"
        ) from None


def _address(info: BookieServiceInfo, bookie_id: str) -> str:
    endpoint = info.endpoint()
    return f"{endpoint.host}:{endpoint.port}" if endpoint else bookie_id


def _http(info: BookieServiceInfo) -> str | None:
    endpoint = info.endpoint(HTTP_ENDPOINT_ID)
    if endpoint is None:
        return None
    return endpoint_url(endpoint.protocol, endpoint.host, endpoint.port)


# -- listbookies ---------------------------------------------------------------------------
@click.command()
@metadata_option
@click.option("--rw", "writable", is_flag=True, help="Writable bookies (the default).")
@click.option("--ro", "--readonly", "readonly", is_flag=True, help="Read-only bookies.")
@click.option("--all", "show_all", is_flag=True, help="Writable and read-only bookies.")
@JSON_OPTION
def listbookies(
    metadata_uri: str, writable: bool, readonly: bool, show_all: bool, as_json: bool
) -> None:
    """List the registered bookies: id, mode, network location, address and admin HTTP
    address."""
    if show_all + writable + readonly > 1:
        raise click.UsageError("give at most one of --rw, --ro and --all")

    async def run() -> list[dict[str, object]]:
        async with await ClusterMetadata.open(metadata_uri, require_cluster=True) as cluster:
            bookies = await cluster.registry.bookies()
            locations = await cluster.racks.locations()
            rows: list[tuple[str, str]] = []
            if not readonly:
                rows += [(b, "writable") for b in sorted(bookies.writable)]
            if readonly or show_all:
                rows += [(b, "read-only") for b in sorted(bookies.read_only)]
            out: list[dict[str, object]] = []
            for bookie_id, mode in rows:
                try:
                    info = await cluster.registry.service_info(bookie_id)
                except NoNodeError:
                    continue  # it left between the listing and this read
                out.append(
                    {"bookie_id": bookie_id, "mode": mode,
                     "location": locations.get(bookie_id, DEFAULT_RACK),
                     "address": _address(info, bookie_id), "http": _http(info)}
                )  # fmt: skip
            return out

    rows = _run(run())
    if as_json:
        print_json(rows)
        return
    table = titled_table(f"bookies at {metadata_uri}")
    for column in ("bookie id", "mode", "location", "address", "admin http"):
        table.add_column(column)
    for row in rows:
        table.add_row(str(row["bookie_id"]), str(row["mode"]), str(row["location"]),
                      str(row["address"]), str(row["http"] or "-"))  # fmt: skip
    show(table)
    if not rows:
        click.echo("no bookies registered", err=True)


# -- bookieinfo ----------------------------------------------------------------------------
async def _info_of(
    endpoint: Endpoint, timeout_s: float, security: ClientSecurity | None
) -> GetBookieInfoResponse:
    """The bookie's answer to GET_BOOKIE_INFO, over a connection with the command's client
    security (``AuthenticationError`` saying what is missing, if the bookie requires more)."""
    host, port = endpoint.host, endpoint.port
    check_credentials(f"{host}:{port}", endpoint, security)
    client = await BookieClient.connect(
        host, port, Protocol.V3, timeout_s=timeout_s, security=security
    )
    try:
        mask = GetBookieInfoField.TOTAL_DISK_CAPACITY | GetBookieInfoField.FREE_DISK_SPACE
        response: GetBookieInfoResponse = await within(
            client.request(GetBookieInfoRequest(int(mask))), timeout_s
        )
        return response
    finally:
        await client.aclose()


async def _bookie_info(
    cluster: ClusterMetadata,
    bookie_id: str,
    mode: str,
    timeout_s: float,
    security: ClientSecurity | None,
) -> dict[str, object]:
    row: dict[str, object] = {
        "bookie_id": bookie_id, "mode": mode,
        "free_bytes": None, "total_bytes": None, "error": None,
    }  # fmt: skip
    try:
        endpoint = (await cluster.registry.service_info(bookie_id)).endpoint()
    except NoNodeError:
        row["error"] = "no longer registered"
        return row
    if endpoint is None:
        row["error"] = "registered no bookie endpoint"
        return row
    try:
        info = await _info_of(endpoint, timeout_s, security)
    except TimeoutError:
        row["error"] = f"no answer in {timeout_s:g} s"
        return row
    except UnauthorizedAccessError as exc:  # says what the client lacks
        row["error"] = str(exc)
        return row
    except (BKeeperError, OSError) as exc:
        row["error"] = f"unreachable: {exc}"
        return row
    if info.status is StatusCode.EUA:  # a bookie that did not publish what it requires
        row["error"] = eua_unadmitted(f"bookie {bookie_id}")
        return row
    if info.status is not StatusCode.EOK:
        row["error"] = f"answered {status_text(info.status)}"
        return row
    row["free_bytes"], row["total_bytes"] = info.free_disk_space, info.total_disk_capacity
    return row


def _gib(value: object) -> str:
    return "-" if not isinstance(value, int) else f"{value / 2**30:,.1f} GiB"


@click.command()
@metadata_option
@JSON_OPTION
@click.option(
    "--timeout", "timeout_s", default=BOOKIE_INFO_TIMEOUT_S, show_default=True,
    type=click.FloatRange(min=0, min_open=True), help="Seconds to wait for each bookie.",
)  # fmt: skip
def bookieinfo(metadata_uri: str, as_json: bool, timeout_s: float) -> None:
    """Free and total disk space of every registered bookie (GET_BOOKIE_INFO); exit status 1
    when a bookie does not answer."""

    security = client_security(ClientConfig())  # the command's TLS and token, if any

    async def run() -> list[dict[str, object]]:
        async with await ClusterMetadata.open(metadata_uri, require_cluster=True) as cluster:
            bookies = await cluster.registry.bookies()
            every = [(b, "writable") for b in sorted(bookies.writable)]
            every += [(b, "read-only") for b in sorted(bookies.read_only)]
            limit = asyncio.Semaphore(_BOOKIE_INFO_CONCURRENCY)

            async def one(bookie_id: str, mode: str) -> dict[str, object]:
                async with limit:
                    return await _bookie_info(cluster, bookie_id, mode, timeout_s, security)

            return list(await asyncio.gather(*(one(b, m) for b, m in every)))

    rows = _run(run())
    if as_json:
        print_json(rows)
    else:
        table = titled_table(f"bookie info at {metadata_uri}")
        for column in ("bookie id", "mode", "free", "total", "used"):
            table.add_column(column, justify="left" if column in ("bookie id", "mode") else "right")
        for row in rows:
            free, total = row["free_bytes"], row["total_bytes"]
            if row["error"] is not None:
                table.add_row(str(row["bookie_id"]), str(row["mode"]), str(row["error"]), "", "")
                continue
            used = "-"
            if isinstance(free, int) and isinstance(total, int) and total:
                used = f"{100 * (1 - free / total):.1f}%"
            table.add_row(str(row["bookie_id"]), str(row["mode"]), _gib(free), _gib(total), used)
        show(table)
    failed = [str(row["bookie_id"]) for row in rows if row["error"] is not None]
    if failed:
        raise CommandError(
            f"{len(failed)} of {len(rows)} bookies did not answer: {', '.join(failed)}"
        )
    if not rows:
        click.echo("no bookies registered", err=True)


# -- clusterinfo, whatisinstanceid, endpointinfo -------------------------------------------
@click.command()
@metadata_option
@JSON_OPTION
def clusterinfo(metadata_uri: str, as_json: bool) -> None:
    """The cluster at a glance: bookies writable, read-only and unavailable (a cookie but no
    registration), the auditor, re-replication on or off, under-replicated ledgers."""

    async def run() -> Any:
        async with await ClusterMetadata.open(metadata_uri, require_cluster=True) as cluster:
            return await cluster_summary(cluster)

    summary = _run(run())
    if as_json:
        print_json(summary.as_json())
        return
    table = titled_table(f"cluster at {metadata_uri}", show_header=False)
    table.add_column("field")
    table.add_column("value")
    under = f"{summary.under_replicated:,}" + (
        " or more" if summary.under_replicated_capped else ""
    )
    delay = summary.lost_bookie_recovery_delay_s
    rows = [
        ("instance id", summary.instance_id),
        ("bookies", f"{summary.total} known: {len(summary.writable)} writable, "
                    f"{len(summary.read_only)} read-only, {len(summary.unavailable)} unavailable"),
        ("writable", ", ".join(summary.writable) or "-"),
        ("read-only", ", ".join(summary.read_only) or "-"),
        ("unavailable", ", ".join(summary.unavailable) or "-"),
        ("auditor", summary.auditor or "none elected"),
        ("re-replication", "enabled" if summary.replication_enabled else "disabled"),
        ("under-replicated ledgers", under),
        ("lost bookie recovery delay", "default" if delay is None else f"{delay} s"),
    ]  # fmt: skip
    for name, value in rows:
        table.add_row(name, value)
    show(table)


@click.command()
@metadata_option
def whatisinstanceid(metadata_uri: str) -> None:
    """Print the cluster's instance id (the INSTANCEID node, in every bookie's cookie)."""

    async def run() -> str | None:
        async with await ClusterMetadata.open(metadata_uri, require_cluster=True) as cluster:
            return await cluster.instance_id()

    instance_id = _run(run())
    if instance_id is None:  # deleted since require_cluster looked
        raise CommandError(f"no cluster at {metadata_uri}")
    click.echo(instance_id)


@click.command()
@metadata_option
@_bookie_option
@JSON_OPTION
def endpointinfo(metadata_uri: str, bookie_id: str, as_json: bool) -> None:
    """The endpoints (bookie protocol, admin HTTP) and properties a bookie registered."""

    async def run() -> BookieServiceInfo:
        async with await ClusterMetadata.open(metadata_uri, require_cluster=True) as cluster:
            return await registered(cluster, bookie_id, metadata_uri)

    info = _run(run())
    if as_json:
        print_json({
            "bookieId": bookie_id,
            "endpoints": [
                {"id": e.id, "host": e.host, "port": e.port, "protocol": e.protocol,
                 "auth": list(e.auth), "extensions": list(e.extensions)}
                for e in info.endpoints
            ],
            "properties": dict(sorted(info.properties.items())),
        })  # fmt: skip
        return
    table = titled_table(f"endpoints of {bookie_id}")
    for column in ("id", "protocol", "host", "port", "auth", "extensions"):
        table.add_column(column, justify="right" if column == "port" else "left")
    for e in info.endpoints:
        table.add_row(e.id, e.protocol, e.host, str(e.port), ", ".join(e.auth) or "-",
                      ", ".join(e.extensions) or "-")  # fmt: skip
    tables = [table]
    if info.properties:
        props = titled_table("properties")
        props.add_column("name")
        props.add_column("value")
        for name, value in sorted(info.properties.items()):
            props.add_row(name, value)
        tables.append(props)
    show(*tables)


# -- initnewcluster, nukeexistingcluster ---------------------------------------------------
@click.command()
@metadata_option
def initnewcluster(metadata_uri: str) -> None:
    """Create the metadata of a new cluster (LAYOUT, INSTANCEID, available/, cookies/,
    under-replication); refused when the root holds a cluster already."""

    async def run() -> str:
        async with await ClusterMetadata.open(metadata_uri) as cluster:
            try:
                return await cluster.format()
            except ClusterExistsError:
                existing = await cluster.instance_id()
                raise CommandError(
                    f"{metadata_uri} holds a cluster already (instance id {existing}); "
                    "bkeeper shell nukeexistingcluster deletes one"
                ) from None

    instance_id = _run(run())
    click.echo(f"created a cluster at {metadata_uri}: instance id {instance_id}")


@click.command()
@metadata_option
@click.option(
    "--root", "root", required=True, metavar="PATH",
    help="The cluster's root, as in the metadata URI (a check against a wrong URI).",
)  # fmt: skip
@click.option("--instance-id", metavar="ID", help="The cluster's instance id (whatisinstanceid).")
@click.option("--force", is_flag=True, help="Delete without checking the instance id.")
def nukeexistingcluster(metadata_uri: str, root: str, instance_id: str | None, force: bool) -> None:
    """Delete all the metadata of a cluster: every ledger, cookie and the layout. Refused
    while bookies are registered or auto-recovery runs. Bookie data left on disk needs
    bookieformat."""
    if (instance_id is None) == (not force):
        raise click.UsageError("give either --instance-id ID or --force")

    async def run() -> int:
        async with await ClusterMetadata.open(metadata_uri) as cluster:
            if root.rstrip("/") != cluster.root:
                raise CommandError(
                    f"--root {root} is not the root of {metadata_uri} ({cluster.root})"
                )
            existing = await cluster.instance_id()
            if existing is None and await cluster.store.exists(cluster.root) is None:
                raise CommandError(f"no cluster at {metadata_uri}: nothing to delete")
            if instance_id is not None and instance_id != existing:
                raise CommandError(
                    f"--instance-id {instance_id} is not the instance id of the cluster at "
                    f"{metadata_uri} ({existing or 'none'})"
                )
            bookies = await cluster.registry.bookies()
            running = sorted(bookies.writable | bookies.read_only)
            if running:
                raise CommandError(
                    f"{len(running)} bookies are registered ({', '.join(running)}): "
                    "stop every bookie before deleting the cluster"
                )
            auditor = await cluster.underreplication.current_auditor()
            if auditor is not None:
                raise CommandError(
                    f"auto-recovery runs ({auditor} is the auditor): stop every "
                    "'bkeeper autorecovery' process before deleting the cluster"
                )
            with progress(f"deleting {cluster.root}") as advance:
                return await delete_tree(cluster.store, cluster.root, advance)

    nodes = _run(run())
    click.echo(f"deleted the cluster at {metadata_uri}: {nodes} nodes")


commands = (
    listbookies,
    bookieinfo,
    clusterinfo,
    whatisinstanceid,
    endpointinfo,
    initnewcluster,
    nukeexistingcluster,
)
