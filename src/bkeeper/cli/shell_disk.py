"""``bkeeper shell listfilesondisc / lastmark / readjournal / readlog /
localconsistencycheck``: a bookie's files, read directly from its data directory.

In the manner of Apache BookKeeper's ``bookkeeper shell`` commands of the same names. They
only read, so they work on a stopped bookie and on a running one (see
:mod:`bkeeper.storage.inspect` for what a running bookie may change under them). Tables by
default, ``--json`` for scripts; a missing or foreign directory, or damage found in a file,
is one line on stderr and exit status 1 (after the report, when there is one).

A bookie's dirs (several ledger dirs and journal dirs) are learnt from its checkpoint, or
given with ``--ledger-dir`` / ``--journal-dir`` as to ``bkeeper bookie``
(:mod:`bkeeper.storage.inspect_dirs`); dirs given that differ from the checkpoint's are used,
and a line on stderr says so.
"""

from __future__ import annotations

import os
from collections import Counter

import click
from rich.table import Table

from bkeeper.cli._disk import (
    DATA_DIR_OPTION,
    JOURNAL_DIR_OPTION,
    JSON_OPTION,
    LEDGER_DIR_OPTION,
    learn_dirs,
    print_json,
    read,
    show,
)
from bkeeper.cli._errors import CommandError
from bkeeper.cli._tables import titled_table
from bkeeper.cli.shell_disk_logs import readjournal, readlog
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

__all__ = ["commands"]


# -- listfilesondisc -----------------------------------------------------------------------
@click.command()
@DATA_DIR_OPTION
@LEDGER_DIR_OPTION
@JOURNAL_DIR_OPTION
@click.option("--journal", is_flag=True, help="Journal files.")
@click.option("--entrylog", is_flag=True, help="Entry logs (and compaction's files).")
@click.option("--index", is_flag=True, help="Index generations and the checkpoint.")
@JSON_OPTION
def listfilesondisc(
    data_dir: str,
    ledger_dirs: tuple[str, ...],
    journal_dirs: tuple[str, ...],
    journal: bool,
    entrylog: bool,
    index: bool,
    as_json: bool,
) -> None:
    """The bookie's journal files, entry logs, index generations and checkpoint, with their
    dirs and sizes (all of them unless some kinds are asked for)."""
    every = not (journal or entrylog or index)
    fs = OsFileSystem()
    dirs = learn_dirs(fs, data_dir, ledger_dirs, journal_dirs)
    files = read(
        lambda: list_files(
            fs,
            dirs,
            journal=every or journal,
            entrylog=every or entrylog,
            index=every or index,
        )
    )
    if as_json:
        print_json(
            {
                "data_dir": data_dir,
                "ledger_dirs": list(dirs.ledger_dirs),
                "journal_dirs": list(dirs.journal_dirs),
                "files": [f.as_dict() for f in files],
            }
        )
        return
    table = titled_table(f"files of the bookie in {data_dir}")
    for column in ("kind", "dir", "number", "name", "bytes", "note"):
        table.add_column(column, justify="right" if column in ("number", "bytes") else "left")
    for file in files:
        number = "" if file.number < 0 else str(file.number)
        name = os.path.basename(file.path)
        size = f"{file.size_bytes:,}"
        table.add_row(file.kind, file.directory, number, name, size, _note(file))
    totals: Counter[str] = Counter()
    sizes: Counter[str] = Counter()
    for file in files:
        totals[file.kind] += 1
        sizes[file.kind] += file.size_bytes
    show(
        table,
        note="; ".join(f"{totals[k]} {k} ({sizes[k]:,} bytes)" for k in sorted(totals))
        or "no files",
    )


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
@DATA_DIR_OPTION
@LEDGER_DIR_OPTION
@JOURNAL_DIR_OPTION
@JSON_OPTION
def lastmark(
    data_dir: str, ledger_dirs: tuple[str, ...], journal_dirs: tuple[str, ...], as_json: bool
) -> None:
    """The checkpoint: where replay of each journal starts (its dir, file id, offset), the
    index generation and its committed length, the ledger dirs, and whether the whole
    storage is in limbo."""
    fs = OsFileSystem()
    dirs = learn_dirs(fs, data_dir, ledger_dirs, journal_dirs)
    mark = read(lambda: last_mark(fs, dirs))
    if as_json:
        print_json({"data_dir": data_dir, "checkpoint": None if mark is None else mark.as_dict()})
        return
    if mark is None:
        click.echo(f"no checkpoint in {dirs.layout.ledgers}: the bookie never finished opening")
        return
    show(_mark_table(mark, f"checkpoint of the bookie in {data_dir}"))


def _mark_table(mark: Mark, title: str) -> Table:
    table = titled_table(title, show_header=False)
    table.add_column("field")
    table.add_column("value")
    table.add_row("checkpoint file", mark.path)
    for journal in mark.journals:
        table.add_row(
            f"journal mark ({journal.key})",
            f"file {journal.file_id} ({os.path.basename(journal.path)}) offset {journal.offset:,}",
        )
    table.add_row(
        "index",
        f"generation {mark.index_generation} ({os.path.basename(mark.index_path)}), "
        f"first {mark.index_bytes:,} bytes",
    )
    table.add_row("ledger dirs", ", ".join(mark.ledger_dirs))
    table.add_row("limbo (whole storage)", "yes" if mark.limbo else "no")
    stop = "clean (nothing to replay)" if mark.clean_stop else "not clean, or still running"
    table.add_row("last stop", stop)
    return table


# -- localconsistencycheck -----------------------------------------------------------------
@click.command()
@DATA_DIR_OPTION
@LEDGER_DIR_OPTION
@JOURNAL_DIR_OPTION
@click.option(
    "--problems-max",
    default=CONSISTENCY_PROBLEMS_MAX,
    show_default=True,
    type=click.IntRange(0),
    help="Describe at most this many problems; the rest are counted.",
)
@JSON_OPTION
def localconsistencycheck(
    data_dir: str,
    ledger_dirs: tuple[str, ...],
    journal_dirs: tuple[str, ...],
    problems_max: int,
    as_json: bool,
) -> None:
    """Check the index (as of the checkpoint) against the entry logs of every ledger dir:
    every location must lead to a whole record with a good CRC that names its ledger and
    entry. Fails when any does not."""
    fs = OsFileSystem()
    dirs = learn_dirs(fs, data_dir, ledger_dirs, journal_dirs)
    report = read(lambda: check_consistency(fs, dirs, problems_max))
    if as_json:
        print_json({"data_dir": data_dir, **report.as_dict()})
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
    if report.checkpoint is None:
        click.echo(f"no checkpoint in {data_dir}: nothing is indexed yet")
        return
    summary = titled_table("the index against the entry logs", show_header=False)
    summary.add_column("field")
    summary.add_column("value", justify="right")
    summary.add_row("index generation", str(report.checkpoint.index_generation))
    summary.add_row("ledger dirs", ", ".join(report.ledger_dirs))
    summary.add_row("ledgers", f"{report.ledgers:,}")
    summary.add_row("entries checked", f"{report.entries:,}")
    summary.add_row("entry logs pointed into", f"{report.entry_logs:,}")
    if report.rechecked:
        summary.add_row("checked again at a newer checkpoint", f"{report.rechecked:,}")
    summary.add_row("problems", f"{report.problems_total:,}")
    if report.consistent:
        show(summary, note=f"consistent: every location leads to its entry ({data_dir})")
        return
    table = titled_table("problems")
    for column in ("ledger", "entry", "entry log", "offset", "problem", "detail"):
        table.add_column(
            column, justify="right" if column in ("ledger", "entry", "offset") else "left"
        )
    for problem in report.problems:
        table.add_row(
            str(problem.ledger_id),
            str(problem.entry_id),
            problem.log_path,
            f"{problem.offset:,}",
            problem.problem,
            problem.detail,
        )
    left_out = report.problems_left_out
    note = f"{report.problems_total:,} problem(s) in {data_dir}"
    if left_out:
        note += f"; {left_out:,} more not shown (--problems-max)"
    show(summary, table, note=note)


commands: tuple[click.Command, ...] = (
    listfilesondisc,
    lastmark,
    readjournal,
    readlog,
    localconsistencycheck,
)
