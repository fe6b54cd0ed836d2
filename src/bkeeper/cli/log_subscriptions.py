"""``bkeeper log subscribe|consume|ack|subscriptions|unsubscribe``: durable subscriptions of
named logs from the command line (docs/logs.md). Registered on the ``log`` group."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import click

from bkeeper.cli._errors import CommandError
from bkeeper.cli.log import (
    _FROM,
    _METADATA,
    _run,
    _show,
    _start,
    check_log_name_here,
    run_reporting,
)
from bkeeper.common.errors import (
    BKeeperError,
    ConfigError,
    LogError,
    PositionNotInLogError,
    SubscriptionNotFoundError,
)
from bkeeper.namedlog import Consumer, NamedLogs, Position, backlog
from bkeeper.namedlog.core import Mode, check_subscription_name

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
@click.option(
    "--timeout",
    type=click.FloatRange(0),
    default=2.0,
    show_default=True,
    help="Stop once no record has come for this many seconds.",
)
@click.option(
    "--ack/--no-ack",
    default=True,
    show_default=True,
    help="Acknowledge what was printed (cumulatively) before exiting.",
)
@click.option(
    "--wait",
    type=click.FloatRange(0),
    default=0.0,
    show_default=True,
    help="Seconds to stand by while another consumer holds the subscription.",
)
@click.option(
    "--follow",
    "-f",
    is_flag=True,
    help="Keep printing records as they are appended (no --timeout), until Ctrl-C.",
)
def consume(
    metadata_uri: str,
    name: str,
    subscription: str,
    count_max: int | None,
    timeout: float,
    ack: bool,
    wait: float,
    follow: bool,
) -> None:
    """Print the subscription's next records (position, time, key, payload), as its
    consumer; with --ack (the default) they count as consumed once printed: each batch of
    records ready at once is printed, then acknowledged. Ctrl-C (or the end of --follow)
    writes the acknowledgements, says how far, and exits 130."""
    check_log_name_here(name)
    _check_subscription_name(subscription)

    async def body(logs: NamedLogs) -> None:
        consumer = await _existing(logs, name, subscription, wait)
        printed = _Printed()
        try:
            await _print_batches(consumer, printed, count_max, None if follow else timeout, ack)
        except asyncio.CancelledError:  # Ctrl-C: the acks of what was printed, then say so
            await _close_interrupted(consumer, printed)
            raise
        await consumer.close()

    run_reporting(body, metadata_uri)


#: Records printed before they are acknowledged, at most (one batch of ``consume``).
PRINTED_BATCH_RECORDS_MAX = 1_000


class _Printed:
    """What ``consume`` printed: how many records, and the last one acknowledged."""

    def __init__(self) -> None:
        self.count = 0
        self.acked: Position | None = None


async def _print_batches(
    consumer: Consumer,
    printed: _Printed,
    count_max: int | None,
    timeout: float | None,
    ack: bool,
) -> None:
    """Print records until ``count_max`` or none for ``timeout`` (None: until cancelled),
    a batch at a time (the records ready at once, at most ``PRINTED_BATCH_RECORDS_MAX``),
    acknowledging each batch once printed (``click.echo`` flushes): a stop loses nothing
    printed and delivers again at most the batch being printed."""
    left = count_max
    while left is None or left > 0:
        record = await consumer.receive(timeout)
        if record is None:
            return
        batch = [record]
        room = min(PRINTED_BATCH_RECORDS_MAX, PRINTED_BATCH_RECORDS_MAX if left is None else left)
        while len(batch) < room and (more := await consumer.receive(0)) is not None:
            batch.append(more)
        click.echo("\n".join(_show(one) for one in batch))
        printed.count += len(batch)
        if left is not None:
            left -= len(batch)
        if not ack:
            continue
        if consumer.state.mode == "shared":
            for one in batch:
                consumer.ack_individual(one.position)
        else:
            consumer.ack(batch[-1].position)
        printed.acked = batch[-1].position


async def _close_interrupted(consumer: Consumer, printed: _Printed) -> None:
    """Close ``consumer`` (writing its acks) and print how far it got."""
    acked = f"acknowledged up to {printed.acked}" if printed.acked else "nothing acknowledged"
    try:
        await consumer.close()
    except BKeeperError as exc:
        acked = f"acknowledgements not written: {exc}"
    count = printed.count
    click.echo(f"stopped after {count} {'record' if count == 1 else 'records'} ({acked})", err=True)


@click.command("ack")
@_METADATA
@click.argument("name")
@_SUBSCRIPTION
@click.argument("position")
@click.option("--individual", is_flag=True, help="Acknowledge this record alone.")
def ack_command(
    metadata_uri: str, name: str, subscription: str, position: str, individual: bool
) -> None:
    """Acknowledge POSITION (LEDGER:ENTRY[:INDEX], as append, read and consume print it)
    and every record before it (or, with --individual, that record alone). A position that
    is not one of the log's records (another log's ledger, truncated away, past the end) is
    refused, naming the positions the log holds."""
    at = _position(position)
    check_log_name_here(name)
    _check_subscription_name(subscription)

    async def body(logs: NamedLogs) -> None:
        consumer = await _existing(logs, name, subscription, 0.0)
        try:
            await consumer.ack_up_to(at, individual=individual)
        except PositionNotInLogError as exc:
            raise CommandError(str(exc)) from None
        except asyncio.CancelledError:
            click.echo(
                f"interrupted: the ack of {at} may or may not have been written "
                f"(see: bkeeper log subscriptions {name})",
                err=True,
            )
            raise
        finally:
            await consumer.close()
        click.echo(f"subscription {subscription}: next record at {consumer.state.resume_from}")

    run_reporting(body, metadata_uri)


def _position(text: str) -> Position:
    try:
        return Position.parse(text)
    except ConfigError as exc:
        raise CommandError(str(exc)) from None


def _check_subscription_name(name: str) -> None:
    try:
        check_subscription_name(name)
    except ConfigError as exc:
        raise CommandError(str(exc)) from None


@click.command()
@_METADATA
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="JSON instead of a table.")
def subscriptions(metadata_uri: str, name: str, as_json: bool) -> None:
    """The subscriptions of log NAME: position, consumer, backlog."""
    from bkeeper.cli._tables import console, titled_table

    async def body(logs: NamedLogs) -> None:
        named = logs.log(name)
        store = logs.context.subscriptions
        rows = []
        for sub, state in (await named.subscriptions()).items():
            behind = await backlog(named, state)
            rows.append(
                {
                    "name": sub,
                    "mode": state.mode,
                    "next": str(state.resume_from),
                    "mark": None if state.mark is None else str(state.mark),
                    "acked_out_of_order": sum(r[2] - r[1] + 1 for r in state.acked)
                    + sum(b - a + 1 for p in state.partial for a, b in p[3]),
                    "consumer": await store.owner(name, sub),
                    "epoch": state.epoch,
                    **{f"backlog_{k}": v for k, v in dataclasses.asdict(behind).items()},
                }
            )
        if as_json:
            click.echo(json.dumps(rows, indent=2))
            return
        table = titled_table(f"subscriptions of log {name}")
        for column in (
            "name",
            "mode",
            "next",
            "acked out of order",
            "consumer",
            "epoch",
            "backlog entries",
            "backlog bytes",
        ):
            table.add_column(column)
        for row in rows:
            table.add_row(
                str(row["name"]),
                str(row["mode"]),
                str(row["next"]),
                str(row["acked_out_of_order"]),
                str(row["consumer"] or "-"),
                str(row["epoch"]),
                str(row["backlog_entries"]),
                str(row["backlog_bytes"]),
            )
        console().print(table)

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
