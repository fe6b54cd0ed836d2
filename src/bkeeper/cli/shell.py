"""``bkeeper shell ...``: admin commands in the manner of BookKeeper's ``bookkeeper shell``.

The commands of the ``shell_*`` modules are rows of :data:`COMMANDS`, imported only when
one runs (:mod:`bkeeper.cli._lazy`), so ``bkeeper shell --help`` loads neither the client nor
rich; ``simpletest``, ``ledgermetadata`` and ``deleteledger`` live here.
"""

from __future__ import annotations

import json
import time
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

import click

from bkeeper.cli._lazy import LazyCommand, LazyGroup
from bkeeper.cli._options import confirm_deletion, metadata_option
from bkeeper.common.errors import BKeeperError

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

    from bkeeper.client.bookkeeper import BookKeeper

__all__ = ["COMMANDS", "shell"]

_METADATA = metadata_option


def _row(name: str, target: str, short_help: str) -> LazyCommand:
    return LazyCommand(name, f"bkeeper.cli.{target}", short_help)


#: A bookie's files, read from its data directory; its garbage collection, over its admin
#: API; auto-recovery (recover, decommissionbookie, listunderreplicated, whoisauditor, ...);
#: the cluster (listbookies, clusterinfo, initnewcluster, ...); ledgers (listledgers,
#: readledger, ledger); cookies and bookieformat. Each row: name, module:attribute, the
#: listing's short help (its command's first help sentence; tests/cli/test_startup.py).
COMMANDS = (
    _row(
        "listfilesondisc",
        "shell_disk:listfilesondisc",
        "The bookie's journal files, entry logs, index generations and checkpoint, with their "
        "dirs and sizes (all of them unless some kinds are asked for).",
    ),
    _row(
        "lastmark",
        "shell_disk:lastmark",
        "The checkpoint: where replay of each journal starts (its dir, file id, offset), the "
        "index generation and its committed length, the ledger dirs, and whether the whole "
        "storage is in limbo.",
    ),
    _row(
        "readjournal",
        "shell_disk_logs:readjournal",
        "The groups (sequence number, offset, records) of one journal file, given by FILE as "
        "its path or its id (in whichever journal dir holds it; an id in several, as every "
        "journal of a bookie starts a run at the same id, needs --journal-dir); with "
        "--entries its records (kind, ledger, entry, length).",
    ),
    _row(
        "readlog",
        "shell_disk_logs:readlog",
        "The records of one entry log (offset, ledger, entry, length; each shown has passed "
        "its CRC check) and its ledgers map, LOG given as its path or its id (in whichever "
        "ledger dir holds it).",
    ),
    _row(
        "localconsistencycheck",
        "shell_disk:localconsistencycheck",
        "Check the index (as of the checkpoint) against the entry logs of every ledger dir: "
        "every location must lead to a whole record with a good CRC that names its ledger "
        "and entry.",
    ),
    _row(
        "gc",
        "shell_admin:gc",
        "Run a garbage collection pass on a bookie now, wait for it and print its report.",
    ),
    _row(
        "gcstatus",
        "shell_admin:gcstatus",
        "A bookie's garbage collector: running, suspended, totals, the last pass.",
    ),
    _row(
        "suspendcompaction",
        "shell_admin:suspendcompaction",
        "Suspend a bookie's compaction (neither flag: both kinds); GC of deleted ledgers and "
        "empty entry logs goes on.",
    ),
    _row(
        "resumecompaction",
        "shell_admin:resumecompaction",
        "Resume a bookie's suspended compaction (neither flag: both kinds).",
    ),
    _row(
        "recover",
        "shell_recovery:recover",
        "Re-replicate now every ledger's entries on the BOOKIEs (lost or leaving) to others.",
    ),
    _row(
        "decommissionbookie",
        "shell_recovery:decommissionbookie",
        "Retire a stopped BOOKIE: trigger an audit, wait until no ledger needs it (the "
        "auto-recovery workers copy its entries elsewhere), then delete its cookie.",
    ),
    _row(
        "listunderreplicated",
        "shell_recovery:listunderreplicated",
        "The ledgers marked under-replicated: missing replicas, since when, which worker, and "
        "why no worker repairs it (as the last attempt found, e.g. no candidate bookie).",
    ),
    _row("whoisauditor", "shell_recovery:whoisauditor", "The id of the elected auditor."),
    _row(
        "triggeraudit",
        "shell_recovery:triggeraudit",
        "Make the auditor audit now (lost bookies are marked at once, whatever the delay).",
    ),
    _row(
        "lostbookierecoverydelay",
        "shell_recovery:lostbookierecoverydelay",
        "Show (or --set) how long the auditor waits after a bookie is lost before it marks "
        "the bookie's ledgers; setting it also triggers an audit.",
    ),
    _row(
        "autorecovery",
        "shell_recovery:autorecovery_flag",
        "Enable or disable re-replication cluster-wide (no flag: show which).",
    ),
    _row(
        "queryautorecoverystatus",
        "shell_recovery:queryautorecoverystatus",
        "Which ledgers are being re-replicated now, and by whom; flag, auditor, delay.",
    ),
    _row(
        "listbookies",
        "shell_ops:listbookies",
        "List the registered bookies: id, mode, network location, address and admin HTTP address.",
    ),
    _row(
        "racks",
        "shell_placement:racks",
        "Every bookie's network location (rack information and registrations together).",
    ),
    _row(
        "setrack",
        "shell_placement:setrack",
        "Set BOOKIE's network LOCATION (/rack or /region/rack) in the cluster's rack "
        "information; new ensembles and repairs use it at once, existing ledgers move with "
        "relocateledgers.",
    ),
    _row(
        "deleterack",
        "shell_placement:deleterack",
        "Remove BOOKIE's network location from the cluster's rack information (it is then on "
        "/default-rack, unless the bookie sets one again when it starts).",
    ),
    _row(
        "relocateledgers",
        "shell_placement:relocateledgers",
        "Move the ledgers whose write quorums span fewer racks than the placement asks onto "
        "bookies that mend them (Java's relocateledgers); try --dry-run first.",
    ),
    _row(
        "setreplication",
        "shell_placement:setreplication",
        "Change a sealed ledger's ensemble size and quorums online: its entries are copied to "
        "the bookies the new layout adds, then its metadata changes (readers are not stopped).",
    ),
    _row(
        "bookieinfo",
        "shell_ops:bookieinfo",
        "Free and total disk space of every registered bookie (GET_BOOKIE_INFO); exit status "
        "1 when a bookie does not answer.",
    ),
    _row(
        "clusterinfo",
        "shell_ops:clusterinfo",
        "The cluster at a glance: bookies writable, read-only and unavailable (a cookie but no "
        "registration), the auditor, re-replication on or off, under-replicated ledgers.",
    ),
    _row(
        "whatisinstanceid",
        "shell_ops:whatisinstanceid",
        "Print the cluster's instance id (the INSTANCEID node, in every bookie's cookie).",
    ),
    _row(
        "endpointinfo",
        "shell_ops:endpointinfo",
        "The endpoints (bookie protocol, admin HTTP) and properties a bookie registered.",
    ),
    _row(
        "initnewcluster",
        "shell_ops:initnewcluster",
        "Create the metadata of a new cluster (LAYOUT, INSTANCEID, available/, cookies/, "
        "under-replication); refused when the root holds a cluster already.",
    ),
    _row(
        "nukeexistingcluster",
        "shell_ops:nukeexistingcluster",
        "Delete all the metadata of a cluster: every ledger, cookie and the layout.",
    ),
    _row(
        "listledgers",
        "shell_ledger:listledgers",
        "A table of the ledger ids (with --meta: state, quorums, last entry, length).",
    ),
    _row(
        "readledger",
        "shell_ledger:readledger",
        "Print entries of a ledger (entry id, then the payload as text or 0x-hex).",
    ),
    _row(
        "ledger",
        "shell_ledger:ledger_command",
        "Dump LEDGER_ID as this bookie's index holds it (as of its last checkpoint): fenced, "
        "limbo, master key, explicit LAC, and each entry's entry log and offset.",
    ),
    _row(
        "cookie_get",
        "shell_cookie:cookie_get",
        "Print the cookie of BOOKIE stored in the metadata (<root>/cookies/BOOKIE).",
    ),
    _row(
        "cookie_delete",
        "shell_cookie:cookie_delete",
        "Delete the cookie of BOOKIE from the metadata (refused while BOOKIE is registered).",
    ),
    _row(
        "updatecookie",
        "shell_cookie:updatecookie",
        "The cookie of a stopped bookie: --list it (local and stored, and whether they "
        "agree), give the bookie a new id (--bookie-id: start it with that --bookie-id then), "
        "or --delete it.",
    ),
    _row(
        "bookieformat",
        "shell_cookie:bookieformat",
        "Wipe a stopped bookie's data: its journals, entry logs, index, checkpoint and cookie "
        "(refused while it is registered).",
    ),
    _row(
        "bookiesanity",
        "shell_sanity:bookiesanity",
        "Check a bookie works: write ENTRIES entries to a new ledger on it alone (ensemble of "
        "one), read them back, delete the ledger.",
    ),
)


def _console() -> Console:
    from bkeeper.cli._tables import console

    return console()


def _run(coro: Coroutine[Any, Any, None]) -> None:
    from bkeeper.common.loop import run_event_loop

    run_event_loop(coro)


@click.group(cls=LazyGroup, lazy_commands=COMMANDS)
def shell() -> None:
    """Cluster administration."""


# -- ledgers ---------------------------------------------------------------------------------
def _client(metadata_uri: str) -> BookKeeper:
    from bkeeper.client.bookkeeper import BookKeeper

    return BookKeeper(metadata_uri)


def _progress() -> Progress:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    )


@shell.command()
@_METADATA
@click.option("--ensemble", default=3, show_default=True, type=click.IntRange(1))
@click.option("--write-quorum", default=3, show_default=True, type=click.IntRange(1))
@click.option("--ack-quorum", default=2, show_default=True, type=click.IntRange(1))
@click.option("--entries", default=1000, show_default=True, type=click.IntRange(1))
@click.option("--entry-size", default=100, show_default=True, type=click.IntRange(0))
@click.option("--keep", is_flag=True, help="Keep the ledger instead of deleting it.")
def simpletest(
    metadata_uri: str,
    ensemble: int,
    write_quorum: int,
    ack_quorum: int,
    entries: int,
    entry_size: int,
    keep: bool,
) -> None:
    """Write ENTRIES entries to a new ledger, read them back and compare, then delete it."""
    import asyncio

    if not ensemble >= write_quorum >= ack_quorum:
        raise click.BadParameter(
            f"need --ensemble >= --write-quorum >= --ack-quorum, got "
            f"{ensemble}/{write_quorum}/{ack_quorum}"
        )

    def body(i: int) -> bytes:
        head = b"simpletest-%08d-" % i
        return (head + bytes([i % 251]) * max(0, entry_size - len(head)))[: max(entry_size, 0)]

    async def run() -> None:
        async with _client(metadata_uri) as bk:
            started = time.perf_counter()
            handle = await bk.create_ledger(
                ensemble, write_quorum, ack_quorum, password=b"simpletest"
            )
            with _progress() as progress:
                task = progress.add_task(f"writing ledger {handle.ledger_id}", total=entries)
                futures = []
                for i in range(entries):
                    futures.append(await handle.append_async(body(i)))
                    if i % 100 == 99:
                        progress.update(task, completed=sum(f.done() for f in futures))
                # All awaited (a failed ledger fails every pending append with one error:
                # the first is raised, none is left unretrieved).
                outcomes = await asyncio.gather(*futures, return_exceptions=True)
                for outcome in outcomes:
                    if isinstance(outcome, BaseException):
                        raise outcome
                progress.update(task, completed=entries)
            await handle.close()
            written_s = time.perf_counter() - started
            reader = await bk.open_ledger(handle.ledger_id, b"simpletest", recovery=False)
            count = 0
            async for entry in reader.read(0, entries - 1):
                if entry.data != body(entry.entry_id):
                    raise BKeeperError(
                        f"ledger {handle.ledger_id} entry {entry.entry_id} reads back different"
                    )
                count += 1
            if count != entries:
                raise BKeeperError(f"read {count} of {entries} entries back")
            if not keep:
                await bk.delete_ledger(handle.ledger_id)
            click.echo(
                f"simpletest ok: ledger {handle.ledger_id}, {entries} entries of {entry_size} B "
                f"written ({entries / written_s:,.0f} entries/s) and read back"
                + (" (kept)" if keep else " (deleted)")
            )

    _run(run())


@shell.command()
@_METADATA
@click.argument("ledger_id", type=click.IntRange(0))
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def ledgermetadata(metadata_uri: str, ledger_id: int, as_json: bool) -> None:
    """Print one ledger's metadata: state, quorums, digest, end, segments and custom metadata."""
    from bkeeper.cli._tables import titled_table
    from bkeeper.cli.shell_ledger import metadata_json, printable

    async def run() -> None:
        async with _client(metadata_uri) as bk:
            meta = await bk.ledger_metadata(ledger_id)
            if as_json:
                click.echo(json.dumps(metadata_json(ledger_id, meta), indent=2))
                return
            table = titled_table(f"ledger {ledger_id}", show_header=False)
            table.add_column("field")
            table.add_column("value")
            created = (
                time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(meta.ctime_ms / 1000)) + " UTC"
                if meta.ctime_ms
                else "-"
            )
            rows: list[tuple[str, str]] = [
                ("state", meta.state.name),
                (
                    "ensemble / write quorum / ack quorum",
                    f"{meta.ensemble_size} / {meta.write_quorum} / {meta.ack_quorum}",
                ),
                ("digest", meta.digest_type.name),
                ("last entry", str(meta.last_entry_id)),
                ("length", f"{meta.length:,} bytes"),
                ("created", created),
                ("metadata format", str(meta.format_version)),
            ]
            for first, ensemble in meta.segments.items():
                rows.append((f"segment from entry {first}", ", ".join(ensemble)))
            for key, raw in sorted(meta.custom_metadata.items()):
                rows.append((f"custom {key}", printable(raw, False)))
            for field_name, text in rows:
                table.add_row(field_name, text)
            _console().print(table)

    _run(run())


@shell.command()
@_METADATA
@click.argument("ledger_id", type=click.IntRange(0))
@click.option("--force", is_flag=True, help="Do not ask for confirmation.")
@click.option(
    "--no-fence",
    is_flag=True,
    help="Delete an open ledger without fencing its writer first (when its bookies are gone).",
)
def deleteledger(metadata_uri: str, ledger_id: int, force: bool, no_fence: bool) -> None:
    """Delete a ledger's metadata (bookies reclaim its data).

    An open ledger is first recovered (fenced and sealed), so its writer stops at once."""
    if not force:
        confirm_deletion(f"delete ledger {ledger_id}?")

    async def run() -> None:
        async with _client(metadata_uri) as bk:
            await bk.delete_ledger(ledger_id, fence=not no_fence)
            click.echo(f"deleted ledger {ledger_id}")

    _run(run())
