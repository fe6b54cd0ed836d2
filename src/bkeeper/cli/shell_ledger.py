"""``bkeeper shell listledgers|readledger|ledger``: ledgers as the cluster lists them, as
the client (or one bookie: ``readledger --bookie``) reads them, and as one bookie's index
holds them (``ledger ID``, read from its data directory, in the manner of Apache BookKeeper's
``bookkeeper shell ledger``).

Tables by default, ``--json`` for scripts; reads show a progress bar on stderr (only on a
terminal). A mistake or a failure is one ``error:`` line and exit status 1.
"""

from __future__ import annotations

import os
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

import click

from bkeeper.cli._disk import (
    DATA_DIR_OPTION,
    JOURNAL_DIR_OPTION,
    JSON_OPTION,
    LEDGER_DIR_OPTION,
    LIMIT_OPTION,
    learn_dirs,
    print_json,
    read,
    show,
)
from bkeeper.cli._errors import CommandError
from bkeeper.cli._ledger_password import ledger_password, password_options
from bkeeper.cli._options import metadata_option
from bkeeper.cli._tables import titled_table
from bkeeper.cli.shell_ops import progress
from bkeeper.client.bookkeeper import BookKeeper
from bkeeper.client.replica import entries_on, read_replica
from bkeeper.common.errors import LedgerNotFoundError
from bkeeper.meta.ledger_metadata import LedgerMetadata
from bkeeper.storage import OsFileSystem
from bkeeper.storage.inspect_ledger import ledger_index

__all__ = ["commands", "metadata_json", "printable"]

T = TypeVar("T")

#: How long ``readledger --bookie`` waits for each entry by default.
REPLICA_READ_TIMEOUT_S = 10.0
#: Entries a ``readledger --bookie`` failure names (the rest are counted).
_FAILURES_NAMED_MAX = 10


def _run(coro: Coroutine[Any, Any, T]) -> T:
    from bkeeper.common.loop import run_event_loop

    return run_event_loop(coro)


def printable(data: bytes, as_hex: bool) -> str:
    """``data`` as text when it is printable UTF-8 (and not ``as_hex``), else 0x-hex."""
    if not as_hex:
        try:
            text = data.decode()
            if text.isprintable():
                return text
        except UnicodeDecodeError:
            pass
    return "0x" + data.hex()


def metadata_json(ledger_id: int, meta: LedgerMetadata) -> dict[str, object]:
    """A ledger's metadata for ``--json`` (the password left out)."""
    return {
        "ledger": ledger_id,
        "state": meta.state.name,
        "ensemble_size": meta.ensemble_size,
        "write_quorum": meta.write_quorum,
        "ack_quorum": meta.ack_quorum,
        "digest": meta.digest_type.name,
        "last_entry": meta.last_entry_id,
        "length": meta.length,
        "ctime_ms": meta.ctime_ms,
        "format_version": meta.format_version,
        "segments": [
            {"first_entry": first, "ensemble": list(ensemble)}
            for first, ensemble in meta.segments.items()
        ],
        "custom_metadata": {
            key: printable(raw, False) for key, raw in sorted(meta.custom_metadata.items())
        },
    }


# -- listledgers ---------------------------------------------------------------------------
@click.command()
@metadata_option
@click.option("--meta", "with_meta", is_flag=True, help="Also show each ledger's metadata.")
@JSON_OPTION
def listledgers(metadata_uri: str, with_meta: bool, as_json: bool) -> None:
    """A table of the ledger ids (with --meta: state, quorums, last entry, length)."""

    async def collect(bk: BookKeeper, rows: list[dict[str, object]]) -> None:
        with progress("listing ledgers") as advance:
            async for ledger_id in bk.list_ledgers():
                advance(len(rows), None)
                if not with_meta:
                    rows.append({"ledger": ledger_id})
                    continue
                try:
                    meta = await bk.ledger_metadata(ledger_id)
                except LedgerNotFoundError:
                    continue  # deleted meanwhile
                rows.append(
                    {
                        "ledger": ledger_id,
                        "state": meta.state.name,
                        "ensemble_size": meta.ensemble_size,
                        "write_quorum": meta.write_quorum,
                        "ack_quorum": meta.ack_quorum,
                        "last_entry": meta.last_entry_id,
                        "length": meta.length,
                        "digest": meta.digest_type.name,
                    }
                )

    async def run() -> list[dict[str, object]]:
        rows: list[dict[str, object]] = []
        async with BookKeeper(metadata_uri) as bk:
            await collect(bk, rows)
        return rows

    rows = _run(run())
    if as_json:
        print_json(rows)
        return
    table = titled_table(f"ledgers at {metadata_uri}")
    columns = ["ledger"]
    if with_meta:
        columns += ["state", "E/Qw/Qa", "last entry", "length", "digest"]
    for column in columns:
        table.add_column(column, justify="right" if column != "state" else "left")
    for row in rows:
        if not with_meta:
            table.add_row(str(row["ledger"]))
            continue
        table.add_row(
            str(row["ledger"]),
            str(row["state"]),
            f"{row['ensemble_size']}/{row['write_quorum']}/{row['ack_quorum']}",
            str(row["last_entry"]),
            f"{row['length']:,}",
            str(row["digest"]),
        )
    show(table)
    if not rows:
        click.echo("no ledgers", err=True)


# -- readledger ----------------------------------------------------------------------------
@click.command()
@metadata_option
@click.argument("ledger_id", type=click.IntRange(0))
@click.option("--from", "first", default=0, show_default=True, type=click.IntRange(0))
@click.option("--to", "last", default=None, type=click.IntRange(0), help="Default: the LAC.")
@password_options("empty")
@click.option(
    "--recovery/--no-recovery",
    default=False,
    show_default=True,
    help="Open with recovery (fences the writer and seals the ledger).",
)
@click.option(
    "--bookie",
    "bookie_id",
    metavar="ID",
    help="Read only this bookie's copy: the entries its write sets give it, each answer "
    "shown (exit status 1 if it lacks any or one fails its digest).",
)
@click.option("--hex", "as_hex", is_flag=True, help="Print payloads as hex.")
def readledger(
    metadata_uri: str,
    ledger_id: int,
    first: int,
    last: int | None,
    password_file: str | None,
    recovery: bool,
    bookie_id: str | None,
    as_hex: bool,
) -> None:
    """Print entries of a ledger (entry id, then the payload as text or 0x-hex).

    The ledger's password: --password-file FILE or $BKEEPER_LEDGER_PASSWORD (never on the
    command line, which ps shows)."""
    if last is not None and last < first:
        raise CommandError(f"--to {last} is before --from {first}: nothing to read")
    password = ledger_password(password_file)

    async def run() -> None:
        async with BookKeeper(metadata_uri) as bk:
            handle = await bk.open_ledger(ledger_id, password, recovery=recovery)
            end = handle.last_add_confirmed
            if not handle.is_closed:
                end = await handle.read_last_add_confirmed()
            past = _past_the_end(ledger_id, first, last, end, handle.is_closed)
            if past is not None:
                raise CommandError(past)
            stop = end if last is None else last
            if stop < first:
                click.echo(f"ledger {ledger_id} has no entries", err=True)
                return
            if bookie_id is not None:
                await _read_one_bookie(bk, handle.metadata, bookie_id, first, stop)
                return
            with progress(f"reading ledger {ledger_id}") as advance:
                done = 0
                async for entry in handle.read(first, stop):
                    click.echo(f"{entry.entry_id}\t{printable(entry.data, as_hex)}")
                    done += 1
                    advance(done, stop - first + 1)

    async def _read_one_bookie(
        bk: BookKeeper, meta: LedgerMetadata, bookie: str, start: int, stop: int
    ) -> None:
        wanted = entries_on(meta, bookie, start, stop)
        if not wanted:
            raise CommandError(
                f"bookie {bookie} holds no entry of ledger {ledger_id} in {start}..{stop} "
                f"(its ensembles: {'; '.join(', '.join(e) for e in meta.segments.values())})"
            )
        failed: list[str] = []
        with progress(f"reading ledger {ledger_id} from {bookie}") as advance:
            done = 0
            async for got in read_replica(
                bk.pool,
                meta,
                ledger_id,
                password,
                bookie,
                wanted,
                timeout_s=REPLICA_READ_TIMEOUT_S,
            ):
                done += 1
                advance(done, len(wanted))
                if got.entry is not None:
                    click.echo(f"{got.entry_id}\t{printable(got.entry.data, as_hex)}")
                else:
                    failed.append(f"{got.entry_id} ({type(got.error).__name__})")
        if failed:
            named = ", ".join(failed[:_FAILURES_NAMED_MAX])
            more = (
                f" and {len(failed) - _FAILURES_NAMED_MAX} more"
                if len(failed) > _FAILURES_NAMED_MAX
                else ""
            )
            raise CommandError(
                f"bookie {bookie} failed {len(failed)} of the {len(wanted)} entries of ledger "
                f"{ledger_id} it should hold: {named}{more}"
            )

    _run(run())


def _past_the_end(
    ledger_id: int, first: int, last: int | None, end: int, closed: bool
) -> str | None:
    """Why ``--from first --to last`` asks for entries ledger ``ledger_id`` does not have
    (``end``: its last entry, or while it is open its last add confirmed), or None. The
    defaults on an empty ledger are not a mistake: they read nothing."""
    if last is not None and last > end:
        asked = f"--to {last}"
    elif first > end and first > 0:
        asked = f"--from {first}"
    else:
        return None
    has = f"entries 0..{end}" if end >= 0 else "no entries"
    state = "closed" if closed else "open: confirmed so far"
    return f"{asked} is past the end of ledger {ledger_id}: it has {has} ({state})"


# -- ledger: one bookie's index ------------------------------------------------------------
@click.command("ledger")
@click.argument("ledger_id", type=click.IntRange(0))
@DATA_DIR_OPTION
@LEDGER_DIR_OPTION
@JOURNAL_DIR_OPTION
@LIMIT_OPTION
@JSON_OPTION
def ledger_command(
    ledger_id: int,
    data_dir: str,
    ledger_dirs: tuple[str, ...],
    journal_dirs: tuple[str, ...],
    limit: int,
    as_json: bool,
) -> None:
    """Dump LEDGER_ID as this bookie's index holds it (as of its last checkpoint): fenced,
    limbo, master key, explicit LAC, and each entry's entry log and offset."""
    fs = OsFileSystem()
    dirs = learn_dirs(fs, data_dir, ledger_dirs, journal_dirs)
    mark, view = read(lambda: ledger_index(fs, dirs, ledger_id, limit or None))
    if mark is None:
        raise CommandError(f"{data_dir}: the bookie has no checkpoint yet (never opened)")
    if view is None:
        raise CommandError(
            f"ledger {ledger_id} is not in the index of {data_dir} (as of the checkpoint of "
            f"{_when(mark.path)}; entries added since are in the journal only)"
        )
    if as_json:
        print_json(view.as_dict())
        return
    state = titled_table(f"ledger {ledger_id} in {data_dir}", show_header=False)
    state.add_column("field")
    state.add_column("value")
    lac = "-" if view.explicit_lac_bytes is None else f"{view.explicit_lac_bytes} bytes"
    span = "-" if view.first_entry_id is None else f"{view.first_entry_id}..{view.last_entry_id}"
    for name, value in (
        ("fenced", str(view.fenced).lower()),
        ("limbo", str(view.limbo).lower()),
        ("master key", f"{view.master_key_bytes} bytes"),
        ("explicit LAC", lac),
        ("entries", f"{view.entries_total:,} ({span})"),
        ("as of checkpoint", f"{mark.path} (index generation {mark.index_generation})"),
    ):
        state.add_row(name, value)
    entries = titled_table("entry locations")
    for column in ("entry", "entry log", "offset", "file"):
        entries.add_column(column, justify="left" if column == "file" else "right")
    for entry in view.entries:
        entries.add_row(
            str(entry.entry_id),
            f"{entry.log_id:x}",
            str(entry.offset),
            entry.log_path or "missing (localconsistencycheck)",
        )
    left = view.entries_left_out
    note = f"{left:,} more entries (--limit 0 shows all)" if left else ""
    show(state, entries, note=note)


def _when(path: str) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(os.path.getmtime(path)))
    except OSError:
        return "unknown time"


commands = (listledgers, readledger, ledger_command)
