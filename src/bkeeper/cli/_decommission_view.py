"""What ``bkeeper shell decommissionbookie`` shows while it waits, and at its end.

While it runs, on standard error, refreshed at each poll of the decommission:

- on a terminal: the progress bar and, under it, a short summary: the ledgers per state
  (``2 of 5 moved, 1 being re-replicated, 1 blocked``), then the ledgers that block it with
  their reasons and what to do, then those being re-replicated and by whom, at most
  :data:`SUMMARY_LEDGERS_MAX` lines (``... and N more``);
- into a pipe or a file: one line per ledger whose state changed (``ledger 12: blocked: no
  candidate bookie ... [2 of 5 moved]``), besides the plain progress line every
  ``BKEEPER_PROGRESS_INTERVAL_S``;
- with ``--json``: one JSON object per change instead (the ledger's row, with ``moved`` and
  ``total``), and nothing else.

At the end, on standard output: a table of every ledger that needed the bookie, moved or
where it stands (:func:`final_table`).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager

import click
from rich.console import Console, Group
from rich.live import Live
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from bkeeper.autorecovery.decommission_status import (
    DecommissionStatus,
    LedgerRow,
    LedgerState,
    changed_rows,
    counts_text,
    describe,
)
from bkeeper.cli._progress import LIVE_REFRESH_S, elapsed, status_line
from bkeeper.cli._tables import titled_table

__all__ = [
    "SUMMARY_LEDGERS_MAX",
    "DecommissionView",
    "change_json",
    "change_line",
    "final_table",
    "row_json",
    "summary_lines",
]

#: Ledger lines the live summary on a terminal shows at most.
SUMMARY_LEDGERS_MAX = 10


def _clock_time(ms: int | None) -> str:
    return "-" if ms is None else time.strftime("%H:%M:%S UTC", time.gmtime(ms / 1000))


def _date_time(ms: int | None) -> str:
    return "-" if ms is None else time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000))


def _since(row: LedgerRow) -> str:
    return "" if row.since_ms is None else f", since {_clock_time(row.since_ms)}"


def summary_lines(status: DecommissionStatus, limit: int = SUMMARY_LEDGERS_MAX) -> list[str]:
    """The live summary (module doc): counts, then at most ``limit`` ledger lines."""
    lines = [counts_text(status)]
    if status.auditor is None:
        lines.append("no auditor is elected: nothing marks the ledgers")
    if not status.enabled:
        lines.append("auto-recovery is disabled: no worker takes a ledger")
    replicating = [r for r in status.rows.values() if r.state is LedgerState.REPLICATING]
    shown = [*status.stuck(), *sorted(replicating, key=lambda r: r.ledger_id)]
    for row in shown[:limit]:
        lines.append(f"  ledger {row.ledger_id}: {describe(row)}{_since(row)}")
    if len(shown) > limit:
        lines.append(
            f"  ... and {len(shown) - limit} more "
            f"(bkeeper shell listunderreplicated --missing {status.bookie_id})"
        )
    return lines


def change_line(row: LedgerRow, status: DecommissionStatus) -> str:
    """One plain line for a ledger whose state changed."""
    since = "" if row.state is LedgerState.MOVED else _since(row)
    return (
        f"ledger {row.ledger_id}: {describe(row)}{since} [{status.moved} of {status.total} moved]"
    )


def row_json(row: LedgerRow) -> dict[str, object]:
    """A row as JSON (its state a string)."""
    return dataclasses.asdict(row)


def change_json(row: LedgerRow, status: DecommissionStatus) -> str:
    """One JSON line for a ledger whose state changed."""
    body = {**row_json(row), "moved": status.moved, "total": status.total}
    return json.dumps(body, sort_keys=True)


def final_table(bookie_id: str, rows: Mapping[int, LedgerRow] | tuple[LedgerRow, ...]) -> Table:
    """Every ledger that needed the bookie: moved, or where it stands and why."""
    listed = rows.values() if isinstance(rows, Mapping) else rows
    table = titled_table(f"ledgers of {bookie_id}")
    for column in ("ledger", "state", "since", "worker", "why, and what to do"):
        table.add_column(column, justify="right" if column == "ledger" else "left")
    for row in sorted(listed, key=lambda r: r.ledger_id):
        why = "" if row.state is LedgerState.MOVED else describe(row).removeprefix("blocked: ")
        table.add_row(
            str(row.ledger_id),
            row.state.value.replace("_", " "),
            _date_time(row.since_ms),
            row.worker or "-",
            why,
        )
    return table


class DecommissionView:
    """The live part (module doc): ``with view.showing(): ...`` around the decommission,
    which calls :meth:`progress` and :meth:`update`; :attr:`last` is the last status."""

    def __init__(
        self, bookie_id: str, *, as_json: bool = False, console: Console | None = None
    ) -> None:
        self._bookie_id = bookie_id
        self._as_json = as_json
        self._console = console or Console(stderr=True)
        self._description = f"ledgers moved off {bookie_id}"
        self._done: tuple[int, int | None] = (0, None)
        self._started = 0.0
        self._bar: Progress | None = None
        self._task: TaskID | None = None
        self._live: Live | None = None
        self._lines: Console | None = None
        self.last: DecommissionStatus | None = None

    @contextmanager
    def showing(self) -> Iterator[DecommissionView]:
        with ExitStack() as stack:
            self._started = time.monotonic()
            if self._as_json:
                pass  # JSON lines only: a reader parses every line
            elif self._console.is_terminal:
                self._bar = Progress(
                    TextColumn("{task.description}"),
                    BarColumn(),
                    MofNCompleteColumn(),
                    TimeElapsedColumn(),
                    console=self._console,
                )
                self._task = self._bar.add_task(self._description, total=None)
                self._live = Live(
                    self._bar,
                    console=self._console,
                    transient=True,
                    refresh_per_second=1 / LIVE_REFRESH_S,
                )
                stack.enter_context(self._live)
            else:
                self._lines = stack.enter_context(status_line(self._plain, self._console))
            yield self

    def _plain(self) -> str:
        done, total = self._done
        count = f"{done}" if total is None else f"{done} of {total}"
        return f"{self._description}: {count}, {elapsed(time.monotonic() - self._started)}"

    def progress(self, done: int, total: int) -> None:
        self._done = (done, total)
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, completed=done, total=total)

    def update(self, status: DecommissionStatus) -> None:
        before = self.last.rows if self.last is not None else {}
        self.last = status
        if self._live is not None and self._bar is not None:
            summary = Text("\n".join(summary_lines(status)), overflow="fold")
            self._live.update(Group(self._bar, summary))
            return
        for row in changed_rows(before, status.rows):
            if self._as_json:
                click.echo(change_json(row, status), err=True)
            elif self._lines is not None:
                line = change_line(row, status)
                self._lines.print(line, markup=False, highlight=False, soft_wrap=True)
