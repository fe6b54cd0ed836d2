"""``bkeeper autorecovery``: an auto-recovery process of its own (Java's ``bookkeeper
autorecovery``), until SIGTERM or Ctrl-C; and what ``bkeeper bookie --autorecovery`` runs.

The process is a candidate in the auditor election and runs a replication worker
(:class:`bkeeper.autorecovery.service.AutoRecovery`). ``-o key=value`` and ``--conf FILE``
(lines of ``key=value``; :mod:`bkeeper.cli._conf`) set a field of
:class:`~bkeeper.autorecovery.config.AutoRecoveryConfig` by name (docs/autorecovery.md lists
them), or of the process itself (:class:`ProcessConfig`: ``metadata_uri``, ``id``,
``metrics_port``, which are also ``--metadata``, ``--id`` and ``--metrics-port``); a flag
given wins over ``-o``, ``-o`` over the file; a bad one is one line naming where it is and
the key. Once its vote is in the auditor election (so ``shell whoisauditor`` names an auditor
from then on) it prints ``autorecovery <id> ready (metadata <uri>)`` on stderr. With a
metrics port it serves its metrics (docs/operations.md "## Metrics") as
``http://127.0.0.1:<port>/metrics``; a bookie running auto-recovery inside itself serves them
on its own ``/metrics``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import signal
from collections.abc import Iterable

import click

from bkeeper.autorecovery.config import AutoRecoveryConfig
from bkeeper.autorecovery.service import (
    AutoRecovery,
    check_participant_id,
    default_participant_id,
    keep_running,
)
from bkeeper.cli._conf import (
    OptionNames,
    build_config,
    command_values,
    fields_of,
    named_options,
    read_named,
    usage_error,
)
from bkeeper.cli._options import metadata_option
from bkeeper.client import BookKeeper
from bkeeper.common.errors import ConfigError
from bkeeper.common.metrics_export import MetricsHttpServer, new_registry
from bkeeper.common.validate import check_port
from bkeeper.server import Bookie

__all__ = [
    "AUTORECOVERY_FIELDS",
    "AUTORECOVERY_NAMES",
    "ProcessConfig",
    "autorecovery",
    "autorecovery_config",
    "run_in_bookie",
]

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ProcessConfig:
    """The process besides its :class:`AutoRecoveryConfig`: the cluster it watches
    (``metadata_uri``), its name in the auditor election and on the locks it holds (``id``;
    empty: ``<hostname>:autorecovery-<pid>``), the port of its metrics server on 127.0.0.1
    (``metrics_port``; ``None``: none, 0: any free port)."""

    metadata_uri: str
    id: str = ""
    metrics_port: int | None = None

    def __post_init__(self) -> None:
        if not self.metadata_uri:
            raise ConfigError("metadata_uri: the cluster to watch (zk://...) is required")
        if self.id:
            check_participant_id(self.id)
        if self.metrics_port is not None:
            check_port("metrics_port", self.metrics_port)


#: Field name -> its type as the dataclass writes it.
AUTORECOVERY_FIELDS: dict[str, str] = fields_of(AutoRecoveryConfig)

#: The keys of ``bkeeper autorecovery``'s ``-o`` and ``--conf``.
AUTORECOVERY_NAMES = OptionNames(
    {**fields_of(ProcessConfig), **AUTORECOVERY_FIELDS}, "autorecovery", "docs/autorecovery.md"
)


def autorecovery_config(options: Iterable[str]) -> AutoRecoveryConfig:
    """The configuration ``-o key=value`` options give (later ones win); a usage error
    naming the option and the field for an unknown key, a bad value or a refused one."""
    names = OptionNames(AUTORECOVERY_FIELDS, "autorecovery", "docs/autorecovery.md")
    return build_config(AutoRecoveryConfig, read_named(None, options, names))


@click.command()
@metadata_option
@click.option(
    "--id",
    "participant_id",
    default="",
    metavar="ID",
    help="Its name in the auditor election and on the locks it holds "
    "(default: <hostname>:autorecovery-<pid>).",
)
@named_options(
    "Set an auto-recovery option by its name (docs/autorecovery.md), or metadata_uri, id, "
    "metrics_port; repeatable. Flags given win over -o, -o over --conf.",
    "A file of KEY=VALUE lines (# comments) with the same names as -o, read before -o.",
)
@click.option(
    "--metrics-port",
    default=None,
    type=click.IntRange(0, 65535),
    help="Serve Prometheus metrics on http://127.0.0.1:PORT/metrics (0: any free port).",
)
def autorecovery(
    metadata_uri: str,
    participant_id: str,
    options: tuple[str, ...],
    conf: str | None,
    metrics_port: int | None,
) -> None:
    """Run auto-recovery (auditor candidate and replication worker) until SIGTERM."""
    from bkeeper.common.loop import run_event_loop

    named = command_values(
        conf,
        options,
        AUTORECOVERY_NAMES,
        {
            "metadata_uri": ("metadata_uri", metadata_uri),
            "participant_id": ("id", participant_id),
            "metrics_port": ("metrics_port", metrics_port),
        },
    )
    process = build_config(ProcessConfig, named)
    config = build_config(AutoRecoveryConfig, named)
    participant = process.id or default_participant_id()
    try:
        check_participant_id(participant)  # the default one too (a very long host name)
    except ConfigError as exc:
        raise usage_error(str(exc)) from None
    run_event_loop(_run(process.metadata_uri, participant, config, process.metrics_port))


async def _run(
    metadata_uri: str, participant: str, config: AutoRecoveryConfig, metrics_port: int | None
) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    async with BookKeeper(metadata_uri) as bk, AutoRecovery(bk, participant, config) as recovery:
        if not await _joined_unless_stopped(recovery, stop):
            click.echo(f"autorecovery {participant} stopped before joining the election", err=True)
            return
        server = None
        if metrics_port is not None:
            registry = new_registry(lambda: [recovery.metrics.metric_set])
            try:
                server = MetricsHttpServer(registry, "127.0.0.1", metrics_port)
            except OSError as exc:
                raise ConfigError(
                    f"--metrics-port: cannot listen on 127.0.0.1:{metrics_port}: {exc}"
                ) from exc
        metrics = "" if server is None else f", metrics http://127.0.0.1:{server.port}/metrics"
        click.echo(f"autorecovery {participant} ready (metadata {metadata_uri}{metrics})", err=True)
        try:
            await stop.wait()
        finally:
            if server is not None:
                server.close()
        click.echo(f"autorecovery {participant} stopping", err=True)
    click.echo(f"autorecovery {participant} stopped", err=True)


async def _joined_unless_stopped(recovery: AutoRecovery, stop: asyncio.Event) -> bool:
    """Wait until ``recovery``'s vote is in the auditor election (True), or ``stop`` is set
    first (False)."""
    joined = asyncio.ensure_future(recovery.wait_candidate())
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait((joined, stopping), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (joined, stopping):
            task.cancel()
        await asyncio.gather(joined, stopping, return_exceptions=True)
    if joined.done() and not joined.cancelled():
        joined.result()  # raises what the wait raised
    return not stop.is_set()


async def run_in_bookie(
    metadata_uri: str, bookie_id: str, config: AutoRecoveryConfig, bookie: Bookie | None = None
) -> None:
    """Auto-recovery inside a bookie, as ``bookie_id``, until cancelled. A failure (the
    metadata store unreachable at start, say) is logged and it starts again after a pause
    that doubles up to 30 s (``keep_running``): the bookie serves on regardless. Its metrics
    are served on the ``bookie``'s ``/metrics`` while it runs."""

    async def run() -> None:
        async with BookKeeper(metadata_uri) as bk, AutoRecovery(bk, bookie_id, config) as ar:
            log.info("autorecovery %s running in the bookie", bookie_id)
            metric_set = ar.metrics.metric_set
            if bookie is not None:
                bookie.add_metric_set(metric_set)
            try:
                await asyncio.Event().wait()  # until cancelled with the bookie
            finally:
                if bookie is not None:
                    bookie.remove_metric_set(metric_set)

    await keep_running(f"autorecovery {bookie_id} in the bookie", run)
