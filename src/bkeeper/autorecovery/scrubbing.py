"""A bookie's care of its own data while it serves: the data integrity check at start, and
the scrub (:mod:`bkeeper.storage.scrub`) with the integrity check after each pass that found
damage.

:func:`maintain_storage` runs in ``bkeeper bookie`` beside the server, with a metadata
service (the integrity check reads the metadata and the other replicas):

1. ledgers in limbo at start (journal replay found damaged records): the integrity check;
2. unless ``scrub_interval_ms`` is 0, a scrub pass soon after start and then every
   ``scrub_interval_ms``, paced to ``scrub_bytes_per_s``, in a thread; the damaged entries
   it finds put their ledgers in limbo, and the integrity check runs at once and copies them
   back from the other replicas;
3. every ``limbo_check_interval_ms``, ledgers in limbo (a read that found a damaged record,
   a repair that could not finish for want of bookies) run the integrity check again.

A failed pass or check is logged and the bookie serves on; the next pass tries again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading

from bkeeper.autorecovery.integrity import check_bookie
from bkeeper.client import BookKeeper
from bkeeper.common.clock import Clock, default_clock
from bkeeper.common.errors import BKeeperError
from bkeeper.server import Bookie
from bkeeper.storage.scrub import ScrubReport, scrub

__all__ = ["check_integrity", "maintain_storage", "needs_integrity_check"]

log = logging.getLogger(__name__)


def needs_integrity_check(server: Bookie) -> bool:
    """Ledgers (or the whole storage) in limbo, and a metadata service to repair them with."""
    storage = server.storage
    if storage is None or not (storage.limbo or storage.limbo_ledgers()):
        return False
    if not server.config.metadata_uri:
        log.warning(
            "ledgers in limbo but no --metadata: no integrity check; they answer "
            "'unknown' until repaired"
        )
        return False
    return True


async def check_integrity(server: Bookie, metadata_uri: str) -> None:
    """The integrity check in the background: its failure is logged, the bookie serves on."""
    try:
        async with BookKeeper(metadata_uri) as client:
            report = await check_bookie(server, client)
    except asyncio.CancelledError:
        log.info("integrity check stopped with the bookie")
        raise
    except Exception:
        log.exception("integrity check failed; ledgers in limbo stay so until the next pass")
        return
    if report.failed:
        log.error("integrity check: ledgers %s stay in limbo", sorted(report.failed))


async def maintain_storage(
    server: Bookie, metadata_uri: str, integrity: bool, clock: Clock | None = None
) -> None:
    """The module's steps until cancelled (with the bookie); ``clock`` (a ``SystemClock`` by
    default) says when a scrub is due."""
    if not integrity:
        return
    if not metadata_uri:
        needs_integrity_check(server)  # says so when ledgers in limbo cannot be repaired
        return
    config = server.config
    interval_s = config.scrub_interval_ms / 1000.0
    look_s = config.limbo_check_interval_ms / 1000.0
    clock = clock or default_clock()
    scrub_at = clock.monotonic()  # the first pass soon after start
    while True:
        if needs_integrity_check(server):
            await check_integrity(server, metadata_uri)
        if interval_s and clock.monotonic() >= scrub_at:
            report = await _scrub_pass(server)
            scrub_at = clock.monotonic() + interval_s
            if report is not None and report.damaged:
                log.error(
                    "scrub: damaged entries in %d ledgers (%s); repairing them from the replicas",
                    len(report.damaged),
                    ", ".join(
                        f"ledger {k}: {v[:5]}" for k, v in sorted(report.damaged.items())[:5]
                    ),
                )
                continue  # the integrity check at once
        wait_s = look_s if not interval_s else min(look_s, max(0.0, scrub_at - clock.monotonic()))
        await asyncio.sleep(wait_s)


async def _scrub_pass(server: Bookie) -> ScrubReport | None:
    """One pass in a thread (stopped, and waited for, when cancelled); None if it failed."""
    storage = server.storage
    if storage is None:
        return None
    stop = threading.Event()
    rate = server.config.scrub_bytes_per_s
    work = asyncio.ensure_future(asyncio.to_thread(scrub, storage, rate, stop))
    try:
        report = await asyncio.shield(work)
    except asyncio.CancelledError:
        stop.set()  # the thread stops after the ledger it is reading
        with contextlib.suppress(BKeeperError, OSError):
            await work
        raise
    except (BKeeperError, OSError):
        log.exception("scrub pass failed; the next one in %d ms", server.config.scrub_interval_ms)
        return None
    log.info(
        "scrub: %d ledgers, %d bytes read in %.1f s, %d damaged entries",
        report.ledgers,
        report.bytes_read,
        report.seconds,
        sum(map(len, report.damaged.values())),
    )
    return report
