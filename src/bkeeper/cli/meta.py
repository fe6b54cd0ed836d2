"""``bkeeper meta ...``: format a cluster's metadata and show what a node holds."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

import click

from bkeeper.cli._errors import CommandError
from bkeeper.cli._options import metadata_option
from bkeeper.common.errors import BKeeperError, NoNodeError

if TYPE_CHECKING:  # imported where used: `bkeeper meta --help` loads no metadata layer
    from bkeeper.meta import BookieServiceInfo, LedgerMetadata

__all__ = ["describe_ledger", "describe_node", "meta"]

_METADATA_OPTION = metadata_option


@click.group()
def meta() -> None:
    """Cluster metadata: format it, inspect it."""


@meta.command("format")
@_METADATA_OPTION
@click.option("--force", is_flag=True, help="Delete an existing cluster's metadata first.")
def format_command(metadata_uri: str, force: bool) -> None:
    """Lay out a new cluster (LAYOUT, INSTANCEID, available/, cookies/ ...)."""
    import asyncio

    instance_id = asyncio.run(_format(metadata_uri, force))
    click.echo(f"formatted {metadata_uri}: instance id {instance_id}")


@meta.command("show")
@_METADATA_OPTION
@click.argument("path", required=False)
@click.option("--ledger", "ledger_id", type=click.IntRange(0), help="Show this ledger instead.")
def show(metadata_uri: str, path: str | None, ledger_id: int | None) -> None:
    """Print a node (absolute, or relative to the ledgers root) decoded, and its children."""
    import asyncio

    if (path is None) == (ledger_id is None):
        raise click.UsageError("give either PATH or --ledger")
    click.echo(asyncio.run(_show(metadata_uri, path, ledger_id)))


async def _format(metadata_uri: str, force: bool) -> str:
    from bkeeper.meta import ClusterMetadata

    async with await ClusterMetadata.open(metadata_uri) as metadata:
        return await metadata.format(force=force)


async def _show(metadata_uri: str, path: str | None, ledger_id: int | None) -> str:
    from bkeeper.meta import ClusterMetadata, ledger_path

    async with await ClusterMetadata.open(metadata_uri) as metadata:
        root = metadata.root
        node = ledger_path(root, ledger_id) if ledger_id is not None else _absolute(root, path)
        try:
            data, version = await metadata.store.get(node)
        except NoNodeError:
            raise CommandError(f"{node}: no such node") from None
        children = await metadata.store.children(node)
    lines = [f"{node} (version {version}, {len(data)} bytes)", describe_node(root, node, data)]
    if children:
        lines.append(f"children ({len(children)}): " + " ".join(children))
    return "\n".join(line for line in lines if line)


def _absolute(root: str, path: str | None) -> str:
    from bkeeper.meta.store import join_path

    assert path is not None
    if path.startswith("/"):
        return path.rstrip("/") or "/"
    return join_path(root, path.strip("/")) if path.strip("/") else root


def describe_node(root: str, path: str, data: bytes) -> str:
    """What a node holds, decoded by where it is in the layout (raw bytes otherwise)."""
    from bkeeper.meta import BookieServiceInfo, Cookie, decode_ledger_metadata
    from bkeeper.meta.layout import AVAILABLE, COOKIES, ledger_id_from_parts
    from bkeeper.meta.metadata_format import HEADER_KEY

    relative = path[len(root) + 1 :].split("/") if path.startswith(root + "/") else []
    try:
        if data.startswith(HEADER_KEY):
            return describe_ledger(decode_ledger_metadata(data), ledger_id_from_parts(relative))
        if relative[:1] == [AVAILABLE] and len(relative) > 1 and relative[-1] != "readonly":
            return _describe_bookie(BookieServiceInfo.decode(data, relative[-1]))
        if relative[:1] == [COOKIES] and len(relative) == 2:
            cookie = Cookie.decode(data)
            return f"cookie of {cookie.bookie_id}:\n{data.decode().rstrip()}"
    except BKeeperError as exc:
        return f"(undecodable: {exc})\n{data!r}"
    return _describe_raw(data)


def describe_ledger(metadata: LedgerMetadata, ledger_id: int | None = None) -> str:
    """A readable multi-line summary of ledger metadata (the password is not shown)."""
    title = f"ledger {ledger_id}" if ledger_id is not None else "ledger"
    ctime = "-"
    if metadata.ctime_ms is not None:
        ctime = datetime.datetime.fromtimestamp(metadata.ctime_ms / 1000, datetime.UTC).isoformat()
    lines = [
        f"{title}: {metadata.state.name}, metadata format {metadata.format_version}",
        f"  ensemble/write/ack quorum: "
        f"{metadata.ensemble_size}/{metadata.write_quorum}/{metadata.ack_quorum}",
        f"  digest: {metadata.digest_type.name}, password: {len(metadata.password)} bytes",
        f"  last entry: {metadata.last_entry_id}, length: {metadata.length} bytes",
        f"  created: {ctime}, ctoken: {metadata.ctoken}",
        "  segments:",
        *(f"    from entry {first}: {', '.join(e)}" for first, e in metadata.segments.items()),
    ]
    for key, value in sorted(metadata.custom_metadata.items()):
        lines.append(f"  custom {key} = {value!r}")
    return "\n".join(lines)


def _describe_bookie(info: BookieServiceInfo) -> str:
    lines = ["bookie service info:"]
    for e in info.endpoints:
        extras = f" auth={list(e.auth)}" if e.auth else ""
        extras += f" extensions={list(e.extensions)}" if e.extensions else ""
        lines.append(f"  endpoint {e.id}: {e.protocol}://{e.host}:{e.port}{extras}")
    lines.extend(f"  {key} = {value}" for key, value in sorted(info.properties.items()))
    return "\n".join(lines)


def _describe_raw(data: bytes) -> str:
    if not data:
        return "(no data)"
    try:
        text = data.decode()
    except UnicodeDecodeError:
        return data.hex(" ")
    return text if text.isprintable() or "\n" in text else repr(data)
