"""The crash detector (:mod:`bkeeper.kv.detector`) on an in-memory store: refusals count only
when they span ``REFUSED_FOR_S_MIN`` on the detector's clock."""

from __future__ import annotations

import asyncio
import json

from bkeeper.kv.detector import REFUSALS_MIN, REFUSED_FOR_S_MIN, CrashDetector
from bkeeper.meta.memory import MemoryNodeStore, MemoryTree
from bkeeper.testing.benchmarks.processes import free_port
from bkeeper.testing.clock import FakeClock

DIRECTORY = "/elections/log"


async def test_refusals_must_span_the_minimum_on_the_detectors_clock() -> None:
    store = MemoryNodeStore(MemoryTree("detector"))
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens: every probe is refused
    node = await store.create(
        f"{DIRECTORY}/n_", json.dumps({"url": url}).encode(), sequential=True, make_parents=True
    )
    clock = FakeClock()
    detector = CrashDetector(store, DIRECTORY, "http://me", 0.01, lambda: False, clock=clock)
    stop = asyncio.Event()
    task = asyncio.create_task(detector.run(stop))
    try:
        async with asyncio.timeout(20):
            while detector.probes < 3 * REFUSALS_MIN:
                await asyncio.sleep(0.01)
        await asyncio.sleep(REFUSED_FOR_S_MIN * 1.5)  # long enough in real time
        # Many refusals, however long in real time: none later than the first on this clock.
        assert detector.deposed == 0
        assert await store.exists(node) is not None
        clock.advance(REFUSED_FOR_S_MIN)
        async with asyncio.timeout(20):
            while not detector.deposed:
                await asyncio.sleep(0.01)
        assert await store.exists(node) is None
    finally:
        stop.set()
        await task
        await store.aclose()
