"""``bkeeper shell listfilesondisc / lastmark / readjournal / readlog /
localconsistencycheck``: a bookie's files, read directly from its data directory.

In the manner of Apache BookKeeper's ``bookkeeper shell`` commands of the same names. They
only read, so they work on a stopped bookie and on a running one (see
:mod:`bkeeper.storage.inspect` for what a running bookie may change under them). Tables by
default, ``--json`` for scripts; a missing or foreign directory, or damage found in a file,
is one line on stderr and exit status 1 (after the report, when there is one).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import click
from rich.console import Console
from rich.table import Table

from bkeeper.cli._errors import CommandError
from bkeeper.common.errors import StorageError
from bkeeper.storage import OsFileSystem
from bkeeper.storage.inspect import (
    CONSISTENCY_PROBLEMS_MAX,
    ConsistencyReport,
    DiskFile,
    Mark,
    check_consistency,
    last_mark,
    list_files,
)
from bkeeper.storage.inspect_journal import (
    JournalDamage,
    JournalGroup,
    JournalRecordView,
    journal_path,
    read_journal,
)

__all__ = ["commands"]

_T = TypeVar("_T")

#: Rows a table shows unless ``--limit`` says otherwise.
_ROWS_DEFAULT = 1000


def _console() -> Console:
    console = Console()
    return console if console.is_terminal else Console(width=160)


@contextmanager
def _failures() -> Iterator[None]:
    """Storage and OS errors as the one line a command fails with."""
    try:
        yield
    except (StorageError, OSError) as exc:
        raise CommandError(str(exc)) from exc


def _read(call: Callable[[], _T]) -> _T:
    with _failures():
        return call()


def _print_json(value: object) -> None:
    click.echo(json.dumps(value, indent=2))


_DATA_DIR = click.option(
    "--data-dir",
    required=True,
    help="The bookie's data directory (as given to 'bkeeper bookie --data-dir').",
)
_JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
_LIMIT = click.option(
    "--limit",
    default=_ROWS_DEFAULT,
    show_default=True,
    type=click.IntRange(0),
    help="Show at most this many rows (0: all); the rest are counted.",
)


# -- listfilesondisc -----------------------------------------------------------------------
@click.command()
@_DATA_DIR
@click.option("--journal", is_flag=True, help="Journal files.")
@click.option("--entrylog", is_flag=True, help="Entry logs.")
@click.option("--index", is_flag=True, help="Index generations and the checkpoint.")
@_JSON
def listfilesondisc(
    data_dir: str, journal: bool, entrylog: bool, index: bool, as_json: bool
) -> None:
    """The bookie's journal files, entry logs, index generations and checkpoint, with their
    sizes (all of them unless some kinds are asked for)."""
    every = not (journal or entrylog or index)
    fs = OsFileSystem()
    files = _read(
        lambda: list_files(
            fs,
            data_dir,
            journal=every or journal,
            entrylog=every or entrylog,
            index=every or index,
        )
    )
    if as_json:
        _print_json({"data_dir": data_dir, "files": [f.as_dict() for f in files]})
        return
    table = Table(title=f"files of the bookie in {data_dir}")
    for column in ("kind", "number", "name", "bytes", "note"):
        table.add_column(column, justify="right" if column in ("number", "bytes") else "left")
    for file in files:
        number = "" if file.number < 0 else str(file.number)
        table.add_row(
            file.kind, number, os.path.basename(file.path), f"{file.size_bytes:,}", _note(file)
        )
    totals: Counter[str] = Counter()
    sizes: Counter[str] = Counter()
    for file in files:
        totals[file.kind] += 1
        sizes[file.kind] += file.size_bytes
    table.caption = "; ".join(
        f"{totals[kind]} {kind} ({sizes[kind]:,} bytes)" for kind in sorted(totals)
    )
    _console().print(table)


def _note(file: DiskFile) -> str:
    if file.kind == "journal":
        return "replay starts here (checkpoint mark)" if file.current else ""
    if file.kind == "index":
        return "current (named by the checkpoint)" if file.current else "old"
    if file.kind == "entrylog" and file.ledgers_map is not None:
        return "ledgers map" if file.ledgers_map else "no ledgers map"
    return ""


# -- lastmark ------------------------------------------------------------------------------
@click.command()
@_DATA_DIR
@_JSON
def lastmark(data_dir: str, as_json: bool) -> None:
    """The checkpoint: where journal replay starts (file id, offset), the index generation
    and its committed length, and whether the whole storage is in limbo."""
    mark = _read(lambda: last_mark(OsFileSystem(), data_dir))
    if as_json:
        _print_json({"data_dir": data_dir, "checkpoint": None if mark is None else mark.as_dict()})
        return
    if mark is None:
        click.echo(f"no checkpoint in {data_dir}: the bookie never finished opening")
        return
    _console().print(_mark_table(mark, f"checkpoint of the bookie in {data_dir}"))


def _mark_table(mark: Mark, title: str) -> Table:
    table = Table(title=title, show_header=False)
    table.add_column("field")
    table.add_column("value")
    table.add_row("checkpoint file", mark.path)
    table.add_row(
        "journal mark",
        f"file {mark.journal_file_id} ({os.path.basename(mark.journal_path)}) "
        f"offset {mark.journal_offset:,}",
    )
    table.add_row(
        "index",
        f"generation {mark.index_generation} ({os.path.basename(mark.index_path)}), "
        f"first {mark.index_bytes:,} bytes",
    )
    table.add_row("limbo (whole storage)", "yes" if mark.limbo else "no")
    return table


# -- readjournal ---------------------------------------------------------------------------
@click.command()
@click.option(
    "--data-dir",
    default=None,
    help="The bookie's data directory (needed when FILE is a journal file id).",
)
@click.argument("file")
@click.option("--entries", is_flag=True, help="One row per record instead of per group.")
@_LIMIT
@_JSON
def readjournal(data_dir: str | None, file: str, entries: bool, limit: int, as_json: bool) -> None:
    """The groups (sequence number, offset, records) of one journal file, given by FILE as
    its id or its path; with --entries its records (kind, ledger, entry, length). Damage is
    reported where it is, and the command then fails."""
    fs = OsFileSystem()
    path, file_id = _read(lambda: journal_path(fs, data_dir, file))
    size = _read(lambda: fs.size(path))
    groups = records = 0
    rows: list[JournalGroup | JournalRecordView] = []
    damage: list[JournalDamage] = []
    with _failures():
        for item in read_journal(fs, path, file_id):
            if isinstance(item, JournalDamage):
                damage.append(item)
                continue
            groups += 1
            records += len(item.records)
            wanted = list(item.records) if entries else [item]
            room = len(wanted) if limit == 0 else max(0, limit - len(rows))
            rows.extend(wanted[:room])
    shown = len(rows)
    left_out = (records if entries else groups) - shown
    if as_json:
        _print_json(
            {
                "path": path,
                "file_id": file_id,
                "bytes": size,
                "groups": groups,
                "records": records,
                "left_out": left_out,
                "damage": [d.as_dict() for d in damage],
                "records_shown" if entries else "groups_shown": [r.as_dict() for r in rows],
            }
        )
    else:
        _print_journal(path, file_id, size, groups, records, rows, damage, left_out)
    if damage:
        first = damage[0]
        raise CommandError(
            f"{path}: {len(damage)} damaged spot(s), the first at offset {first.offset}: "
            f"{first.reason}" + (" (at the tail)" if first.at_tail else "")
        )


def _print_journal(
    path: str,
    file_id: int,
    size: int,
    groups: int,
    records: int,
    rows: list[JournalGroup | JournalRecordView],
    damage: list[JournalDamage],
    left_out: int,
) -> None:
    console = _console()
    table = Table(title=f"journal file {file_id} ({size:,} bytes)")
    group_rows = [r for r in rows if isinstance(r, JournalGroup)]
    if group_rows or not rows:
        for column in ("seq", "offset", "bytes", "records", "kinds"):
            table.add_column(column, justify="left" if column == "kinds" else "right")
        for group in group_rows:
            kinds = Counter(r.kind for r in group.records)
            table.add_row(
                str(group.seq),
                f"{group.offset:,}",
                f"{group.size_bytes:,}",
                _records(group),
                ", ".join(f"{k} x{n}" for k, n in sorted(kinds.items())),
            )
    else:
        for column in ("group", "offset", "kind", "ledger", "entry", "length"):
            table.add_column(column, justify="left" if column == "kind" else "right")
        for record in rows:
            assert isinstance(record, JournalRecordView)
            entry = "" if record.entry_id < 0 else str(record.entry_id)
            table.add_row(
                str(record.group_seq),
                f"{record.offset:,}",
                record.kind,
                str(record.ledger_id),
                entry,
                f"{record.length:,}",
            )
    caption = f"{path}: {groups:,} groups, {records:,} records"
    if left_out:
        caption += f"; {left_out:,} rows not shown (--limit)"
    table.caption = caption
    console.print(table)
    if damage:
        console.print(_damage_table(damage))


def _records(group: JournalGroup) -> str:
    good = len(group.records)
    return str(good) if good == group.count else f"{good} good of {group.count}"


def _damage_table(damage: list[JournalDamage]) -> Table:
    table = Table(title="damage")
    for column in ("offset", "group at", "reason", "after it", "ledgers"):
        table.add_column(column, justify="right" if column in ("offset", "group at") else "left")
    for spot in damage:
        after = "nothing valid (tail)" if spot.at_tail else f"next group at {spot.next_group:,}"
        ledgers = "unknown" if spot.ledgers is None else ", ".join(map(str, spot.ledgers))
        group = "-" if spot.group_offset < 0 else f"{spot.group_offset:,}"
        table.add_row(f"{spot.offset:,}", group, spot.reason, after, ledgers)
    return table


# -- localconsistencycheck -----------------------------------------------------------------
@click.command()
@_DATA_DIR
@click.option(
    "--problems-max",
    default=CONSISTENCY_PROBLEMS_MAX,
    show_default=True,
    type=click.IntRange(0),
    help="Describe at most this many problems; the rest are counted.",
)
@_JSON
def localconsistencycheck(data_dir: str, problems_max: int, as_json: bool) -> None:
    """Check the index (as of the checkpoint) against the entry logs: every location must
    lead to a whole record with a good CRC that names its ledger and entry. Fails when any
    does not."""
    report = _read(lambda: check_consistency(OsFileSystem(), data_dir, problems_max))
    if as_json:
        _print_json({"data_dir": data_dir, **report.as_dict()})
    else:
        _print_consistency(data_dir, report)
    if not report.consistent:
        first = report.problems[0] if report.problems else None
        where = ""
        if first is not None:
            where = (
                f"; the first: ledger {first.ledger_id} entry {first.entry_id} in {first.log_path} "
                f"at offset {first.offset}: {first.problem}"
            )
        raise CommandError(
            f"the index and the entry logs of {data_dir} disagree: "
            f"{report.problems_total} problem(s){where}"
        )


def _print_consistency(data_dir: str, report: ConsistencyReport) -> None:
    console = _console()
    if report.checkpoint is None:
        click.echo(f"no checkpoint in {data_dir}: nothing is indexed yet")
        return
    verdict = "consistent" if report.consistent else f"{report.problems_total:,} problem(s)"
    summary = Table(title=f"index against entry logs in {data_dir}: {verdict}", show_header=False)
    summary.add_column("field")
    summary.add_column("value", justify="right")
    summary.add_row("index generation", str(report.checkpoint.index_generation))
    summary.add_row("ledgers", f"{report.ledgers:,}")
    summary.add_row("entries checked", f"{report.entries:,}")
    summary.add_row("entry logs pointed into", f"{report.entry_logs:,}")
    if report.rechecked:
        summary.add_row("checked again at a newer checkpoint", f"{report.rechecked:,}")
    summary.add_row("problems", f"{report.problems_total:,}")
    console.print(summary)
    if not report.problems:
        return
    table = Table(title="problems")
    for column in ("ledger", "entry", "entry log", "offset", "problem", "detail"):
        table.add_column(
            column, justify="right" if column in ("ledger", "entry", "offset") else "left"
        )
    for problem in report.problems:
        table.add_row(
            str(problem.ledger_id),
            str(problem.entry_id),
            os.path.basename(problem.log_path),
            f"{problem.offset:,}",
            problem.problem,
            problem.detail,
        )
    if report.problems_left_out:
        table.caption = f"{report.problems_left_out:,} more not shown (--problems-max)"
    console.print(table)


commands: tuple[click.Command, ...] = (
    listfilesondisc,
    lastmark,
    readjournal,
    localconsistencycheck,
)
