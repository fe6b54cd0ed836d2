"""Helpers of the simulator's tests: a coroutine run on a new loop and network, as a node."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from bkeeper.sim.loop import SimLoop
from bkeeper.sim.net import SimNetwork
from bkeeper.sim.trace import Trace

T = TypeVar("T")


def run_on_net(main: Callable[[SimLoop, SimNetwork], Awaitable[T]], seed: int = 1) -> tuple[T, str]:
    """``main(loop, net)`` run to its end; its result and the run's trace hash."""
    loop = SimLoop()
    trace = Trace(loop.time)
    net = SimNetwork(loop, random.Random(seed), trace)
    try:
        result = loop.run_until_complete(main(loop, net))  # type: ignore[arg-type]
    finally:
        loop.close()
    return result, trace.digest


async def as_node(loop: SimLoop, node: str, coro: Coroutine[Any, Any, T]) -> T:
    """``coro`` run as a task of ``node``."""
    return await loop.run_as(node, lambda: loop.create_task(coro))  # type: ignore[no-any-return]
