"""The simulated cluster's bookies: crashes, also of a bookie still starting."""

from __future__ import annotations

import asyncio
import contextlib
import random

from bkeeper.common.clock import set_default_clock
from bkeeper.sim.loop import START_S, SimClock, SimLoop
from bkeeper.sim.trace import Trace
from bkeeper.sim.world import World


def _in_world(main) -> World:  # type: ignore[no-untyped-def]
    loop = SimLoop()
    trace = Trace(loop.time, START_S)
    rngs = [random.Random(n) for n in range(3)]
    world = World(loop, f"test-world-{random.getrandbits(32)}", *rngs, trace, 1)
    system_clock = set_default_clock(SimClock())
    try:
        loop.run_until_complete(main(world))
        loop.run_until_complete(world.stop())
    finally:
        loop.close()
        set_default_clock(system_clock)
    return world


def test_a_crash_while_a_bookie_starts_leaves_it_down_until_started_again() -> None:
    seen: dict[str, object] = {}

    async def main(world: World) -> None:
        await world.as_node("admin", world._format())
        sim = world.bookies[0]
        start = asyncio.ensure_future(world.start_bookie(sim))
        await asyncio.sleep(0.002)  # its start is under way: metadata requests in flight
        assert not start.done() and not sim.up
        world.crash_bookie(sim)
        seen["started"] = await start
        seen["up after the crash"] = sim.up
        await asyncio.sleep(5.0)
        seen["up later"] = sim.up  # nothing started it again behind the fault's back
        seen["started again"] = await world.start_bookie(sim)

    world = _in_world(main)
    assert seen == {
        "started": False,
        "up after the crash": False,
        "up later": False,
        "started again": True,
    }
    assert world.failures == []
    assert any("crash while starting" in line for line in world.trace.lines)


def test_a_start_called_off_leaves_the_port_free_for_the_next() -> None:
    seen: dict[str, object] = {}

    async def main(world: World) -> None:
        await world.as_node("admin", world._format())
        sim = world.bookies[0]
        for wait_s in (0.0005, 0.002, 0.004, 0.008, 0.02):
            start = asyncio.ensure_future(world.start_bookie(sim, must=False))
            await asyncio.sleep(wait_s)
            if start.done():
                break
            start.cancel()  # what healing every fault does to a restart under way
            with contextlib.suppress(asyncio.CancelledError):
                await start
            if sim.up:  # called off as it was up: it stays up, not a stray listener
                world.crash_bookie(sim)
            seen[f"after {wait_s}"] = await world.start_bookie(sim)
            world.crash_bookie(sim)

    world = _in_world(main)
    assert world.failures == []
    assert seen and all(seen.values()), seen
