"""A real bookie, read-only on a full 64 MiB tmpfs, is writable again within seconds of its
ledgers being deleted, with the garbage collector's period left at its default (60 s): while
the disk is full, a deletion of a ledger it stores wakes a pass, and the pass's end checks
the disk (it waited for the next period, up to 75 s)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bkeeper.cli.shell_admin import admin_url
from bkeeper.wire.codes import StatusCode
from bkeeper.wire.messages import ReadRequest
from tests.server.admin_client import call
from tests.server.test_full_disk_gc_process import (
    add_more,
    add_round,
    delete_all_but,
    fill,
    read_back,
    start_with_ledgers,
)
from tests.server.test_full_disk_process import BookieProcess, cluster_uri, wait_registered

__all__ = ["cluster_uri"]


async def gc_status(http_port: int) -> dict[str, Any]:
    answer = await call(http_port, "GET", "/api/v1/bookie/gc")
    assert answer.status == 200, answer
    return dict(answer.json())


async def wait_pass_over(http_port: int) -> None:
    """Until the bookie's garbage collector has run a pass on the full disk and runs none."""
    async with asyncio.timeout(60):  # a hang guard
        while True:
            status = await gc_status(http_port)
            if status["disk_state"] != "writable" and status["passes"] and not status["running"]:
                return
            await asyncio.sleep(0.05)


LEDGERS = tuple(range(201, 211))
KEPT = LEDGERS[:2]
#: Writable again this soon after the deletions (the default gc_wait_ms is 60 s).
WRITABLE_WITHIN_S = 10.0
SETTINGS = (
    "checkpoint_interval_ms=500",
    "disk_check_interval_ms=200",
    "compaction_rate_bytes_per_s=0",
    "entry_log_bytes_max=4194304",
    "journal_file_bytes_max=4194304",
    "journal_checkpoint_roll_bytes=1048576",
    "write_cache_bytes_max=4194304",
    "disk_high_priority_free_bytes_min=1048576",
)


async def test_deleting_ledgers_on_a_full_bookie_makes_it_writable_within_seconds(
    small_tmpfs: Path, tmp_path: Path, cluster_uri: str
) -> None:
    bookie = BookieProcess(small_tmpfs / "bookie", tmp_path / "bookie.log", cluster_uri)
    try:
        raw = await start_with_ledgers(bookie, SETTINGS, cluster_uri, LEDGERS, "--http-port", "0")
        # The admin server's port, as the bookie registered it (what `bkeeper shell` reads).
        http_port = urlsplit(await admin_url(cluster_uri, bookie.bookie_id)).port
        assert http_port is not None
        acked, entry, _seen = await fill(raw, LEDGERS)
        await wait_registered(cluster_uri, bookie.bookie_id, read_only=True)
        # The pass the full disk woke is over (it freed nothing: every ledger is live), so
        # only a deletion can wake the next one before the period (it was a 2 s sleep).
        await wait_pass_over(http_port)
        assert (await add_round(raw, KEPT, entry)) == dict.fromkeys(KEPT, StatusCode.EREADONLY)
        log_offset = bookie.log_path.stat().st_size

        await delete_all_but(cluster_uri, LEDGERS, KEPT)
        deleted_at = time.monotonic()
        async with asyncio.timeout(WRITABLE_WITHIN_S):
            await wait_registered(cluster_uri, bookie.bookie_id, read_only=False)
        writable_after_s = time.monotonic() - deleted_at
        print(f"writable {writable_after_s:.2f} s after the deletions")  # docs/benchmarks.md
        assert writable_after_s < WRITABLE_WITHIN_S
        # ...by a pass that a deletion woke (not the period's, nor one under way: the line is
        # logged only when a deletion wakes the collector).
        with bookie.log_path.open("rb") as log:
            log.seek(log_offset)
            assert b"ledger metadata changed while the disk is full" in log.read()

        await add_more(raw, acked, KEPT, 5)  # adds go on where they stopped
        for ledger in KEPT:
            await read_back(raw, ledger, acked[ledger])
        # The pass woken by the first deletion may have listed the metadata before the last
        # ones: those wait for a later pass (the bookie is writable, so the periodic one).
        gone = []
        for ledger in LEDGERS:
            if ledger not in KEPT:
                response = await raw.send(ReadRequest(ledger, 0))
                assert response.status in (StatusCode.ENOLEDGER, StatusCode.EOK), response
                gone += [ledger] if response.status is StatusCode.ENOLEDGER else []
        assert gone
        await raw.aclose()
        assert bookie.stop() == 0
    finally:
        bookie.kill()
