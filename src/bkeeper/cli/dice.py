"""``bkeeper dice``: the replicated Dice application of the BookKeeper tutorial."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
from collections.abc import Awaitable, Callable

import click

from bkeeper.cli._options import metadata_option
from bkeeper.client import BookKeeper, ClientConfig
from bkeeper.common.errors import ConnectionLossError, SessionExpiredError
from bkeeper.meta.cluster import ClusterMetadata, MetadataConfig
from bkeeper.meta.store import NodeStore, StoreConfig
from bkeeper.namedlog import LogConfig, NamedLogs
from bkeeper.statemachine import Dice, DiceConfig

__all__ = ["STOP_BEFORE_OPEN_WRITER_ENV", "dice"]

#: Test hook: when set to 1, the process stops itself (SIGSTOP) the first time it is between
#: its leadership check and ``open_writer``, so that a test can let its session expire there
#: and resume it (SIGCONT) once another process leads. Resumed, it goes on to ``open_writer``
#: as soon as the metadata store answers again (a new session once the old one expired): the
#: case where an ex-leader's calls succeed.
STOP_HOOK_STORE_TRIES_MAX = 600
STOP_HOOK_PAUSE_S = 0.05
STOP_BEFORE_OPEN_WRITER_ENV = "BKEEPER_TEST_DICE_STOP_BEFORE_OPEN_WRITER"


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
    from bkeeper.common.loop import run_event_loop

    candidate = f"{socket.gethostname()}:{os.getpid()}"
    run_event_loop(_run(metadata_uri, log_name, period, session_timeout_ms, candidate))


def _stop_once_hook(store: NodeStore) -> Callable[[], Awaitable[None]] | None:
    """The ``STOP_BEFORE_OPEN_WRITER_ENV`` test hook, when asked for."""
    if os.environ.get(STOP_BEFORE_OPEN_WRITER_ENV) != "1":
        return None
    stops_left = 1

    async def stop_once() -> None:
        nonlocal stops_left
        if stops_left:
            stops_left -= 1
            click.echo("dice: stopping before open_writer (test hook)", err=True)
            os.kill(os.getpid(), signal.SIGSTOP)
            for _ in range(STOP_HOOK_STORE_TRIES_MAX):
                try:
                    await store.exists("/")
                    return
                except (ConnectionLossError, SessionExpiredError):
                    await asyncio.sleep(STOP_HOOK_PAUSE_S)

    return stop_once


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
                before_open_writer=_stop_once_hook(cluster.store),
            )
            await app.run(stop)
    finally:
        await cluster.aclose()
