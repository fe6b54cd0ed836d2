"""``bkeeper shell readjournal / readlog``: the records of one journal file or entry log of
a bookie, read from its data directory (see :mod:`bkeeper.cli.shell_disk`)."""

from __future__ import annotations

from collections import Counter

import click
from rich.table import Table

from bkeeper.cli._disk import JSON_OPTION, LIMIT_OPTION, failures, print_json, read, show
from bkeeper.cli._errors import CommandError
from bkeeper.cli._tables import titled_table
from bkeeper.storage import OsFileSystem
from bkeeper.storage.inspect_entry_log import (
    EntryLogDamage,
    EntryLogFile,
    EntryLogRecord,
    entry_log_file,
    entry_log_path,
    map_differences,
    read_entry_log,
)
from bkeeper.storage.inspect_journal import (
    JournalDamage,
    JournalGroup,
    JournalRecordView,
    journal_path,
    read_journal,
)

__all__ = ["readjournal", "readlog"]


# -- readjournal ---------------------------------------------------------------------------
@click.command()
@click.option(
    "--data-dir",
    default=None,
    help="The bookie's data directory (where to look when FILE is a journal file id).",
)
@click.option(
    "--ledger-dir",
    "ledger_dirs",
    multiple=True,
    type=click.Path(file_okay=False),
    help="The bookie's ledger dirs, as given to 'bkeeper bookie --ledger-dir' (repeatable): "
    "the first holds the checkpoint, which names the journal dirs.",
)
@click.option(
    "--journal-dir",
    "journal_dirs",
    multiple=True,
    type=click.Path(file_okay=False),
    help="Look for the journal file id FILE in this journal dir (repeatable) instead of "
    "those the checkpoint names: each journal numbers its own files.",
)
@click.argument("file")
@click.option("--entries", is_flag=True, help="One row per record instead of per group.")
@LIMIT_OPTION
@JSON_OPTION
def readjournal(
    data_dir: str | None,
    ledger_dirs: tuple[str, ...],
    journal_dirs: tuple[str, ...],
    file: str,
    entries: bool,
    limit: int,
    as_json: bool,
) -> None:
    """The groups (sequence number, offset, records) of one journal file, given by FILE as
    its path or its id (in whichever journal dir holds it; an id in several, as every
    journal of a bookie starts a run at the same id, needs --journal-dir); with --entries
    its records (kind, ledger, entry, length). Damage is reported where it is, and the
    command then fails."""
    fs = OsFileSystem()
    path, file_id = read(
        lambda: journal_path(fs, data_dir, file, ledger_dirs=ledger_dirs, journal_dirs=journal_dirs)
    )
    size = read(lambda: fs.size(path))
    groups = records = 0
    rows: list[JournalGroup | JournalRecordView] = []
    damage: list[JournalDamage] = []
    with failures():
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
        print_json(
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
    table = titled_table(f"journal file {file_id} ({size:,} bytes)")
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
    show(table, note=caption)
    if damage:
        show(_damage_table(damage))


def _records(group: JournalGroup) -> str:
    good = len(group.records)
    return str(good) if good == group.count else f"{good} good of {group.count}"


def _damage_table(damage: list[JournalDamage]) -> Table:
    table = titled_table("damage")
    for column in ("offset", "group at", "reason", "after it", "ledgers"):
        table.add_column(column, justify="right" if column in ("offset", "group at") else "left")
    for spot in damage:
        after = "nothing valid (tail)" if spot.at_tail else f"next group at {spot.next_group:,}"
        ledgers = "unknown" if spot.ledgers is None else ", ".join(map(str, spot.ledgers))
        group = "-" if spot.group_offset < 0 else f"{spot.group_offset:,}"
        table.add_row(f"{spot.offset:,}", group, spot.reason, after, ledgers)
    return table


# -- readlog -------------------------------------------------------------------------------
#: ``--body`` shows this many body bytes in a table (JSON has them all).
_BODY_BYTES_SHOWN = 48
_ENTRY_HEADER_BYTES = 32


@click.command()
@click.option(
    "--data-dir",
    default=None,
    help="The bookie's data directory (where to look when LOG is an entry log id).",
)
@click.option(
    "--ledger-dir",
    "ledger_dirs",
    multiple=True,
    type=click.Path(file_okay=False),
    help="Look for the entry log id LOG in this ledger dir (repeatable) instead of those "
    "the checkpoint names, as given to 'bkeeper bookie --ledger-dir'.",
)
@click.argument("log_file", metavar="LOG")
@click.option("--ledger", "ledger_id", type=int, default=None, help="Only this ledger's records.")
@click.option("--entry", "entry_id", type=int, default=None, help="Only this entry's records.")
@LIMIT_OPTION
@click.option(
    "--body", "with_body", is_flag=True, help="Show each entry's bytes after its 32-byte header."
)
@JSON_OPTION
def readlog(
    data_dir: str | None,
    ledger_dirs: tuple[str, ...],
    log_file: str,
    ledger_id: int | None,
    entry_id: int | None,
    limit: int,
    with_body: bool,
    as_json: bool,
) -> None:
    """The records of one entry log (offset, ledger, entry, length; each shown has passed its
    CRC check) and its ledgers map, LOG given as its path or its id (in whichever ledger dir
    holds it). Damage, and a map that disagrees with the records, are reported and the
    command then fails."""
    fs = OsFileSystem()
    path, log_id = read(lambda: entry_log_path(fs, data_dir, log_file, ledger_dirs=ledger_dirs))
    log = read(lambda: entry_log_file(fs, path, log_id))
    scanned: Counter[int] = Counter()
    rows: list[EntryLogRecord] = []
    damage: EntryLogDamage | None = None
    records = matching = 0
    with failures():
        for item in read_entry_log(fs, log, bodies=with_body):
            if isinstance(item, EntryLogDamage):
                damage = item
                continue
            records += 1
            scanned[item.ledger_id] += 8 + item.length
            if ledger_id is not None and item.ledger_id != ledger_id:
                continue
            if entry_id is not None and item.entry_id != entry_id:
                continue
            matching += 1
            if limit == 0 or len(rows) < limit:
                rows.append(item)
    differences = map_differences(log, scanned) if damage is None else []
    if as_json:
        print_json(_log_json(log, scanned, records, matching, rows, damage, differences, with_body))
    else:
        _print_log(log, scanned, records, matching, rows, damage, differences, with_body)
    problems = []
    if not log.header_ok:
        problems.append("bad entry log header")
    if damage is not None:
        problems.append(f"damaged record at offset {damage.offset}: {damage.reason}")
    if differences:
        problems.append(
            f"its ledgers map disagrees with its records for {len(differences)} ledger(s)"
        )
    if problems:
        raise CommandError(f"{path}: " + "; ".join(problems))


def _body_hex(record: EntryLogRecord, limit: int | None) -> str:
    body = (record.body or b"")[_ENTRY_HEADER_BYTES:]
    shown = body if limit is None else body[:limit]
    return shown.hex() + ("..." if len(shown) < len(body) else "")


def _log_json(
    log: EntryLogFile,
    scanned: Counter[int],
    records: int,
    matching: int,
    rows: list[EntryLogRecord],
    damage: EntryLogDamage | None,
    differences: list[tuple[int, int | None, int]],
    with_body: bool,
) -> dict[str, object]:
    meta = log.ledgers_map
    shown = []
    for record in rows:
        row: dict[str, object] = {
            "offset": record.offset,
            "ledger": record.ledger_id,
            "entry": record.entry_id,
            "length": record.length,
            "checksum_ok": True,
        }
        if with_body:
            row["body_hex"] = _body_hex(record, None)
        shown.append(row)
    return {
        "path": log.path,
        "log_id": log.log_id,
        "bytes": log.size_bytes,
        "header_ok": log.header_ok,
        "ledgers_map": None
        if meta is None
        else {
            "offset": log.records_end,
            "sources": list(meta.sources),
            "ledgers": {str(k): v for k, v in sorted(meta.ledgers.items())},
        },
        "record_bytes_by_ledger": {str(k): v for k, v in sorted(scanned.items())},
        "records": records,
        "matching": matching,
        "left_out": matching - len(rows),
        "records_shown": shown,
        "damage": None if damage is None else damage.as_dict(),
        "map_differences": [
            {"ledger": lid, "map_bytes": in_map, "record_bytes": found}
            for lid, in_map, found in differences
        ],
    }


def _print_log(
    log: EntryLogFile,
    scanned: Counter[int],
    records: int,
    matching: int,
    rows: list[EntryLogRecord],
    damage: EntryLogDamage | None,
    differences: list[tuple[int, int | None, int]],
    with_body: bool,
) -> None:
    table = titled_table(f"entry log {log.log_id} ({log.size_bytes:,} bytes)")
    columns = ["offset", "ledger", "entry", "length", "checksum ok"]
    if with_body:
        columns.append("body after the entry header (hex)")
    for column in columns:
        table.add_column(column, justify="right" if column in columns[:4] else "left")
    for record in rows:
        cells = [f"{record.offset:,}", str(record.ledger_id), str(record.entry_id)]
        cells += [f"{record.length:,}", "yes"]
        if with_body:
            cells.append(_body_hex(record, _BODY_BYTES_SHOWN))
        table.add_row(*cells)
    if damage is not None:
        cells = [f"{damage.offset:,}", "?", "?", "?", f"no: {damage.reason}"]
        table.add_row(*cells, *([""] if with_body else []))
    caption = f"{log.path}: {records:,} records"
    if matching != records:
        caption += f", {matching:,} matching"
    if matching > len(rows):
        caption += f"; {matching - len(rows):,} not shown (--limit)"
    if damage is not None:
        caption += f"; {damage.unread_bytes:,} bytes after the damage not read"
    if not log.header_ok:
        caption += "; bad entry log header"
    show(table, note=caption)
    map_table, map_note = _map_table(log, scanned, differences)
    show(map_table, note=map_note)


def _map_table(
    log: EntryLogFile, scanned: Counter[int], differences: list[tuple[int, int | None, int]]
) -> tuple[Table, str]:
    meta = log.ledgers_map
    if meta is None:
        caption = "none in the log (being written, or its process died): from its records"
        ledgers = dict(scanned)
    else:
        caption = f"at offset {log.records_end:,}"
        if meta.sources:
            caption += f", compacted from logs {', '.join(map(str, meta.sources))}"
        ledgers = dict(meta.ledgers)
    table = titled_table("ledgers map")
    table.add_column("ledger", justify="right")
    table.add_column("bytes", justify="right")
    differ = {lid: found for lid, _, found in differences}
    if differ:
        table.add_column("bytes of its records", justify="right")
    for lid in sorted(set(ledgers) | set(differ)):
        cells = [str(lid), f"{ledgers.get(lid, 0):,}"]
        if differ:
            cells.append(f"{differ[lid]:,}" if lid in differ else "same")
        table.add_row(*cells)
    return table, f"{caption}; {len(ledgers):,} ledgers, {sum(ledgers.values()):,} bytes"
