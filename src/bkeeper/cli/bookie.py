"""``bkeeper bookie``: run one bookie until SIGTERM or Ctrl-C.

With a metadata URI, a bookie that starts with ledgers in limbo (its journal replay found
damaged records that may have been acknowledged) runs the data integrity check
(:mod:`bkeeper.autorecovery.integrity`) in the background while it serves, unless
``--no-integrity-check``; and then it scrubs its entry logs every ``scrub_interval_ms``
(``-o scrub_interval_ms=0``: never), the integrity check repairing what a pass finds
(:mod:`bkeeper.autorecovery.scrubbing`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import resource
import signal
from typing import Any, TypeVar

import click
from click.core import ParameterSource

from bkeeper.autorecovery.config import AutoRecoveryConfig
from bkeeper.autorecovery.scrubbing import maintain_storage
from bkeeper.cli._network_location import resolve_network_location
from bkeeper.cli._security import bookie_security_options, build_bookie_security
from bkeeper.cli._settings import (
    build_autorecovery_config,
    build_configs,
    merged,
    read_settings,
    settings_options,
)
from bkeeper.cli.autorecovery import run_in_bookie
from bkeeper.common.limits import DEFAULT_BOOKIE_PORT
from bkeeper.common.loop import run_event_loop
from bkeeper.server import Bookie, BookieConfig
from bkeeper.storage import FileSystem, StorageConfig
from bkeeper.storage.slow_sync import ENV_VAR as SLOW_SYNC_ENV
from bkeeper.storage.slow_sync import slow_sync_filesystem

__all__ = ["bookie", "run_event_loop"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Defaults shown by ``--help``, from the configurations themselves.
_DEFAULTS = BookieConfig(data_dir="-")
_STORAGE_DEFAULTS = StorageConfig(data_dir="-")
MIB = 1024 * 1024


def _raise_nofile_limit() -> None:
    """Raise the soft file-descriptor limit to the hard one, as the JVM does for Java's
    bookie: the derived connection limit follows the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        # Refused (an unlimited hard limit over the kernel's nr_open): the limit in force
        # stays, and the connection limit is derived from it, which is all that matters.
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


@click.command()
@click.option("--data-dir", required=True, type=click.Path(file_okay=False), help="Data directory.")
@click.option(
    "--ledger-dir",
    multiple=True,
    type=click.Path(file_okay=False),
    help="A directory for entry logs (repeatable; the first also holds the index and "
    "checkpoint). Default: DATA_DIR/current/ledgers.",
)
@click.option(
    "--journal-dir",
    multiple=True,
    type=click.Path(file_okay=False),
    help="A directory for a journal of its own (repeatable: one journal per directory). "
    "Default: DATA_DIR/current/journal.",
)
@settings_options("this bookie")
@click.option(
    "--port", default=DEFAULT_BOOKIE_PORT, show_default=True, type=click.IntRange(0, 65535)
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--http-port",
    default=None,
    type=click.IntRange(0, 65535),
    help="Serve the admin HTTP API (state, GC, ledgers, auto-recovery; docs/admin.md) on "
    "this port (0: any free port; default: none). Its address: -o http_host=... (default: "
    "127.0.0.1, whatever --host is).",
)
@click.option(
    "--http-admin-writes",
    is_flag=True,
    help="Let the admin HTTP API change things (PUT, POST, DELETE: run GC, delete a "
    "ledger, go read-only, the sanity check, ...); without it they are refused with 403.",
)
@click.option(
    "--http-metrics-open",
    is_flag=True,
    help="With authentication on (--auth-token-secret-file), serve GET /metrics without a "
    "token too (Prometheus scrapes without credentials); every other admin endpoint but "
    "/heartbeat and is_ready still needs one (docs/security.md).",
)
@click.option("--bookie-id", default="", help="Stable bookie id (default host:port).")
@click.option("--metadata", "metadata_uri", default="", help="Metadata service URI (zk://...).")
@click.option("--readonly", is_flag=True, help="Stay read-only (adds refused, reads served).")
@click.option(
    "--metrics/--no-metrics",
    "metrics_enabled",
    default=True,
    show_default=True,
    help="Keep Prometheus metrics, served as /metrics with --http-port (docs/operations.md).",
)
@click.option("--journal-group-wait-ms", default=1.0, show_default=True, type=float)
@click.option("--skip-corrupt-journal-records", is_flag=True, help="Skip corrupt journal records.")
@click.option(
    "--disk-usage-threshold",
    default=_STORAGE_DEFAULTS.disk_usage_threshold,
    show_default=True,
    type=float,
    help="Fraction of the data disk in use at which the bookie turns read-only.",
)
@click.option(
    "--disk-usage-lwm-threshold",
    default=_STORAGE_DEFAULTS.disk_usage_lwm_threshold,
    show_default=True,
    type=float,
    help="Fraction in use below which a full bookie turns writable again.",
)
@click.option(
    "--checkpoint-interval-ms",
    default=_DEFAULTS.checkpoint_interval_ms,
    show_default=True,
    type=click.IntRange(1),
    help="Time between checkpoints (each wait varies by up to 25%).",
)
@click.option(
    "--write-cache-mb",
    default=_STORAGE_DEFAULTS.write_cache_bytes_max // MIB,
    show_default=True,
    type=click.IntRange(1),
    help="Entries held in memory until flushed to entry logs (MiB).",
)
@click.option(
    "--integrity-check/--no-integrity-check",
    default=True,
    show_default=True,
    help="Repair ledgers in limbo after start (needs --metadata).",
)
@click.option(
    "--autorecovery",
    is_flag=True,
    help="Also run auto-recovery (auditor candidate and replication worker) in this "
    "process, with the bookie id as its id (needs --metadata; -o sets its options, "
    "docs/autorecovery.md).",
)
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
@bookie_security_options
def bookie(
    data_dir: str,
    ledger_dir: tuple[str, ...],
    journal_dir: tuple[str, ...],
    options: tuple[str, ...],
    conf: str | None,
    port: int,
    host: str,
    http_port: int | None,
    http_admin_writes: bool,
    http_metrics_open: bool,
    bookie_id: str,
    metadata_uri: str,
    readonly: bool,
    metrics_enabled: bool,
    journal_group_wait_ms: float,
    skip_corrupt_journal_records: bool,
    disk_usage_threshold: float,
    disk_usage_lwm_threshold: float,
    checkpoint_interval_ms: int,
    write_cache_mb: int,
    integrity_check: bool,
    autorecovery: bool,
    connections_max: int,
    connection_handshake_timeout_ms: int,
    connection_idle_timeout_ms: int,
    partial_frames_bytes_max: int,
    **security: Any,
) -> None:
    """Run one bookie. SIGTERM drains in-flight requests, checkpoints and exits 0.

    When every ledger directory is full (or any, with -o readonly_on_any_dir_full=true), or
    a journal directory is, the bookie is read-only (it starts so, too), and it turns
    writable by itself once usage drops below the low-water mark."""
    _raise_nofile_limit()
    # What each flag sets, by the option's name; flags given on the command line win over
    # -o and --conf, the others are only defaults.
    flags: dict[str, tuple[str, object]] = {
        "ledger_dir": ("ledger_dirs", ledger_dir),
        "journal_dir": ("journal_dirs", journal_dir),
        "host": ("host", host),
        "port": ("port", port),
        "http_port": ("http_port", http_port),
        "http_admin_writes": ("http_admin_writes", http_admin_writes),
        "http_metrics_open": ("http_metrics_open", http_metrics_open),
        "bookie_id": ("bookie_id", bookie_id),
        "metadata_uri": ("metadata_uri", metadata_uri),
        "readonly": ("readonly", readonly),
        "metrics_enabled": ("metrics_enabled", metrics_enabled),
        "checkpoint_interval_ms": ("checkpoint_interval_ms", checkpoint_interval_ms),
        "connections_max": ("connections_max", connections_max),
        "connection_handshake_timeout_ms": (
            "connection_handshake_timeout_ms",
            connection_handshake_timeout_ms,
        ),
        "connection_idle_timeout_ms": ("connection_idle_timeout_ms", connection_idle_timeout_ms),
        "partial_frames_bytes_max": ("partial_frames_bytes_max", partial_frames_bytes_max),
        "journal_group_wait_ms": ("journal_max_group_wait_ms", journal_group_wait_ms),
        "skip_corrupt_journal_records": (
            "journal_skip_corrupt_records",
            skip_corrupt_journal_records,
        ),
        "disk_usage_threshold": ("disk_usage_threshold", disk_usage_threshold),
        "disk_usage_lwm_threshold": ("disk_usage_lwm_threshold", disk_usage_lwm_threshold),
        "write_cache_mb": ("write_cache_bytes_max", write_cache_mb * MIB),
    }
    context = click.get_current_context()
    given = {
        key: value
        for flag, (key, value) in flags.items()
        if context.get_parameter_source(flag) is not ParameterSource.DEFAULT
    }
    defaults = read_settings(None, (), dict(flags.values()))
    settings = read_settings(conf, options, given)
    all_settings = merged(defaults, settings)
    config, storage_config = build_configs(data_dir, all_settings)
    config = resolve_network_location(config)
    tls, auth = build_bookie_security(security)
    config = dataclasses.replace(config, tls=tls, auth=auth)
    recovery = build_autorecovery_config(all_settings) if autorecovery else None
    if recovery is None and all_settings.autorecovery:
        raise click.UsageError(
            f"{', '.join(sorted(all_settings.autorecovery))}: auto-recovery options, "
            "for a bookie started with --autorecovery"
        )
    if recovery is not None and not config.metadata_uri:
        raise click.UsageError("--autorecovery needs --metadata (the cluster to watch)")
    # Fault injection (verify's slow-disk), if the environment asks for it.
    fs = slow_sync_filesystem(os.environ.get(SLOW_SYNC_ENV, ""), config.data_dir)
    run_event_loop(_serve(config, storage_config, integrity_check, recovery, fs))


async def _serve(
    config: BookieConfig,
    storage_config: StorageConfig,
    integrity: bool,
    recovery: AutoRecoveryConfig | None = None,
    fs: FileSystem | None = None,
) -> None:
    server = Bookie(config, storage_config, fs=fs)
    cluster_admin = None
    if server.admin_server is not None and config.metadata_uri:
        # The cluster's endpoints (bookies, ledgers, auto-recovery), before the server starts;
        # imported here: a bookie without HTTP does without aiohttp (see bkeeper.server.bookie).
        from bkeeper.admin import ClusterAdmin, add_admin_routes

        cluster_admin = ClusterAdmin(config.metadata_uri, lambda: server.bookie_id)
        add_admin_routes(server.admin_server, cluster_admin)
    loop = asyncio.get_running_loop()
    # Before start, which may wait (a stale registration, a long journal replay): a SIGTERM
    # meanwhile must stop the bookie cleanly once it is up, not kill it mid-start.
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, server.request_stop)
    await server.start()
    if server.stop_requested:
        click.echo(f"bookie {server.bookie_id} stopping: asked to during start", err=True)
    else:
        admin = f" (admin {server.admin_url})" if server.admin_url else ""
        click.echo(
            f"bookie {server.bookie_id} ready on {config.host}:{server.port}{admin}", err=True
        )
    try:
        async with asyncio.TaskGroup() as tasks:
            check = tasks.create_task(maintain_storage(server, config.metadata_uri, integrity))
            recovering = None
            if recovery is not None and not server.stop_requested:
                recovering = tasks.create_task(
                    run_in_bookie(config.metadata_uri, server.bookie_id, recovery, server)
                )
            await server.wait_stopped()
            for task in (check, recovering):
                if task is not None:
                    task.cancel()
    finally:
        try:
            await server.aclose()
        finally:
            if cluster_admin is not None:
                await cluster_admin.aclose()
