"""Degraded writes on real processes (docs/client.md, "No spare: degraded writes").

Three bookies, E3/Qw3/Qa2, kill -9 one: before, the writer failed with "no bookie can
replace ...: 3 bookies registered as writable, 3 of them in the ensemble already and 1 failed
to answer this writer" although the two left make the ack quorum. Now appends go on; a fourth
bookie started later takes the dead one's place, and everything acknowledged reads back.

Each test has a cluster of its own of exactly E bookies: it kills one, and is about having
no spare.
"""

from __future__ import annotations

import asyncio
import signal

from bkeeper.client import BookKeeper, ClientConfig
from tests.client.appender import Appender, read_back, until

#: The library's timeouts (issue 41: 2 s ones could blame the live bookies of a loaded
#: machine; the kill is seen as a closed connection). Searches for a spare every 200 ms.
CONFIG = ClientConfig(degraded_retry_interval_ms=200)


async def test_a_killed_bookie_with_no_spare_does_not_stop_the_writer(real_cluster) -> None:
    async with BookKeeper(real_cluster.uri, CONFIG) as writer:
        wh = await writer.create_ledger(3, 3, 2, password=b"pw")
        first = wh.ensemble
        dead = first[1]
        async with Appender(wh) as appender:
            await appender.more(100, "before the kill")
            real_cluster.signal(real_cluster.index_of(dead), signal.SIGKILL)
            await appender.more(300, "after the kill")  # before: NotEnoughBookiesError
            assert wh.degraded == {dead}
            await asyncio.sleep(2.0)  # a few seconds degraded, searches finding nothing
            await appender.more(100, "still degraded")
            assert wh.metadata.segments == {0: first}
            real_cluster.ports.append(0)
            await asyncio.to_thread(real_cluster.start, len(real_cluster.ports) - 1)
            spare = real_cluster.bookie_id(len(real_cluster.ports) - 1)

            async def moved() -> bool:
                appender.check()
                return not wh.degraded and spare in wh.ensemble

            await until(moved, "the writer moved to the new bookie")
            await appender.more(100, "after the move")
        appender.check()
        assert wh.ensemble == (first[0], spare, first[2])
        await appender.close_and_check()
    assert await read_back(real_cluster.uri, CONFIG, wh.ledger_id) == appender.acknowledged


async def test_a_killed_bookie_restarted_is_taken_back(real_cluster) -> None:
    """No spare: the bookie killed is restarted (the common case), and the writer takes it
    back in its place, with no new segment; everything acknowledged reads back."""
    async with BookKeeper(real_cluster.uri, CONFIG) as writer:
        wh = await writer.create_ledger(3, 3, 2, password=b"pw")
        first = wh.ensemble
        dead = first[2]
        async with Appender(wh) as appender:
            await appender.more(100, "before the kill")
            real_cluster.stop(real_cluster.index_of(dead), signal.SIGKILL)
            await appender.more(300, "after the kill")
            assert wh.degraded == {dead}
            await asyncio.to_thread(real_cluster.start, real_cluster.index_of(dead))

            async def back() -> bool:
                appender.check()
                return not wh.degraded

            await until(back, "the writer took the restarted bookie back")
            await appender.more(100, "after the restart")
        appender.check()
        assert wh.metadata.segments == {0: first}
        await appender.close_and_check()
    assert await read_back(real_cluster.uri, CONFIG, wh.ledger_id) == appender.acknowledged
