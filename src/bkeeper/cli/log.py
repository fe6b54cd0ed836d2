"""``bkeeper log ...``: create, list, append to, read, tail, truncate and delete named logs,
and the lag of a Spark stream reading them."""

from __future__ import annotations

import datetime
import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import click

from bkeeper.cli._errors import CommandError
from bkeeper.cli._log_append import append_records, read_whole
from bkeeper.cli._log_settings import (
    changed_settings,
    settings_change_lines,
    settings_lines,
    settings_options,
    settings_summary,
)
from bkeeper.cli._options import confirm_deletion, metadata_option
from bkeeper.client import BookKeeper
from bkeeper.common.errors import ConfigError
from bkeeper.namedlog import (
    EARLIEST,
    LATEST,
    LogConfig,
    NamedLog,
    NamedLogs,
    Position,
    Record,
    backlog,
)
from bkeeper.namedlog.core import (
    CHUNK_BYTES_MAX,
    CHUNK_BYTES_MIN,
    CODECS,
    RECORD_BYTES_MAX,
    LogSettings,
)

__all__ = ["log"]

T = TypeVar("T")

_METADATA = metadata_option
_FROM = click.option(
    "--from",
    "start",
    default=EARLIEST,
    show_default=True,
    help="earliest, latest, a position LEDGER:ENTRY[:INDEX], or a time in ms since the epoch.",
)


def _run(
    body: Callable[[NamedLogs], Awaitable[T]], metadata_uri: str, config: LogConfig | None = None
) -> T:
    from bkeeper.common.loop import run_event_loop

    async def main() -> T:
        async with _logs(metadata_uri, config) as logs:
            return await body(logs)

    return run_event_loop(main())


def run_reporting(
    body: Callable[[NamedLogs], Awaitable[T]], metadata_uri: str, config: LogConfig | None = None
) -> T:
    """:func:`_run` for a command whose ``body`` prints what it did when Ctrl-C cancels it:
    then exit 130 with nothing more (no "aborted" line after its own)."""
    try:
        return _run(body, metadata_uri, config)
    except KeyboardInterrupt:
        sys.exit(130)


@asynccontextmanager
async def _logs(metadata_uri: str, config: LogConfig | None = None) -> AsyncIterator[NamedLogs]:
    async with BookKeeper(metadata_uri) as bk:
        yield NamedLogs(bk, config)


def _start(text: str) -> str | Position | int:
    if text in (EARLIEST, LATEST):
        return text
    if ":" in text:
        return Position.parse(text)
    try:
        return int(text)
    except ValueError:
        raise click.BadParameter(
            f"{text!r}: use earliest, latest, LEDGER:ENTRY[:INDEX] or milliseconds",
            param_hint="--from",
        ) from None


def _show(record: Record) -> str:
    stamp = datetime.datetime.fromtimestamp(record.timestamp_ms / 1000, datetime.UTC)
    try:
        payload = record.payload.decode()
        if not payload.isprintable():
            raise UnicodeDecodeError("utf-8", record.payload, 0, 1, "not printable")
    except UnicodeDecodeError:
        payload = "0x" + record.payload.hex()
    key = record.key.decode(errors="replace") if record.key is not None else "-"
    return f"{record.position}\t{stamp.isoformat(timespec='milliseconds')}\t{key}\t{payload}"


@click.group()
def log() -> None:
    """Named logs: ordered lists of ledgers with one writer at a time."""


@log.command()
@_METADATA
@click.argument("name")
@settings_options
def create(metadata_uri: str, name: str, **given: Any) -> None:
    """Create an empty log, with the settings given stored in it (every writer of the log
    applies them, in any process; change them with bkeeper log config)."""
    settings = changed_settings(LogSettings(), given)

    async def body(logs: NamedLogs) -> None:
        await logs.create(name, settings)
        click.echo(f"created log {name}")
        if not settings.empty:
            click.echo("\n".join(settings_lines(name, settings)[1:]))

    _run(body, metadata_uri)


@log.command("list")
@_METADATA
def list_logs(metadata_uri: str) -> None:
    """A table of the logs: their ledgers (count, first..last), their settings (retention,
    roll size and age, ensemble/write/ack quorums; -: not set) and subscriptions."""
    from bkeeper.cli._tables import console, titled_table

    async def body(logs: NamedLogs) -> None:
        table = titled_table(
            f"logs at {metadata_uri}", "name", "ledgers", "retention", "roll", "e/w/a", "backlog"
        )
        for name in await logs.names():
            named = logs.log(name)
            meta = await named.metadata()
            ledgers = f"{len(meta.ledgers)}"
            if meta.ledgers:
                ledgers += f" ({meta.ledgers[0].ledger_id}..{meta.ledgers[-1].ledger_id})"
            try:
                cells = settings_summary(meta.settings(name))
            except ConfigError:
                cells = ("wrong: see bkeeper log config", "-", "-")
            behind = []
            for sub, state in (await named.subscriptions()).items():
                left = await backlog(named, state)
                entries = "entry" if left.entries == 1 else "entries"
                behind.append(f"{sub}: {left.entries} {entries}, {left.bytes} B")
            table.add_row(name, ledgers, *cells, "\n".join(behind) or "-")
        console().print(table)

    _run(body, metadata_uri)


@log.command("config")
@_METADATA
@click.argument("name")
@settings_options
@click.option(
    "--unset",
    "unset",
    multiple=True,
    metavar="SETTING",
    help="Unset a setting (a writer's own default applies again): retention-age, "
    "retention-size, retention-consumed, roll-size, roll-age, replication or all. "
    "May be repeated.",
)
@click.option(
    "--existing",
    is_flag=True,
    help="Also give the log's sealed ledgers its stored ensemble and quorums (copying their "
    "entries to the bookies that layout adds), and wait for the open one to be sealed.",
)
@click.option(
    "--wait",
    "wait_s",
    type=click.FloatRange(min=0),
    default=120.0,
    show_default=True,
    help="With --existing: seconds to wait for the open ledger's writer to roll.",
)
def config(
    metadata_uri: str,
    name: str,
    unset: tuple[str, ...],
    existing: bool,
    wait_s: float,
    **given: Any,
) -> None:
    """Show the settings stored with log NAME, or change them (printing each setting changed,
    before -> after).

    A change goes in by compare-and-set (a concurrent change is kept, not overwritten) and
    open writers follow it within a tick of their timer (roll_age / 2, at most 60 s): roll
    limits and retention at once, ensemble and quorums from their next ledger, which they
    start at once. With --existing the log's sealed ledgers take the stored ensemble and
    quorums too (entries copied to the bookies the new layout adds, online)."""
    changing = bool(unset) or any(value is not None for value in given.values())
    if changing:
        changed_settings(LogSettings(), given, unset)  # a bad value fails before connecting

    async def body(logs: NamedLogs) -> None:
        named = logs.log(name)
        if changing:
            before, after = await named.configure(lambda now: changed_settings(now, given, unset))
            click.echo("\n".join(settings_change_lines(name, before, after)))
        elif not existing:
            click.echo("\n".join(settings_lines(name, await named.settings())))
        if existing:
            from bkeeper.cli._log_relayout import relayout_log  # auto-recovery: only here

            await relayout_log(logs, name, wait_s)

    _run(body, metadata_uri)


@log.command()
@_METADATA
@click.argument("name")
@click.argument("records", nargs=-1)
@click.option("--key", default=None, help="Key of every record appended.")
@click.option(
    "--batch/--no-batch",
    default=False,
    show_default=True,
    help="Pack records into record batches (one entry holds many; readers of bkeeper "
    "before record batching cannot read them).",
)
@click.option(
    "--batch-max-records",
    type=click.IntRange(1),
    default=1_000,
    show_default=True,
    help="Records one batch holds at most.",
)
@click.option(
    "--batch-max-bytes",
    type=click.IntRange(1),
    default=128 * 1024,
    show_default=True,
    help="Bytes of records one batch holds at most (4 MiB at most).",
)
@click.option(
    "--linger-ms",
    type=click.IntRange(0),
    default=1,
    show_default=True,
    help="How long a batch waits for more records after its first.",
)
@click.option(
    "--compression",
    type=click.Choice(list(CODECS)),
    default="none",
    show_default=True,
    help="Compression of each batch (zstd and lz4 need their packages).",
)
@click.option(
    "--file",
    "whole",
    type=click.File("rb"),
    default=None,
    help="Append the whole of this file as one record ('-': all of standard input), up to "
    f"{RECORD_BYTES_MAX // (1024 * 1024)} MiB; larger than --chunk-bytes, it goes in chunks.",
)
@click.option(
    "--chunk-bytes",
    type=click.IntRange(CHUNK_BYTES_MIN, CHUNK_BYTES_MAX),
    default=CHUNK_BYTES_MAX,
    show_default=True,
    help="A record larger than this is written as chunks of this size (one entry each).",
)
@click.option(
    "--create", "create_log", is_flag=True, help="Create the log first if it does not exist."
)
def append(
    metadata_uri: str,
    name: str,
    records: tuple[str, ...],
    key: str | None,
    batch: bool,
    batch_max_records: int,
    batch_max_bytes: int,
    linger_ms: int,
    compression: str,
    whole: BinaryIO | None,
    chunk_bytes: int,
    create_log: bool,
) -> None:
    """Append RECORDS (or, without any, one record per line of standard input, or with
    --file the whole of a file as one record).

    Becomes the log's writer for the duration, fencing any other writer. Prints the
    position of each record given as an argument or file once it is durable (LEDGER:ENTRY,
    with :INDEX for a record inside a batch; a record written in chunks is at its last
    chunk's). If any append fails it stops, says which records were appended and why the
    next one failed, and exits 1. Ctrl-C stops it too: it says which records were appended
    (those in flight: after waiting up to 2 s for them) and exits 130. Reading standard
    input or a file, it shows its progress on standard error every 2 s after the first 2 s.
    """
    try:
        config = LogConfig(
            batching=batch,
            batch_max_records=batch_max_records,
            batch_max_bytes=batch_max_bytes,
            linger_ms=linger_ms,
            compression=compression,
            chunk_bytes=chunk_bytes,
        )
    except ConfigError as exc:
        raise CommandError(str(exc)) from exc
    if whole is not None and records:
        raise click.UsageError("give RECORDS or --file, not both")
    check_log_name_here(name)
    contents = read_whole(whole) if whole is not None else None

    async def body(logs: NamedLogs) -> None:
        await append_records(logs, name, records, key=key, contents=contents, create_log=create_log)

    run_reporting(body, metadata_uri, config)


def check_log_name_here(name: str) -> None:
    """A bad log name is refused before any connection (the library's rule and words)."""
    from bkeeper.namedlog.core import check_log_name

    try:
        check_log_name(name)
    except ConfigError as exc:
        raise CommandError(str(exc)) from None


def _ledgers(count: int) -> str:
    return "ledger" if count == 1 else "ledgers"


async def _print_until(named: NamedLog, start: str | Position | int, last: Position | None) -> int:
    """Print records from ``start``; stop after ``last`` (None: never)."""
    reader = await named.open_reader(start)
    count = 0
    try:
        if last is not None and await reader.seek() > last:
            return 0
        async for record in reader:
            click.echo(_show(record))
            count += 1
            if last is not None and record.position >= last:
                break
    finally:
        await reader.close()
    return count


@log.command()
@_METADATA
@click.argument("name")
@_FROM
def read(metadata_uri: str, name: str, start: str) -> None:
    """Print the records from --from to the end of the log as it is now, then stop.

    One line per record: position, time, key, payload (text or 0x-hex).
    """

    first = _start(start)  # a bad --from is a usage error, before any connection

    async def body(logs: NamedLogs) -> None:
        named = logs.log(name)
        last = await named.last_position()
        if last is not None:
            await _print_until(named, first, last)

    _run(body, metadata_uri)


@log.command()
@_METADATA
@click.argument("name")
@click.option("--from", "start", default=LATEST, show_default=True, help="As for read.")
def tail(metadata_uri: str, name: str, start: str) -> None:
    """Print records as they are appended, until Ctrl-C (never fences the writer)."""

    first = _start(start)

    async def body(logs: NamedLogs) -> None:
        await _print_until(logs.log(name), first, None)

    _run(body, metadata_uri)


@log.command()
@_METADATA
@click.argument("name")
@click.option("--before", required=True, help="Position LEDGER:ENTRY[:INDEX] to keep from.")
def truncate(metadata_uri: str, name: str, before: str) -> None:
    """Delete the ledgers that hold only records before --before."""
    position = Position.parse(before)

    async def body(logs: NamedLogs) -> None:
        deleted = await logs.log(name).truncate(position)
        click.echo(f"deleted {deleted} {_ledgers(deleted)} of {name}")

    _run(body, metadata_uri)


@log.command()
@_METADATA
@click.argument("name")
@click.option("--force", is_flag=True, help="Do not ask for confirmation.")
def delete(metadata_uri: str, name: str, force: bool) -> None:
    """Delete the log and all its ledgers."""
    if not force:
        confirm_deletion(f"delete log {name} and all its records?")

    async def body(logs: NamedLogs) -> None:
        deleted = await logs.delete(name)
        click.echo(f"deleted log {name} ({deleted} {_ledgers(deleted)})")

    _run(body, metadata_uri)


@log.command()
@_METADATA
@click.option(
    "--checkpoint",
    "checkpoint",
    required=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="The checkpointLocation of a Spark streaming query that reads named logs.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def lag(metadata_uri: str, checkpoint: Path, as_json: bool) -> None:
    """How far a Spark stream that is not running is behind: records (``~``: estimated, when
    a log is far behind), the age of its oldest unread record, entries and bytes from where
    its last committed batch left each log up to the log's head now."""
    from bkeeper.spark.lag import LagReport, checkpoint_offsets, measure
    from bkeeper.spark.log_view import LogView

    batch, positions = checkpoint_offsets(checkpoint)

    async def body(logs: NamedLogs) -> LagReport:
        return LagReport(batch, await measure(LogView(logs), positions))

    report = _run(body, metadata_uri)
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2))
        return
    from bkeeper.cli._tables import console, titled_table

    table = titled_table(f"lag of {checkpoint} (last committed batch {batch})")
    columns = (
        "log",
        "position",
        "head",
        "records behind",
        "time behind",
        "entries behind",
        "bytes behind",
    )
    for column in columns:
        table.add_column(column)
    for name, one in sorted(report.logs.items()):
        table.add_row(
            name,
            str(one.position),
            str(one.head),
            one.records_text,
            f"{one.time_behind_ms / 1000:.1f} s",
            str(one.entries_behind),
            str(one.bytes_behind),
        )
    console().print(table)
    click.echo(report.summary())
