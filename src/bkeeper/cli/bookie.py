"""``bkeeper bookie``: run one bookie until SIGTERM or Ctrl-C."""

from __future__ import annotations

import asyncio
import contextlib
import resource
import signal
from collections.abc import Coroutine
from typing import Any, TypeVar

import click

from bkeeper.common.limits import DEFAULT_BOOKIE_PORT
from bkeeper.server import Bookie, BookieConfig
from bkeeper.storage import StorageConfig

__all__ = ["bookie", "run_event_loop"]

T = TypeVar("T")

#: Defaults shown by ``--help``, from the configuration itself.
_DEFAULTS = BookieConfig(data_dir="-")


def _raise_nofile_limit() -> None:
    """Raise the soft file-descriptor limit to the hard one, as the JVM does for Java's
    bookie: the derived connection limit follows the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        # Refused (an unlimited hard limit over the kernel's nr_open): the limit in force
        # stays, and the connection limit is derived from it, which is all that matters.
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def run_event_loop(main: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine on uvloop when it is installed, else on asyncio's loop."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        return asyncio.run(main)
    result: T = uvloop.run(main)
    return result


@click.command()
@click.option("--data-dir", required=True, type=click.Path(file_okay=False), help="Data directory.")
@click.option(
    "--port", default=DEFAULT_BOOKIE_PORT, show_default=True, type=click.IntRange(0, 65535)
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--bookie-id", default="", help="Stable bookie id (default host:port).")
@click.option("--metadata", "metadata_uri", default="", help="Metadata service URI (zk://...).")
@click.option("--readonly", is_flag=True, help="Start in read-only mode.")
@click.option("--journal-group-wait-ms", default=1.0, show_default=True, type=float)
@click.option("--skip-corrupt-journal-records", is_flag=True, help="Skip corrupt journal records.")
@click.option(
    "--connections-max",
    default=0,
    show_default=True,
    type=click.IntRange(0),
    help="Open connections at most; 0: the file-descriptor limit less 256, at most 65536. "
    "At the limit a new connection closes the longest-idle one.",
)
@click.option(
    "--connection-handshake-timeout-ms",
    default=_DEFAULTS.connection_handshake_timeout_ms,
    show_default=True,
    type=click.IntRange(1),
    help="Close a connection whose first frame is not complete after this long.",
)
@click.option(
    "--connection-idle-timeout-ms",
    default=_DEFAULTS.connection_idle_timeout_ms,
    show_default=True,
    type=click.IntRange(1),
    help="Close a connection with nothing received, sent or in flight for this long.",
)
@click.option(
    "--partial-frames-bytes-max",
    default=_DEFAULTS.partial_frames_bytes_max,
    show_default=True,
    type=click.IntRange(1),
    help="Bytes of incomplete frames buffered across all connections at most.",
)
def bookie(
    data_dir: str,
    port: int,
    host: str,
    bookie_id: str,
    metadata_uri: str,
    readonly: bool,
    journal_group_wait_ms: float,
    skip_corrupt_journal_records: bool,
    connections_max: int,
    connection_handshake_timeout_ms: int,
    connection_idle_timeout_ms: int,
    partial_frames_bytes_max: int,
) -> None:
    """Run one bookie. SIGTERM drains in-flight requests, checkpoints and exits 0."""
    _raise_nofile_limit()
    config = BookieConfig(
        data_dir=data_dir,
        host=host,
        port=port,
        bookie_id=bookie_id,
        metadata_uri=metadata_uri,
        readonly=readonly,
        connections_max=connections_max,
        connection_handshake_timeout_ms=connection_handshake_timeout_ms,
        connection_idle_timeout_ms=connection_idle_timeout_ms,
        partial_frames_bytes_max=partial_frames_bytes_max,
    )
    storage_config = StorageConfig(
        data_dir=data_dir,
        journal_max_group_wait_ms=journal_group_wait_ms,
        journal_skip_corrupt_records=skip_corrupt_journal_records,
    )
    run_event_loop(_serve(config, storage_config))


async def _serve(config: BookieConfig, storage_config: StorageConfig) -> None:
    server = Bookie(config, storage_config)
    await server.start()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, server.request_stop)
    click.echo(f"bookie {server.bookie_id} ready on {config.host}:{server.port}", err=True)
    try:
        await server.wait_stopped()
    finally:
        await server.aclose()
