"""``bkeeper autorecovery``: an auto-recovery process of its own (Java's ``bookkeeper
autorecovery``), until SIGTERM or Ctrl-C; and what ``bkeeper bookie --autorecovery`` runs.

The process is a candidate in the auditor election and runs a replication worker
(:class:`bkeeper.autorecovery.service.AutoRecovery`). ``-o key=value`` sets a field of
:class:`~bkeeper.autorecovery.config.AutoRecoveryConfig` by name (docs/autorecovery.md lists
them); a bad one is one line naming it. Once its vote is in the auditor election (so
``shell whoisauditor`` names an auditor from then on) it prints
``autorecovery <id> ready (metadata <uri>)`` on stderr. With ``--metrics-port`` it serves its
metrics (docs/operations.md "## Metrics") as ``http://127.0.0.1:<port>/metrics``; a bookie
running auto-recovery inside itself serves them on its own ``/metrics``.
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
from bkeeper.cli._options import metadata_option
from bkeeper.cli._settings import named_setting
from bkeeper.client import BookKeeper
from bkeeper.common.errors import ConfigError
from bkeeper.common.metrics_export import MetricsHttpServer, new_registry
from bkeeper.server import Bookie

__all__ = ["AUTORECOVERY_FIELDS", "autorecovery", "autorecovery_config", "run_in_bookie"]

log = logging.getLogger(__name__)

#: Field name -> its type as the dataclass writes it.
AUTORECOVERY_FIELDS: dict[str, str] = {
    f.name: str(f.type) for f in dataclasses.fields(AutoRecoveryConfig)
}


def _bad(message: str) -> click.UsageError:
    return click.UsageError(message, ctx=click.get_current_context(silent=True))


def autorecovery_config(options: Iterable[str]) -> AutoRecoveryConfig:
    """The configuration ``-o key=value`` options give (later ones win); a usage error
    naming the option and the field for an unknown key, a bad value or a refused one."""
    values: dict[str, object] = {}
    for option in options:
        key, equals, text = option.partition("=")
        key, text = key.strip(), text.strip()
        if not equals or not key:
            raise _bad(f"-o {option}: {option!r} is not key=value")
        field, value = named_setting(
            f"-o {option}", key, text, AUTORECOVERY_FIELDS, "autorecovery", "docs/autorecovery.md"
        )
        values[field] = value
    try:
        return AutoRecoveryConfig(**values)  # type: ignore[arg-type]
    except ConfigError as exc:
        raise _bad(str(exc)) from None


@click.command()
@metadata_option
@click.option(
    "--id",
    "participant_id",
    default=None,
    metavar="ID",
    help="Its name in the auditor election and on the locks it holds "
    "(default: <hostname>:autorecovery-<pid>).",
)
@click.option(
    "-o",
    "--option",
    "options",
    multiple=True,
    metavar="KEY=VALUE",
    help="Set an auto-recovery option by its name (docs/autorecovery.md); repeatable.",
)
@click.option(
    "--metrics-port",
    default=None,
    type=click.IntRange(0, 65535),
    help="Serve Prometheus metrics on http://127.0.0.1:PORT/metrics (0: any free port).",
)
def autorecovery(
    metadata_uri: str,
    participant_id: str | None,
    options: tuple[str, ...],
    metrics_port: int | None,
) -> None:
    """Run auto-recovery (auditor candidate and replication worker) until SIGTERM."""
    from bkeeper.common.loop import run_event_loop

    config = autorecovery_config(options)
    participant = participant_id or default_participant_id()
    try:
        check_participant_id(participant)
    except ConfigError as exc:
        raise _bad(str(exc)) from None
    run_event_loop(_run(metadata_uri, participant, config, metrics_port))


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
