"""The Dice application on the in-memory cluster: leadership moves on session expiry and every
process prints a prefix of the one sequence in the log."""

from __future__ import annotations

import asyncio
import random

from bkeeper.client.config import ClientConfig
from bkeeper.namedlog import LogConfig, NamedLogs
from bkeeper.statemachine import Dice, DiceConfig
from bkeeper.testing.cluster import MemoryCluster
from bkeeper.testing.virtual_time import on_virtual_time

CLIENT = ClientConfig(
    add_timeout_ms=500, read_timeout_ms=500, long_poll_timeout_ms=100, explicit_lac_interval_ms=10
)


async def wait_for(condition, timeout_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition never held"
        await asyncio.sleep(0.01)


@on_virtual_time
async def test_leadership_moves_and_every_process_prints_a_prefix_of_the_log():
    async with MemoryCluster(3) as cluster:
        processes = []
        for index in range(3):
            bk = await cluster.client(CLIENT)
            logs = NamedLogs(bk, LogConfig(tail_poll_ms=50))
            dice = Dice(
                logs,
                bk.cluster.store,
                DiceConfig(log_name="dice", period_s=0.02, candidate=f"dice-{index}"),
                out=lambda _line: None,
                rng=random.Random(index),
            )
            stop = asyncio.Event()
            processes.append((dice, bk, stop, asyncio.create_task(dice.run(stop))))

        def leading() -> list[int]:
            return [i for i, (d, *_) in enumerate(processes) if d.leading]

        await wait_for(lambda: any(len(d.values) >= 5 for d, *_ in processes))
        leaders_seen = set()
        for _ in range(3):
            await wait_for(lambda: len(leading()) >= 1)
            leader = leading()[0]
            leaders_seen.add(leader)
            before = len(processes[leader][0].values)
            await processes[leader][1].cluster.store.expire_session()
            # Another process takes over, catches up and rolls on.
            await wait_for(
                lambda leader=leader, before=before: any(
                    i != leader and i in leading() and len(processes[i][0].values) > before
                    for i in range(3)
                )
            )
        assert len(leaders_seen) >= 2
        for _dice, _bk, stop, _task in processes:
            stop.set()
        await asyncio.wait_for(asyncio.gather(*(p[3] for p in processes)), 10)

        reader_bk = await cluster.client(CLIENT)
        named = NamedLogs(reader_bk).log("dice")
        last = await named.last_position()
        reader = await named.open_reader()
        log_values = []
        async for record in reader:
            log_values.append((int(record.payload), record.position.ledger_id))
            if record.position >= last:
                break
        await reader.close()
        epochs = {epoch for _, epoch in log_values}
        assert len(epochs) >= 3, "each leader term writes its own ledger"
        for dice, *_ in processes:
            printed = [(value, epoch) for value, epoch, _role in dice.values]
            assert printed == log_values[: len(printed)]
            assert len(printed) > 5
