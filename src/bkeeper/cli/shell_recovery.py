"""``bkeeper shell recover|decommissionbookie|listunderreplicated|whoisauditor|triggeraudit|
lostbookierecoverydelay|autorecovery|queryautorecoverystatus``: auto-recovery from the
operator's side, as Java's ``bookkeeper shell`` has them (docs/autorecovery.md).

Thin: parse, call :mod:`bkeeper.autorecovery.admin`, print a table (or ``--json``). Commands
that wait show a progress bar on stderr; ``decommissionbookie`` also where each ledger stands,
refreshed at each poll (:mod:`bkeeper.cli._decommission_view`). A mistake (an unknown bookie,
a negative delay) or a refusal (decommissioning a bookie that still runs) is one ``error:``
line, exit status 1.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

import click

from bkeeper.autorecovery import admin
from bkeeper.autorecovery.config import AutoRecoveryConfig
from bkeeper.autorecovery.repair import ReplicationOutcome
from bkeeper.cli._decommission_view import DecommissionView, final_table, row_json
from bkeeper.cli._errors import CommandError
from bkeeper.cli._options import metadata_option
from bkeeper.cli._tables import console, titled_table
from bkeeper.cli.shell_ops import progress as progress_bar
from bkeeper.client import BookKeeper
from bkeeper.common.errors import CallTimeoutError
from bkeeper.meta.cluster import ClusterMetadata

__all__ = ["commands"]

T = TypeVar("T")

#: How long ``decommissionbookie`` waits for the workers by default.
DECOMMISSION_TIMEOUT_S = 3600.0

_json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON, not a table.")


def _run(coro: Coroutine[Any, Any, T]) -> T:
    from bkeeper.common.loop import run_event_loop

    return run_event_loop(coro)


def _echo_json(value: object) -> None:
    click.echo(json.dumps(value, indent=2, sort_keys=True))


def _when(ms: int | None) -> str:
    return "-" if ms is None else time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000))


async def _urm_call(metadata_uri: str, what: str, *args: Any) -> Any:
    async with await ClusterMetadata.open(metadata_uri, require_cluster=True) as cluster:
        return await getattr(cluster.underreplication, what)(*args)


@click.command()
@metadata_option
@click.argument("bookies", nargs=-1, required=True, metavar="BOOKIE...")
@click.option("--ledger", "ledger_id", type=click.IntRange(0), help="Only this ledger.")
@click.option("--dry-run", is_flag=True, help="Only show what would be copied where.")
@click.option(
    "--skip-open",
    is_flag=True,
    help="Leave open ledgers whose last segment needs a BOOKIE (default: fence and seal them).",
)
@_json_option
def recover(
    metadata_uri: str,
    bookies: tuple[str, ...],
    ledger_id: int | None,
    dry_run: bool,
    skip_open: bool,
    as_json: bool,
) -> None:
    """Re-replicate now every ledger's entries on the BOOKIEs (lost or leaving) to others."""
    lost = sorted({b for arg in bookies for b in arg.split(",") if b})

    async def run() -> list[Any]:
        async with BookKeeper(metadata_uri) as bk:
            with progress_bar(f"{'planning' if dry_run else 'recovering'} ledgers") as progress:
                return await admin.recover(
                    bk,
                    lost,
                    AutoRecoveryConfig(),
                    ledger_id=ledger_id,
                    dry_run=dry_run,
                    fence_open=not skip_open,
                    on_progress=progress,
                )

    outcomes = _run(run())
    # Open ledgers left alone on purpose (a dry run, --skip-open) are no failure.
    failed = [
        o for o in outcomes if not o.done and not (o.awaits_fencing and (dry_run or skip_open))
    ]
    if as_json:
        _echo_json([_outcome_json(o) for o in outcomes])
    else:
        table = titled_table(f"{'plan to recover' if dry_run else 'recovered'} {', '.join(lost)}")
        copied = ("entries to copy", "bytes") if dry_run else ("entries copied", "bytes copied")
        for column in ("ledger", "outcome", "replaced", *copied, "reason"):
            table.add_column(column, justify="right" if column in copied else "left")
        for o in outcomes:
            moves = "; ".join(
                f"from {first}: " + ", ".join(f"{old} -> {new}" for old, new in pairs.items())
                for first, pairs in sorted(o.replaced.items())
            )
            entries = o.plan.entries if dry_run and o.plan is not None else o.entries_copied
            table.add_row(
                str(o.ledger_id),
                _state(o, dry_run),
                moves or "-",
                f"{entries:,}",
                "-" if dry_run else f"{o.bytes_copied:,}",
                o.reason or "",
            )
        console().print(table)
        if not outcomes:
            click.echo(f"no ledger holds entries on {', '.join(lost)}", err=True)
    if failed:
        first = failed[0]
        reason = first.reason or "no reason given"
        if not reason.startswith(f"ledger {first.ledger_id}"):
            reason = f"ledger {first.ledger_id}: {reason}"
        raise CommandError(
            f"{len(failed)} of {len(outcomes)} ledgers not recovered ({reason}); run it again"
        )


def _state(outcome: ReplicationOutcome, dry_run: bool) -> str:
    if dry_run:
        return "planned (fences it first)" if outcome.awaits_fencing else "planned"
    if outcome.awaits_fencing:
        return "skipped (open)"
    return "done" if outcome.done else "failed"


def _outcome_json(outcome: ReplicationOutcome) -> dict[str, object]:
    return {
        "ledger_id": outcome.ledger_id,
        "done": outcome.done,
        "reason": outcome.reason,
        "replaced": {str(first): pairs for first, pairs in sorted(outcome.replaced.items())},
        "entries_copied": outcome.entries_copied,
        "bytes_copied": outcome.bytes_copied,
        "awaits_fencing": outcome.awaits_fencing,
        "entries_planned": None if outcome.plan is None else outcome.plan.entries,
    }


@click.command()
@metadata_option
@click.argument("bookie")
@click.option(
    "--timeout",
    "timeout_s",
    default=DECOMMISSION_TIMEOUT_S,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds to wait for re-replication.",
)
@_json_option
def decommissionbookie(metadata_uri: str, bookie: str, timeout_s: float, as_json: bool) -> None:
    """Retire a stopped BOOKIE: trigger an audit, wait until no ledger needs it (the
    auto-recovery workers copy its entries elsewhere), then delete its cookie. While it
    waits it shows where each ledger stands (waiting for the auditor, queued, being
    re-replicated by which worker, blocked and why); at the end a table of the ledgers."""
    view = DecommissionView(bookie, as_json=as_json)

    async def run() -> admin.DecommissionReport:
        async with BookKeeper(metadata_uri) as bk:
            with view.showing():
                return await admin.decommission(
                    bk,
                    bookie,
                    timeout_s=timeout_s,
                    on_progress=view.progress,
                    on_status=view.update,
                )

    try:
        report = _run(run())
    except CallTimeoutError as exc:
        if view.last is not None:  # where each ledger stands, then the one error line
            if as_json:
                failed = {"bookie_id": bookie, "ledgers": view.last.total, "cookie_deleted": False}
                rows = [row_json(row) for row in view.last.rows.values()]
                _echo_json({**failed, "rows": rows, "error": str(exc)})
            else:
                console().print(final_table(bookie, view.last.rows))
        raise
    if as_json:
        _echo_json(dataclasses.asdict(report))
        return
    if report.rows:
        console().print(final_table(bookie, report.rows))
    cookie = "cookie deleted" if report.cookie_deleted else "it had no cookie"
    click.echo(f"decommissioned {bookie}: {report.ledgers} ledgers re-replicated, {cookie}")


@click.command()
@metadata_option
@click.option("--missing", "missing", metavar="BOOKIE", help="Only ledgers missing this bookie.")
@_json_option
def listunderreplicated(metadata_uri: str, missing: str | None, as_json: bool) -> None:
    """The ledgers marked under-replicated: missing replicas, since when, which worker, and
    why no worker repairs it (as the last attempt found, e.g. no candidate bookie)."""

    async def run() -> list[admin.UnderReplicatedRow]:
        async with await ClusterMetadata.open(metadata_uri, require_cluster=True) as cluster:
            return await admin.under_replicated(cluster.underreplication, missing)

    rows = _run(run())
    if as_json:
        _echo_json([dataclasses.asdict(row) for row in rows])
        return
    if not rows:
        click.echo("no under-replicated ledgers", err=True)
        return
    table = titled_table(f"under-replicated ledgers at {metadata_uri}")
    for column in ("ledger", "missing replicas", "marked", "worker", "waiting because"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(
            str(row.ledger_id),
            ", ".join(row.missing_replicas),
            _when(row.ctime_ms),
            row.worker or "-",
            _why(row),
        )
    console().print(table)


def _why(row: admin.UnderReplicatedRow) -> str:
    if row.reason is None:
        return "-" if row.worker else "no reason recorded"
    return f"{row.reason} ({row.reason_kind}, since {_when(row.reason_since_ms)})"


@click.command()
@metadata_option
def whoisauditor(metadata_uri: str) -> None:
    """The id of the elected auditor."""
    auditor = _run(_urm_call(metadata_uri, "current_auditor"))
    if auditor is None:
        raise CommandError("no auditor is elected (no auto-recovery process runs)")
    click.echo(auditor)


@click.command()
@metadata_option
def triggeraudit(metadata_uri: str) -> None:
    """Make the auditor audit now (lost bookies are marked at once, whatever the delay)."""

    async def run() -> str:
        async with await ClusterMetadata.open(metadata_uri, require_cluster=True) as cluster:
            return await admin.trigger_audit(cluster.underreplication)

    click.echo(f"audit triggered (auditor {_run(run())})")


@click.command()
@metadata_option
@click.option("--set", "seconds", type=int, metavar="S", help="Set the delay to S seconds.")
def lostbookierecoverydelay(metadata_uri: str, seconds: int | None) -> None:
    """Show (or --set) how long the auditor waits after a bookie is lost before it marks
    the bookie's ledgers; setting it also triggers an audit."""
    if seconds is not None:
        if seconds < 0:
            raise CommandError(f"--set: the delay must be 0 or more seconds, got {seconds}")
        _run(_urm_call(metadata_uri, "set_lost_bookie_recovery_delay_s", seconds))
        click.echo(f"lostBookieRecoveryDelay set to {seconds} s")
        return
    delay = _run(_urm_call(metadata_uri, "lost_bookie_recovery_delay_s"))
    if delay is None:
        click.echo("lostBookieRecoveryDelay not set (each auditor uses its own default)")
    else:
        click.echo(f"lostBookieRecoveryDelay: {delay} s")


@click.command(name="autorecovery")
@metadata_option
@click.option("--enable", "enable", flag_value=True, default=None, help="Turn it on.")
@click.option("--disable", "enable", flag_value=False, help="Turn it off (workers pause).")
def autorecovery_flag(metadata_uri: str, enable: bool | None) -> None:
    """Enable or disable re-replication cluster-wide (no flag: show which)."""
    if enable is not None:
        _run(_urm_call(metadata_uri, "enable" if enable else "disable"))
    enabled = _run(_urm_call(metadata_uri, "is_enabled"))
    click.echo(f"auto-recovery is {'enabled' if enabled else 'disabled'}")


@click.command()
@metadata_option
@_json_option
def queryautorecoverystatus(metadata_uri: str, as_json: bool) -> None:
    """Which ledgers are being re-replicated now, and by whom; flag, auditor, delay."""

    async def run() -> admin.AutoRecoveryStatus:
        async with await ClusterMetadata.open(metadata_uri, require_cluster=True) as cluster:
            return await admin.auto_recovery_status(cluster.underreplication)

    status = _run(run())
    if as_json:
        _echo_json(dataclasses.asdict(status))
        return
    delay = status.lost_bookie_recovery_delay_s
    click.echo(
        f"auto-recovery {'enabled' if status.enabled else 'disabled'}; "
        f"auditor {status.auditor or 'none'}; "
        f"lostBookieRecoveryDelay {'not set' if delay is None else f'{delay} s'}; "
        f"{status.under_replicated} under-replicated ledgers"
    )
    if not status.locked:
        click.echo("no ledger is being re-replicated now")
        return
    table = titled_table("ledgers being re-replicated")
    table.add_column("ledger", justify="right")
    table.add_column("worker")
    for ledger_id, holder in status.locked:
        table.add_row(str(ledger_id), holder)
    console().print(table)


#: Added to the ``shell`` group by :mod:`bkeeper.cli.shell`.
commands: tuple[click.Command, ...] = (
    recover,
    decommissionbookie,
    listunderreplicated,
    whoisauditor,
    triggeraudit,
    lostbookierecoverydelay,
    autorecovery_flag,
    queryautorecoverystatus,
)
