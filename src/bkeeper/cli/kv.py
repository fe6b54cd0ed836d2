"""``bkeeper kv``: serve a replicated key-value store, and call one.

``serve`` runs one member (see :mod:`bkeeper.kv.server`); ``get``, ``put``, ``delete``,
``cas`` and ``list`` find the store's members through the metadata store (or take ``--url``)
and call it with the Python client. Values are UTF-8 text; ``--json`` prints JSON.

With the ``bkeeper`` group's ``--auth-token-file`` (``BKEEPER_AUTH_TOKEN_FILE``), ``serve``
admits only requests bearing that token and the client commands send it (docs/kv.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import click

from bkeeper.cli._options import metadata_option

if TYPE_CHECKING:  # imported where used: `kv --help` loads none, `kv put` not the server
    from bkeeper.kv.client import KvClient
    from bkeeper.kv.server import KvServerConfig

__all__ = ["kv"]


@click.group()
@click.option(
    "--timeout",
    default=30.0,
    show_default=True,
    type=click.FloatRange(0.1, 3600),
    help="Seconds a client command keeps trying the store's members.",
)
@click.pass_context
def kv(ctx: click.Context, timeout: float) -> None:
    """A replicated key-value store on named logs (leader election, linearizable reads)."""
    ctx.ensure_object(dict)
    ctx.obj["kv_timeout_s"] = timeout


name_option = click.option("--name", "store_name", required=True, help="The store's name.")


@kv.command()
@metadata_option
@name_option
@click.option("--http-port", default=0, show_default=True, type=click.IntRange(0, 65535))
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--advertised-host", default=None, help="Host in the URL others use (--host).")
@click.option("--member-id", default=None, help="This member's id (default: host:pid).")
@click.option(
    "--session-timeout-ms",
    default=10_000,
    show_default=True,
    type=click.IntRange(1000, 60_000),
    help="ZooKeeper session timeout: how long a paused leader keeps leadership.",
)
@click.option(
    "--snapshot-every",
    default=100_000,
    show_default=True,
    type=click.IntRange(0),
    help="Commands between snapshots (0: none).",
)
@click.option(
    "--roll-bytes",
    default=64 * 1024 * 1024,
    show_default=True,
    type=click.IntRange(1),
    help="Log ledger size before a roll (truncation drops whole ledgers).",
)
@click.option(
    "--read-lease-ms",
    default=500,
    show_default=True,
    type=click.IntRange(0, 10_000),
    help="How long an acknowledged append lets the leader answer linearizable reads "
    "without a barrier (a new leader waits as long before it leads); 0: a barrier each.",
)
@click.option(
    "--leader-probe-ms",
    default=100,
    show_default=True,
    type=click.IntRange(0, 60_000),
    help="A follower probes the leader's HTTP port this often and deletes its election node "
    "when connections are refused (its process died); 0: wait for its session to expire.",
)
def serve(
    metadata_uri: str,
    store_name: str,
    http_port: int,
    host: str,
    advertised_host: str | None,
    member_id: str | None,
    session_timeout_ms: int,
    snapshot_every: int,
    roll_bytes: int,
    read_lease_ms: int,
    leader_probe_ms: int,
) -> None:
    """Run one member of the store NAME (members of one store elect a leader)."""
    from bkeeper.cli._logging import serving
    from bkeeper.common.loop import run_event_loop
    from bkeeper.kv.client import process_token
    from bkeeper.kv.server import KvServerConfig

    config = KvServerConfig(
        name=store_name,
        member_id=member_id or f"{socket.gethostname()}:{os.getpid()}",
        host=host,
        http_port=http_port,
        advertised_host=advertised_host,
        snapshot_every_commands=snapshot_every,
        read_lease_s=read_lease_ms / 1000,
        leader_probe_s=leader_probe_ms / 1000,
        auth_token=process_token(),
    )
    serving()  # a server: INFO lines with timestamps, as bookie's
    run_event_loop(_serve(metadata_uri, config, session_timeout_ms, roll_bytes))


async def _serve(uri: str, config: KvServerConfig, session_ms: int, roll_bytes: int) -> None:
    import asyncio

    from bkeeper.kv.server import serve_member

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)

    def started(url: str) -> None:
        click.echo(f"kv: member {config.member_id} of store {config.name!r} at {url}")
        if config.auth_token:
            click.echo("kv: requests need the token of --auth-token-file as a bearer")

    await serve_member(uri, config, session_ms, roll_bytes, stop, started)


# -- the client commands ---------------------------------------------------------------
url_option = click.option(
    "--url", "urls", multiple=True, help="A member's URL (repeatable); skips the metadata store."
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")
stale_option = click.option(
    "--stale", is_flag=True, help="Read from any member's state (not linearizable)."
)


def _call(
    uri: str,
    store_name: str,
    urls: tuple[str, ...],
    action: Callable[[KvClient], Awaitable[Any]],
    writing: tuple[str, str] | None = None,
) -> Any:
    """Run ``action`` with a client of the store. ``writing``: the write it makes and its key
    (``("put", "k")``): Ctrl-C then says that its outcome is not known, and exits 130."""
    from bkeeper.common.loop import run_event_loop
    from bkeeper.kv.client import KvClient, members_from_store
    from bkeeper.meta.cluster import ClusterMetadata

    timeout_s = float(click.get_current_context().find_root().obj.get("kv_timeout_s", 30.0))

    async def main() -> Any:
        members = list(urls)
        if not members:
            cluster = await ClusterMetadata.open(uri, require_cluster=True)
            try:
                members = await members_from_store(cluster.store, cluster.root, store_name)
            finally:
                await cluster.aclose()
            if not members:
                raise click.ClickException(f"store {store_name!r} has no running member")
        async with KvClient(members, timeout_s=timeout_s) as client:
            return await action(client)

    try:
        return run_event_loop(main())
    except KeyboardInterrupt:
        if writing is None:
            raise
        what, key = writing
        click.echo(
            f"interrupted: the {what} of {key!r} was not confirmed; it may or may not "
            f"be applied (see: bkeeper kv get --name {store_name} {key})",
            err=True,
        )
        sys.exit(130)


def _echo(doc: Any, as_json: bool, text: str) -> None:
    click.echo(json.dumps(doc, sort_keys=True) if as_json else text)


@kv.command()
@metadata_option
@name_option
@url_option
@json_option
@stale_option
@click.argument("key")
def get(
    metadata_uri: str, store_name: str, urls: tuple[str, ...], as_json: bool, stale: bool, key: str
) -> None:
    """Print KEY's value (exit 1 when absent)."""
    item = _call(metadata_uri, store_name, urls, lambda c: c.get(key, stale=stale))
    _echo({"key": key, "value": item.value, "version": item.version}, as_json, item.value or "")
    if item.value is None:
        if not as_json:
            click.echo(f"error: no key {key!r}", err=True)
        raise SystemExit(1)


@kv.command()
@metadata_option
@name_option
@url_option
@json_option
@click.argument("key")
@click.argument("value")
def put(
    metadata_uri: str, store_name: str, urls: tuple[str, ...], as_json: bool, key: str, value: str
) -> None:
    """Set KEY to VALUE; prints the new version."""
    version = _call(
        metadata_uri, store_name, urls, lambda c: c.put(key, value), writing=("put", key)
    )
    _echo({"key": key, "version": version}, as_json, f"version {version}")


@kv.command()
@metadata_option
@name_option
@url_option
@json_option
@click.argument("key")
@click.argument("expected_version", type=click.IntRange(0))
@click.argument("value")
def cas(
    metadata_uri: str,
    store_name: str,
    urls: tuple[str, ...],
    as_json: bool,
    key: str,
    expected_version: int,
    value: str,
) -> None:
    """Set KEY to VALUE if its version is EXPECTED_VERSION (0: absent); exit 1 if not."""
    applied, version = _call(
        metadata_uri,
        store_name,
        urls,
        lambda c: c.cas(key, expected_version, value),
        writing=("cas", key),
    )
    text = f"version {version}" if applied else f"not applied: version is {version}"
    _echo({"key": key, "applied": applied, "version": version}, as_json, text)
    if not applied:
        raise SystemExit(1)


@kv.command()
@metadata_option
@name_option
@url_option
@json_option
@click.argument("key")
def delete(
    metadata_uri: str, store_name: str, urls: tuple[str, ...], as_json: bool, key: str
) -> None:
    """Delete KEY."""
    existed = _call(
        metadata_uri, store_name, urls, lambda c: c.delete(key), writing=("delete", key)
    )
    _echo({"key": key, "existed": existed}, as_json, "deleted" if existed else "absent")


@kv.command("list")
@metadata_option
@name_option
@url_option
@json_option
@stale_option
@click.option("--limit", default=1000, show_default=True, type=click.IntRange(1, 10_000))
@click.argument("prefix", default="")
def list_keys(
    metadata_uri: str,
    store_name: str,
    urls: tuple[str, ...],
    as_json: bool,
    stale: bool,
    limit: int,
    prefix: str,
) -> None:
    """List the keys starting with PREFIX (all by default) with their values."""
    items = _call(
        metadata_uri, store_name, urls, lambda c: c.range(prefix, limit=limit, stale=stale)
    )
    if as_json:
        docs = [{"key": i.key, "value": i.value, "version": i.version} for i in items]
        click.echo(json.dumps(docs, sort_keys=True))
        return
    for item in items:
        click.echo(f"{item.key}\t{item.value}")
