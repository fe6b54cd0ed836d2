"""A client whose own event loop stalls does not blame its bookies (issue 11, item 1).

Before the fix, an add queued just before the loop blocked for longer than the add timeout
was "not acknowledged in time" by every bookie the moment the loop ran again: the writer
replaced its whole ensemble, or failed every add when no bookie was left to replace one.
"""

from __future__ import annotations

import time

import pytest

from bkeeper.client import BookKeeper, ClientConfig

pytestmark = pytest.mark.integration

CONFIG = ClientConfig(add_timeout_ms=500, timeout_check_interval_ms=50)


async def test_a_stalled_event_loop_is_not_a_bookie_failure(real_cluster) -> None:
    async with BookKeeper(real_cluster.uri, CONFIG) as bk:
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        ensemble = wh.ensemble
        assert await wh.append(b"before") == 0
        future = await wh.append_async(b"queued, then the loop stalls")
        time.sleep(4 * CONFIG.add_timeout_ms / 1000)  # blocks the loop, as sync stdin reads did
        assert await future == 1
        assert await wh.append(b"after") == 2
        assert wh.ensemble == ensemble
        assert len(wh.metadata.segments) == 1
        await wh.close()
        assert wh.metadata.last_entry_id == 2
