"""The virtual-time loop of in-memory scenarios (bkeeper.testing.virtual_time): timers cost
no real time, but work in threads is waited for in real time, so a timeout never fires
because the machine was slow."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from bkeeper.client.config import ClientConfig
from bkeeper.testing.cluster import MemoryCluster
from bkeeper.testing.virtual_time import (
    LoopClock,
    RealIOError,
    VirtualTimeLoop,
    on_virtual_time,
    run_virtual,
)


def test_an_hour_of_timers_takes_no_real_hour() -> None:
    async def main() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        started = loop.time()
        await asyncio.sleep(3600)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(7200):
                await asyncio.Event().wait()  # nothing will ever set it
        return started, loop.time()

    real = time.monotonic()
    started, ended = run_virtual(main())
    assert ended - started == pytest.approx(3600 + 7200)
    assert time.monotonic() - real < 30


def test_timers_fire_in_their_order_on_virtual_time() -> None:
    async def main() -> list[tuple[str, float]]:
        loop = asyncio.get_running_loop()
        origin = loop.time()
        fired: list[tuple[str, float]] = []

        async def after(name: str, delay: float) -> None:
            await asyncio.sleep(delay)
            fired.append((name, round(loop.time() - origin, 6)))

        await asyncio.gather(after("c", 0.3), after("a", 0.1), after("b", 0.2))
        return fired

    assert run_virtual(main()) == [("a", 0.1), ("b", 0.2), ("c", 0.3)]


def test_a_thread_is_waited_for_and_takes_no_virtual_time() -> None:
    """A 0.1 s timeout on a 0.3 s thread: before the loop counted its threads, time jumped
    at once and the wait timed out; when the clock moved with real time while a thread
    worked, a slow machine made timeouts fire."""

    async def main() -> float:
        loop = asyncio.get_running_loop()
        started = loop.time()
        await asyncio.wait_for(asyncio.to_thread(time.sleep, 0.3), 0.1)
        return loop.time() - started

    assert run_virtual(main()) == 0.0


@pytest.mark.parametrize("probed", [True, False])
def test_a_thread_reporting_on_its_own_is_waited_for_while_its_probe_says_busy(
    probed: bool,
) -> None:
    """A thread that answers with ``call_soon_threadsafe`` (a journal answering adds) is
    known only through a busy probe: without one, the clock jumps past the timeout; with
    one, a 0.1 s timeout outlasts 0.3 s of real work."""

    async def main() -> str:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualTimeLoop)
        answer: asyncio.Future[str] = loop.create_future()
        working = threading.Event()
        working.set()

        def work() -> None:
            time.sleep(0.3)
            loop.call_soon_threadsafe(answer.set_result, "done")
            working.clear()

        if probed:
            loop.add_busy_probe(working.is_set)
        thread = threading.Thread(target=work)
        thread.start()
        try:
            return await asyncio.wait_for(answer, 0.1)
        except TimeoutError:
            return "timed out"
        finally:
            await asyncio.to_thread(thread.join)

    assert run_virtual(main()) == ("done" if probed else "timed out")


def test_the_loop_clock_reads_the_loops_time() -> None:
    clock = LoopClock()

    async def main() -> tuple[float, int, float, int]:
        before = (clock.monotonic(), clock.wall_ms())
        await asyncio.sleep(90)
        return (*before, clock.monotonic(), clock.wall_ms())

    m0, w0, m1, w1 = run_virtual(main())
    assert m1 - m0 == pytest.approx(90)
    assert w1 - w0 == 90_000


@on_virtual_time
async def test_a_memory_cluster_writes_and_reads_on_virtual_time() -> None:
    """The journals' threads are probed: adds are answered, not timed out, however long an
    fsync takes in real time (a 1 ms add timeout); a minute of idle waiting costs nothing."""
    async with MemoryCluster(3) as cluster:
        bk = await cluster.client(ClientConfig(add_timeout_ms=1))
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        ids = [await wh.append(b"%d" % i) for i in range(50)]
        assert ids == list(range(50))
        await asyncio.sleep(60)
        assert await wh.append(b"after a minute") == 50
        await wh.close()


@on_virtual_time
async def test_real_sockets_are_refused_naming_why() -> None:
    """A socket's data in flight is invisible to the loop, which would jump the clock past a
    timeout meanwhile (test_degraded_kv failed so): real I/O fails at once, saying so."""
    with pytest.raises(RealIOError, match="a test with real sockets or pipes runs on real time"):
        await asyncio.start_server(lambda reader, writer: None, "127.0.0.1", 0)
