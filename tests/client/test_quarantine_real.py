"""Quarantine on real processes: a bookie killed, replaced, restarted, is taken back when the
next bookie is lost and no other is left (docs/client.md, "Quarantine").

Before quarantine a writer excluded every bookie that ever failed it: the second kill failed
the writer with ``NotEnoughBookiesError`` although the first bookie was back.

A cluster of its own of exactly E+1 bookies: it kills two, and after the second no bookie but
the quarantined one is left.
"""

from __future__ import annotations

import asyncio
import signal

import pytest

from bkeeper.client import BookKeeper, ClientConfig
from tests.client.appender import Appender, read_back, until

#: The library's timeouts (issue 41: 2 s ones could blame the live bookies of a loaded
#: machine; each kill is seen as a closed connection).
CONFIG = ClientConfig()


@pytest.mark.parametrize("real_cluster", [4], indirect=True)
async def test_a_restarted_bookie_replaces_the_next_one_killed(real_cluster) -> None:
    async with BookKeeper(real_cluster.uri, CONFIG) as writer:
        registry = writer.cluster.registry
        wh = await writer.create_ledger(3, 3, 2, password=b"pw")
        a_id, b_id = wh.ensemble[0], wh.ensemble[1]
        a, b = real_cluster.index_of(a_id), real_cluster.index_of(b_id)
        async with Appender(wh) as appender:
            await appender.more(100, "before any kill")
            real_cluster.signal(a, signal.SIGKILL)

            async def a_replaced() -> bool:
                return a_id not in wh.ensemble

            await until(a_replaced, "the writer replaced the killed bookie")
            await appender.more(100, "after the first kill")
            await asyncio.to_thread(real_cluster.start, a)

            async def a_writable() -> bool:
                return a_id in (await registry.bookies()).writable

            await until(a_writable, "the restarted bookie registered writable")
            assert b_id in wh.ensemble
            real_cluster.signal(b, signal.SIGKILL)

            async def b_replaced() -> bool:
                appender.check()
                return b_id not in wh.ensemble

            await until(b_replaced, "the writer replaced the second killed bookie")
            await appender.more(200, "after the second kill")
        appender.check()
        assert a_id in wh.ensemble, "the quarantined bookie was the only one left"
        await appender.close_and_check()
    assert await read_back(real_cluster.uri, CONFIG, wh.ledger_id) == appender.acknowledged
