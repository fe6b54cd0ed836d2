"""``bkeeper dice``: the replicated Dice application of the BookKeeper tutorial."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket

import click

from bkeeper.cli._options import metadata_option
from bkeeper.client import BookKeeper, ClientConfig
from bkeeper.meta.cluster import ClusterMetadata, MetadataConfig
from bkeeper.meta.store import StoreConfig
from bkeeper.namedlog import LogConfig, NamedLogs
from bkeeper.statemachine import Dice, DiceConfig

__all__ = ["dice"]


@click.command()
@metadata_option
@click.option("--log", "log_name", default="dice", show_default=True, help="Log to roll into.")
@click.option(
    "--period", default=1.0, show_default=True, type=click.FloatRange(0.001, 3600), help="Seconds."
)
@click.option(
    "--session-timeout-ms",
    default=10_000,
    show_default=True,
    type=click.IntRange(1000, 60_000),
    help="ZooKeeper session timeout: how long a paused leader keeps leadership.",
)
def dice(metadata_uri: str, log_name: str, period: float, session_timeout_ms: int) -> None:
    """Roll a die once per period as the elected leader, or follow the leader's rolls.

    Prints "Value = N, epoch = L, leading|following|catchup" per value. Run two or three
    in separate terminals against one cluster; pause the leader with Ctrl-Z, resume it with
    fg, or kill it, and watch leadership move without losing or forking the sequence.
    """
    from bkeeper.cli.bookie import run_event_loop

    candidate = f"{socket.gethostname()}:{os.getpid()}"
    run_event_loop(_run(metadata_uri, log_name, period, session_timeout_ms, candidate))


async def _run(uri: str, log_name: str, period: float, session_ms: int, candidate: str) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    store = StoreConfig(session_timeout_ms=session_ms)
    cluster = await ClusterMetadata.open(uri, MetadataConfig(store=store), require_cluster=True)
    try:
        config = ClientConfig(explicit_lac_interval_ms=max(10, min(200, int(period * 250))))
        async with BookKeeper(config=config, cluster=cluster) as bk:
            logs = NamedLogs(bk, LogConfig(tail_poll_ms=max(50, min(1000, int(period * 500)))))
            app = Dice(
                logs,
                cluster.store,
                DiceConfig(log_name=log_name, period_s=period, candidate=candidate),
                out=click.echo,
            )
            await app.run(stop)
    finally:
        await cluster.aclose()
