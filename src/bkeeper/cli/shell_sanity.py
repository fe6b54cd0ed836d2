"""``bkeeper shell bookiesanity``: check one bookie works, as Apache BookKeeper's
``bookkeeper shell bookiesanity`` does: a ledger on that bookie alone (an ensemble of one),
written, read back, deleted. Thin: the check is :mod:`bkeeper.admin.sanity`'s (the bookie's
``/api/v1/bookie/sanity`` runs the same); a failure is one ``error:`` line and exit status 1.
"""

from __future__ import annotations

import time
from collections.abc import Coroutine
from typing import Any, TypeVar

import click

from bkeeper.admin.sanity import sanity_check
from bkeeper.cli._errors import CommandError
from bkeeper.cli._options import metadata_option
from bkeeper.cli.shell_ops import progress, registered
from bkeeper.client.bookkeeper import BookKeeper
from bkeeper.common.errors import BKeeperError
from bkeeper.common.tasks import within

__all__ = ["SANITY_TIMEOUT_S", "commands"]

T = TypeVar("T")

#: How long ``bookiesanity`` waits for its writes and reads by default.
SANITY_TIMEOUT_S = 30.0


def _run(coro: Coroutine[Any, Any, T]) -> T:
    from bkeeper.common.loop import run_event_loop

    return run_event_loop(coro)


async def _sanity(bk: BookKeeper, bookie_id: str, entries: int, where: str) -> int:
    """:func:`bkeeper.admin.sanity.sanity_check` (what ``/api/v1/bookie/sanity`` runs) on a
    registered ``bookie_id``; its failure as one line naming the bookie."""
    await registered(bk.cluster, bookie_id, where)  # an unknown id: say how to list them
    try:
        with progress(f"checking {bookie_id}"):
            return await sanity_check(bk, bookie_id, entries)
    except BKeeperError as exc:
        raise CommandError(f"sanity check of bookie {bookie_id} failed: {exc}") from exc


@click.command()
@metadata_option
@click.option(
    "--bookie",
    "bookie_id",
    required=True,
    metavar="ID",
    help="The bookie's id (host:port unless it has a --bookie-id), as listbookies shows it.",
)
@click.option("--entries", default=10, show_default=True, type=click.IntRange(1, 10_000))
@click.option(
    "--timeout",
    "timeout_s",
    default=SANITY_TIMEOUT_S,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds for the whole test.",
)
def bookiesanity(metadata_uri: str, bookie_id: str, entries: int, timeout_s: float) -> None:
    """Check a bookie works: write ENTRIES entries to a new ledger on it alone (ensemble of
    one), read them back, delete the ledger."""

    async def run() -> int:
        async with BookKeeper(metadata_uri) as bk:
            try:
                return await within(_sanity(bk, bookie_id, entries, metadata_uri), timeout_s)
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
