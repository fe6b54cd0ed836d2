"""``bkeeper log subscribe|consume|ack|subscriptions|unsubscribe``: durable subscriptions of
named logs from the command line (docs/logs.md). Registered on the ``log`` group."""

from __future__ import annotations

import dataclasses
import json

import click
from rich.console import Console
from rich.table import Table

from bkeeper.cli._errors import CommandError
from bkeeper.cli.log import _FROM, _METADATA, _run, _show, _start
from bkeeper.common.errors import LogError, SubscriptionNotFoundError
from bkeeper.namedlog import NamedLogs, Position
from bkeeper.namedlog.consumer import Consumer, backlog
from bkeeper.namedlog.subscription import Mode
from bkeeper.namedlog.subscription_store import SubscriptionStore

__all__ = ["COMMANDS"]

_SUBSCRIPTION = click.argument("subscription")


async def _existing(logs: NamedLogs, name: str, subscription: str, wait_s: float) -> Consumer:
    named = logs.log(name)
    state = (await named.subscriptions()).get(subscription)
    if state is None:
        await named.metadata()  # no log at all: say that
        raise CommandError(
            f"log {name!r} has no subscription {subscription!r} "
            f"(create it with: bkeeper log subscribe {name} {subscription})"
        )
    try:
        return await named.subscribe(subscription, wait_s=wait_s, create=False, mode=state.mode)
    except SubscriptionNotFoundError as exc:
        raise CommandError(str(exc)) from exc


@click.command()
@_METADATA
@click.argument("name")
@_SUBSCRIPTION
@_FROM
@click.option("--shared", is_flag=True, help="Several consumers at once, each record to one.")
def subscribe(metadata_uri: str, name: str, subscription: str, start: str, shared: bool) -> None:
    """Create SUBSCRIPTION on log NAME, consuming from --from (a subscription that exists
    already keeps its position)."""
    first = _start(start)

    async def body(logs: NamedLogs) -> None:
        mode: Mode = "shared" if shared else "exclusive"
        consumer = await logs.log(name).subscribe(subscription, first, mode=mode)
        state = consumer.state
        await consumer.close()
        click.echo(f"subscription {subscription} of log {name}: next record at {state.resume_from}")

    _run(body, metadata_uri)


@click.command()
@_METADATA
@click.argument("name")
@_SUBSCRIPTION
@click.option(
    "--max",
    "count_max",
    type=click.IntRange(1),
    default=None,
    help="Stop after this many records (default: when none comes for --timeout).",
)
@click.option("--timeout", type=click.FloatRange(0), default=2.0, show_default=True,
              help="Stop once no record has come for this many seconds.")  # fmt: skip
@click.option("--ack/--no-ack", default=True, show_default=True,
              help="Acknowledge what was printed (cumulatively) before exiting.")  # fmt: skip
@click.option(
    "--wait",
    type=click.FloatRange(0),
    default=0.0,
    show_default=True,
    help="Seconds to stand by while another consumer holds the subscription.",
)
def consume(
    metadata_uri: str,
    name: str,
    subscription: str,
    count_max: int | None,
    timeout: float,
    ack: bool,
    wait: float,
) -> None:
    """Print the subscription's next records (position, time, key, payload), as its
    consumer; with --ack (the default) they count as consumed once printed."""

    async def body(logs: NamedLogs) -> None:
        consumer = await _existing(logs, name, subscription, wait)
        try:
            count = 0
            while count_max is None or count < count_max:
                record = await consumer.receive(timeout)
                if record is None:
                    break
                click.echo(_show(record))
                count += 1
                if ack and consumer.state.mode == "shared":
                    consumer.ack_individual(record.position)
                elif ack:
                    consumer.ack(record.position)
        finally:
            await consumer.close()

    _run(body, metadata_uri)


@click.command("ack")
@_METADATA
@click.argument("name")
@_SUBSCRIPTION
@click.argument("position")
@click.option("--individual", is_flag=True, help="Acknowledge this record alone.")
def ack_command(
    metadata_uri: str, name: str, subscription: str, position: str, individual: bool
) -> None:
    """Acknowledge POSITION (LEDGER:ENTRY[:INDEX]) and every record before it (or, with
    --individual, that record alone)."""
    at = Position.parse(position)

    async def body(logs: NamedLogs) -> None:
        consumer = await _existing(logs, name, subscription, 0.0)
        try:
            await consumer.ack_up_to(at, individual=individual)
        finally:
            await consumer.close()
        click.echo(f"subscription {subscription}: next record at {consumer.state.resume_from}")

    _run(body, metadata_uri)


@click.command()
@_METADATA
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="JSON instead of a table.")
def subscriptions(metadata_uri: str, name: str, as_json: bool) -> None:
    """The subscriptions of log NAME: position, consumer, backlog."""

    async def body(logs: NamedLogs) -> None:
        named = logs.log(name)
        store = SubscriptionStore(logs.bk.cluster.store, logs.store)
        rows = []
        for sub, state in (await named.subscriptions()).items():
            behind = await backlog(named, state)
            rows.append({
                "name": sub,
                "mode": state.mode,
                "next": str(state.resume_from),
                "mark": None if state.mark is None else str(state.mark),
                "acked_out_of_order": sum(r[2] - r[1] + 1 for r in state.acked)
                + sum(b - a + 1 for p in state.partial for a, b in p[3]),
                "consumer": await store.owner(name, sub),
                "epoch": state.epoch,
                **{f"backlog_{k}": v for k, v in dataclasses.asdict(behind).items()},
            })  # fmt: skip
        if as_json:
            click.echo(json.dumps(rows, indent=2))
            return
        table = Table(title=f"subscriptions of log {name}")
        for column in ("name", "mode", "next", "acked out of order", "consumer", "epoch",
                       "backlog entries", "backlog bytes"):  # fmt: skip
            table.add_column(column)
        for row in rows:
            table.add_row(
                str(row["name"]), str(row["mode"]), str(row["next"]),
                str(row["acked_out_of_order"]),
                str(row["consumer"] or "-"), str(row["epoch"]),
                str(row["backlog_entries"]), str(row["backlog_bytes"]),
            )  # fmt: skip
        console = Console()
        (console if console.is_terminal else Console(width=160)).print(table)

    _run(body, metadata_uri)


@click.command()
@_METADATA
@click.argument("name")
@_SUBSCRIPTION
def unsubscribe(metadata_uri: str, name: str, subscription: str) -> None:
    """Delete SUBSCRIPTION of log NAME (retention stops keeping records for it)."""

    async def body(logs: NamedLogs) -> None:
        try:
            await logs.log(name).unsubscribe(subscription)
        except LogError as exc:
            raise CommandError(str(exc)) from exc
        click.echo(f"subscription {subscription} of log {name} deleted")

    _run(body, metadata_uri)


#: The commands added to ``bkeeper log``.
COMMANDS = (subscribe, consume, ack_command, subscriptions, unsubscribe)
