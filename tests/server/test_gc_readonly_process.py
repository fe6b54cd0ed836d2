"""A real bookie, read-only on a full 64 MiB tmpfs, is writable again within seconds of its
ledgers being deleted, with the garbage collector's period left at its default (60 s): while
the disk is full, a deletion of a ledger it stores wakes a pass, and the pass's end checks
the disk (it waited for the next period, up to 75 s)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from bkeeper.wire.codes import StatusCode
from bkeeper.wire.messages import ReadRequest
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
        raw = await start_with_ledgers(bookie, SETTINGS, cluster_uri, LEDGERS)
        acked, entry, _seen = await fill(raw, LEDGERS)
        await wait_registered(cluster_uri, bookie.bookie_id, read_only=True)
        await asyncio.sleep(2.0)  # the pass run when the disk filled is over: nothing freed
        assert (await add_round(raw, KEPT, entry)) == dict.fromkeys(KEPT, StatusCode.EREADONLY)

        await delete_all_but(cluster_uri, LEDGERS, KEPT)
        deleted_at = time.monotonic()
        async with asyncio.timeout(WRITABLE_WITHIN_S):
            await wait_registered(cluster_uri, bookie.bookie_id, read_only=False)
        writable_after_s = time.monotonic() - deleted_at
        print(f"writable {writable_after_s:.2f} s after the deletions")  # docs/benchmarks.md
        assert writable_after_s < WRITABLE_WITHIN_S

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
