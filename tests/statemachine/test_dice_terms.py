"""An ex-leader cannot disturb the new one (issue 22, part 2), on the in-memory cluster: a Dice
process paused exactly between its leadership check and ``open_writer`` loses its session,
another process takes over, and when the first resumes its writer is refused (an older term)
without fencing the new leader, which keeps leading."""

from __future__ import annotations

import asyncio
import random

from bkeeper.client.config import ClientConfig
from bkeeper.namedlog import LogConfig, NamedLogs
from bkeeper.statemachine import Dice, DiceConfig
from bkeeper.statemachine.dice import election_path
from bkeeper.testing.cluster import MemoryCluster
from bkeeper.testing.virtual_time import on_virtual_time

CLIENT = ClientConfig(
    add_timeout_ms=500, read_timeout_ms=500, long_poll_timeout_ms=100, explicit_lac_interval_ms=10
)


async def wait_for(condition, timeout_s: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition never held"
        await asyncio.sleep(0.01)


@on_virtual_time
async def test_a_leader_paused_before_open_writer_cannot_fence_the_next_one():
    async with MemoryCluster(3) as cluster:
        paused, resume = asyncio.Event(), asyncio.Event()
        hook_calls = 0

        async def pause_once() -> None:
            nonlocal hook_calls
            hook_calls += 1
            if hook_calls == 1:
                paused.set()
                await resume.wait()

        def process(index: int, hook=None):
            return Dice(
                logs[index],
                logs[index].bk.cluster.store,
                DiceConfig(log_name="dice", period_s=0.02, candidate=f"dice-{index}"),
                out=lambda _line: None,
                rng=random.Random(index),
                before_open_writer=hook,
            )

        logs = [NamedLogs(await cluster.client(CLIENT), LogConfig(tail_poll_ms=50)) for _ in "ab"]
        stops = [asyncio.Event(), asyncio.Event()]
        first = process(0, pause_once)
        tasks = [asyncio.create_task(first.run(stops[0]))]
        await asyncio.wait_for(paused.wait(), 20)  # checked its leadership, about to open
        second = process(1)
        tasks.append(asyncio.create_task(second.run(stops[1])))
        store = logs[1].bk.cluster.store
        directory = election_path(logs[1].bk.cluster.root, "dice")
        for _ in range(2000):  # the second queues behind the first
            if len(await store.children(directory)) == 2:
                break
            await asyncio.sleep(0.01)
        assert len(await store.children(directory)) == 2
        await logs[0].bk.cluster.store.expire_session()  # the pause outlives the session
        await wait_for(lambda: second.leading and len(second.values) >= 3)
        ledger = (await logs[1].log("dice").metadata()).ledgers[-1].ledger_id

        resume.set()  # the ex-leader resumes right before open_writer
        await wait_for(lambda: first.refused or second.fenced)  # open_writer ran
        assert second.fenced == 0, "the ex-leader fenced the new leader"
        assert first.refused == 1
        rolled = len(second.values)
        await wait_for(lambda: len(second.values) >= rolled + 5)
        assert second.fenced == 0, "the new leader lost its writer"
        assert second.leading
        assert (await logs[1].log("dice").metadata()).ledgers[-1].ledger_id == ledger
        assert all(role != "leading" for _, _, role in first.values)
        await wait_for(lambda: len(first.values) >= rolled)  # it follows the new leader

        for stop in stops:
            stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 10)
        assert (
            first.values == [(v, e, "following") for v, e, _ in second.values][: len(first.values)]
        )
