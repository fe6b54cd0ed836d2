"""``bkeeper shell bookiesanity``: check one bookie works, as Apache BookKeeper's
``bookkeeper shell bookiesanity`` does: a ledger on that bookie alone (an ensemble of one),
written, read back, deleted. Thin: the client does the work; a failure is one ``error:``
line and exit status 1.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

import click

from bkeeper.cli._errors import CommandError
from bkeeper.cli._options import metadata_option
from bkeeper.cli.shell_ops import progress, registered
from bkeeper.client.bookkeeper import BookKeeper
from bkeeper.common.errors import BKeeperError

__all__ = ["SANITY_TIMEOUT_S", "commands"]

T = TypeVar("T")

#: How long ``bookiesanity`` waits for its writes and reads by default.
SANITY_TIMEOUT_S = 30.0


def _run(coro: Coroutine[Any, Any, T]) -> T:
    from bkeeper.cli.bookie import run_event_loop

    return run_event_loop(coro)


# -- bookiesanity ------------------------------------------------------------------------------
def _sanity_entry(entry_id: int) -> bytes:
    return b"bookiesanity-%08d" % entry_id


async def _sanity(bk: BookKeeper, bookie_id: str, entries: int, where: str) -> int:
    """Write ``entries`` to a new ledger on ``bookie_id`` alone, read them back, delete it;
    its id. ``CommandError`` saying what failed (the ledger deleted all the same)."""
    bookies = await bk.cluster.registry.bookies()
    if bookie_id in bookies.read_only:
        raise CommandError(f"bookie {bookie_id} is read-only: it refuses adds")
    if bookie_id not in bookies.writable:
        await registered(bk.cluster, bookie_id, where)  # raises: not registered
    password = b"bookiesanity"
    handle = await bk.create_ledger(1, 1, 1, password=password, bookies=[bookie_id])
    ledger_id = handle.ledger_id
    try:
        with progress(f"writing to {bookie_id}") as advance:
            futures = [await handle.append_async(_sanity_entry(i)) for i in range(entries)]
            for done, future in enumerate(futures, 1):
                await future
                advance(done, entries)
        await handle.close()
        # A failed add moves the ledger to another bookie (ensemble change) and succeeds
        # there: only a ledger still wholly on this bookie proves it sane.
        meta = await bk.ledger_metadata(ledger_id)
        moved = sorted({b for ensemble in meta.segments.values() for b in ensemble} - {bookie_id})
        if moved:
            raise CommandError(
                f"bookie {bookie_id} failed adds to ledger {ledger_id}: they went to "
                f"{', '.join(moved)} instead"
            )
        reader = await bk.open_ledger(ledger_id, password, recovery=False)
        count = 0
        async for entry in reader.read(0, entries - 1):
            if entry.data != _sanity_entry(entry.entry_id):
                raise CommandError(
                    f"bookie {bookie_id}: entry {entry.entry_id} of ledger {ledger_id} "
                    "reads back different"
                )
            count += 1
        if count != entries:
            raise CommandError(f"bookie {bookie_id}: read {count} of {entries} entries back")
    except BaseException as failure:
        try:
            await bk.delete_ledger(ledger_id, fence=False)
        except BKeeperError as exc:  # the first failure is the news; say what is left
            raise CommandError(
                f"{str(failure) or type(failure).__name__}; and ledger {ledger_id} is left "
                f"behind: {exc}"
            ) from failure
        raise
    await bk.delete_ledger(ledger_id, fence=False)
    return ledger_id


@click.command()
@metadata_option
@click.option(
    "--bookie",
    "bookie_id",
    required=True,
    metavar="ID",
    help="The bookie's id (host:port unless it has a --bookie-id), as listbookies shows it.",
)
@click.option("--entries", default=10, show_default=True, type=click.IntRange(1, 100_000))
@click.option(
    "--timeout", "timeout_s", default=SANITY_TIMEOUT_S, show_default=True,
    type=click.FloatRange(min=0, min_open=True), help="Seconds for the whole test.",
)  # fmt: skip
def bookiesanity(metadata_uri: str, bookie_id: str, entries: int, timeout_s: float) -> None:
    """Check a bookie works: write ENTRIES entries to a new ledger on it alone (ensemble of
    one), read them back, delete the ledger."""

    async def run() -> int:
        async with BookKeeper(metadata_uri) as bk:
            try:
                return await asyncio.wait_for(
                    _sanity(bk, bookie_id, entries, metadata_uri), timeout_s
                )
            except TimeoutError:
                raise CommandError(
                    f"bookie {bookie_id}: {entries} entries not written and read back in "
                    f"{timeout_s:g} s"
                ) from None

    started = time.perf_counter()
    ledger_id = _run(run())
    click.echo(
        f"bookie {bookie_id} is sane: {entries} entries written to ledger {ledger_id} and "
        f"read back in {time.perf_counter() - started:.2f} s (ledger deleted)"
    )


commands = (bookiesanity,)
