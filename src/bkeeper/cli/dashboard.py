"""``bkeeper dashboard``: the web dashboard of a cluster, until SIGTERM or Ctrl-C.

Prints ``dashboard ready on <url>`` on stderr once it serves (``bkeeper sandbox`` waits for
that line).

``-o key=value`` and ``--conf FILE`` (lines of ``key=value``; :mod:`bkeeper.cli._conf`) set a
field of :class:`~bkeeper.dashboard.DashboardConfig` by name (``metadata_uri``, ``host``,
``port``, its intervals and limits; docs/operations.md, Dashboard), but ``tls`` and ``auth``;
a flag given wins over ``-o``, ``-o`` over the file.

The ``bkeeper`` group's client security options (``--client-tls-ca``, ``--auth-token-file``,
or their environment variables) are the dashboard's credentials towards the bookies; with a
token, browsers must log in with that same token (docs/security.md, Dashboard).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal

import click

from bkeeper.cli._conf import OptionNames, build_config, command_values, fields_of, named_options
from bkeeper.cli._options import metadata_option
from bkeeper.client import ClientConfig
from bkeeper.common.loop import run_event_loop
from bkeeper.dashboard import Dashboard, DashboardConfig

__all__ = ["DASHBOARD_NAMES", "READY_PREFIX", "dashboard"]

#: What the command prints once it serves, followed by the page's URL.
READY_PREFIX = "dashboard ready on "

_DEFAULTS = DashboardConfig(metadata_uri="-")

#: The keys of ``-o`` and ``--conf``: the configuration's fields but the credentials, which
#: are the group's client options.
DASHBOARD_NAMES = OptionNames(
    fields_of(DashboardConfig, excluded=("tls", "auth")),
    "dashboard",
    "docs/operations.md (Dashboard) and bkeeper.dashboard.DashboardConfig",
)


@click.command()
@metadata_option
@click.option("--host", default=_DEFAULTS.host, show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    default=_DEFAULTS.port,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Port to listen on (0: any free port).",
)
@click.option(
    "--scrape-interval-ms",
    default=_DEFAULTS.scrape_interval_ms,
    show_default=True,
    type=click.IntRange(100),
    help="How often bookies are probed and their /metrics scraped.",
)
@click.option(
    "--metadata-interval-ms",
    default=_DEFAULTS.metadata_interval_ms,
    show_default=True,
    type=click.IntRange(100),
    help="How often ledgers, named logs and the under-replication queue are read.",
)
@click.option(
    "--history-points",
    default=_DEFAULTS.history_points_max,
    show_default=True,
    type=click.IntRange(2, 100_000),
    help="Points kept per bookie for the charts.",
)
@named_options(
    "Set a dashboard option by its name (the fields of DashboardConfig: metadata_uri, host, "
    "port, scrape_interval_ms, history_points_max, bookies_max, ...; docs/operations.md, "
    "Dashboard); repeatable. Flags given win over -o, -o over --conf.",
    "A file of KEY=VALUE lines (# comments) with the same names as -o, read before -o.",
)
def dashboard(
    metadata_uri: str,
    host: str,
    port: int,
    scrape_interval_ms: int,
    metadata_interval_ms: int,
    history_points: int,
    options: tuple[str, ...],
    conf: str | None,
) -> None:
    """Serve a web page showing the cluster: bookies, throughput, ledgers, recovery."""
    named = command_values(
        conf,
        options,
        DASHBOARD_NAMES,
        {
            "metadata_uri": ("metadata_uri", metadata_uri),
            "host": ("host", host),
            "port": ("port", port),
            "scrape_interval_ms": ("scrape_interval_ms", scrape_interval_ms),
            "metadata_interval_ms": ("metadata_interval_ms", metadata_interval_ms),
            "history_points": ("history_points_max", history_points),
        },
    )
    client = ClientConfig()  # the group's security options (bkeeper.cli._security)
    config = build_config(DashboardConfig, named, tls=client.tls, auth=client.auth)
    run_event_loop(_serve(config))


async def _serve(config: DashboardConfig) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    board = Dashboard(config)
    url = await board.start()
    click.echo(f"{READY_PREFIX}{url}", err=True)
    if board.gate is not None:
        click.echo("dashboard: log in with the token of --auth-token-file", err=True)
    try:
        await stop.wait()
    finally:
        await board.aclose()
