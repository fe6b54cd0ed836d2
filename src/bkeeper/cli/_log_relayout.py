"""``bkeeper log config NAME ... --existing``: the log's sealed ledgers take its replication
(ensemble size, write and ack quorums) too, online (:mod:`bkeeper.autorecovery.relayout`).

Each sealed ledger of the log whose replication differs is re-laid out (its entries copied
to the bookies the new layout adds, then its metadata changed). The ledger still open is its
writer's: a writer rolls to a new ledger with the new replication within a tick of its timer
(``roll_age / 2``, at most 60 s) once it sees the change, and the command waits for that
ledger to be sealed, at most ``--wait`` seconds, looking every :data:`LOOK_INTERVAL_S`. A
ledger left open then (no writer, or a writer that did not roll) is named in one error line:
run it again after the writer rolled or closed.
"""

from __future__ import annotations

import asyncio
import time

import click

from bkeeper.autorecovery.config import AutoRecoveryConfig
from bkeeper.autorecovery.relayout import RelayoutResult, relayout_ledger
from bkeeper.cli._errors import CommandError
from bkeeper.cli._tables import console, titled_table
from bkeeper.cli.shell_ops import progress as progress_bar
from bkeeper.meta.ledger_metadata import LedgerState
from bkeeper.namedlog import NamedLogs

__all__ = ["LOOK_INTERVAL_S", "relayout_log"]

#: How often the command looks whether the log's open ledger was sealed.
LOOK_INTERVAL_S = 1.0


async def relayout_log(logs: NamedLogs, name: str, wait_s: float) -> None:
    """Re-lay out every ledger of log ``name`` to its stored replication; print a table."""
    settings = await logs.log(name).settings()
    if settings.ensemble_size is None or settings.write_quorum is None:
        raise CommandError(
            f"log {name!r} stores no replication (-e/--write-quorum/--ack-quorum): nothing to "
            "give its ledgers"
        )
    target = (settings.ensemble_size, settings.write_quorum, settings.ack_quorum or 1)
    bk = logs.bk
    done: dict[int, RelayoutResult] = {}
    deadline = time.monotonic() + wait_s
    with progress_bar(f"log {name}: ledgers to {'/'.join(map(str, target))}") as progress:
        while True:
            meta, _version = await logs.store.read(name)
            ids = [ledger.ledger_id for ledger in meta.ledgers]
            still_open: list[int] = []
            for ledger_id in ids:
                if ledger_id in done:
                    continue
                ledger = await bk.ledger_metadata(ledger_id)
                if ledger.state is not LedgerState.CLOSED:
                    current = (ledger.ensemble_size, ledger.write_quorum, ledger.ack_quorum)
                    if current != target:
                        still_open.append(ledger_id)
                    continue
                done[ledger_id] = await relayout_ledger(
                    bk, ledger_id, *target, AutoRecoveryConfig()
                )
                progress(len(done), len(done) + len(still_open))
            if not still_open or time.monotonic() >= deadline:
                break
            await asyncio.sleep(LOOK_INTERVAL_S)
    table = titled_table(f"log {name}: ledgers' replication (ensemble/write/ack)")
    for column in ("ledger", "before", "after", "entries copied", "ensembles"):
        table.add_column(column, justify="right" if column == "entries copied" else "left")
    for ledger_id, result in sorted(done.items()):
        table.add_row(
            str(ledger_id),
            "/".join(map(str, result.replication_before)),
            "/".join(map(str, result.replication_after)),
            f"{result.entries:,}",
            "; ".join(", ".join(e) for e in result.ensembles.values()),
        )
    console().print(table)
    if still_open:
        raise CommandError(
            f"log {name!r}: ledger{'s' if len(still_open) > 1 else ''} "
            f"{', '.join(map(str, still_open))} still open with the old replication after "
            f"{wait_s:g} s (a writer rolls to the new one within a tick of its timer); run "
            "this again once it rolled or closed"
        )
    click.echo(f"log {name}: every ledger has replication {'/'.join(map(str, target))}", err=True)
