"""Members of a replicated state machine through metadata outages, on the in-memory cluster:
every member's store drops its connection (as when ZooKeeper is killed), the leader dies
while it is away (its session lives on until it expires), the store comes back, and a new
member takes the dead one's place. A seeded schedule per case; afterwards every member must
hold every command the leader acknowledged (the shape of verify seed 50042: a follower that
stopped applying after ZooKeeper came back)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
from typing import Any

import pytest

from bkeeper.common.errors import BKeeperError
from bkeeper.namedlog import LogConfig, NamedLogs
from bkeeper.statemachine import ReplicatedStateMachine, RsmConfig
from bkeeper.testing.cluster import MemoryCluster
from bkeeper.testing.virtual_time import on_virtual_time

from .test_machine import CLIENT, Journal

ROUNDS = 3
#: A dead member's last steps (closing its writer) wait for the store at most this long.
MEMBER_CLIENT = dataclasses.replace(CLIENT, metadata_reconnect_timeout_ms=2_000)


async def start(cluster: MemoryCluster, name: str) -> dict[str, Any]:
    bk = await cluster.client(MEMBER_CLIENT)
    logs = NamedLogs(bk, LogConfig(tail_poll_ms=50, roll_bytes=4000))
    journal = Journal()
    config = RsmConfig(
        "journal", name.encode(), snapshot_every_commands=50, retry_pause_s=0.1, follow_stall_s=5
    )
    rsm = ReplicatedStateMachine(logs, bk.cluster.store, journal, config)
    stop = asyncio.Event()
    return {"bk": bk, "rsm": rsm, "stop": stop, "task": asyncio.create_task(rsm.run(stop))}


@pytest.mark.parametrize("seed", [1, 2, 3])
@on_virtual_time
async def test_members_hold_every_acknowledged_command_after_outages(seed: int) -> None:
    rng = random.Random(seed)
    async with MemoryCluster(3) as cluster:
        members = [await start(cluster, f"m{i}") for i in range(3)]
        acked: list[int] = []

        async def submit_forever() -> None:
            n = 0
            while True:
                leader = next((m for m in members if m["rsm"].leading), None)
                if leader is None:
                    await asyncio.sleep(0.01)
                    continue
                with contextlib.suppress(BKeeperError):
                    await leader["rsm"].submit(b"%d" % n)
                    acked.append(n)
                n += 1
                # 200 commands a (virtual) second: a submit takes no virtual time, so an
                # unpaced loop would submit without end while the clock stands still
                await asyncio.sleep(0.005)

        submitter = asyncio.create_task(submit_forever())
        for round_ in range(ROUNDS):
            await asyncio.sleep(rng.uniform(0.2, 0.8))
            leader = next((m for m in members if m["rsm"].leading), None)
            for m in members:
                m["bk"].cluster.store.suspend()
            await asyncio.sleep(rng.uniform(0.0, 0.5))
            dead = leader if leader is not None and rng.random() < 0.7 else None
            if dead is not None:  # dies while the store is away: its session lives on
                session = dead["bk"].cluster.store.session_id
                dead["task"].cancel()
                with contextlib.suppress(BaseException):
                    await dead["task"]
                members.remove(dead)
            await asyncio.sleep(rng.uniform(0.0, 1.0))
            for m in members:
                m["bk"].cluster.store.resume()
            if dead is not None:
                await asyncio.sleep(rng.uniform(0.0, 0.5))
                members[0]["bk"].cluster.store.tree.close_session(session)  # it expires
                members.append(await start(cluster, f"r{round_}"))
        await asyncio.sleep(0.5)
        submitter.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await submitter
        assert acked, "nothing was acknowledged"
        # Every member, the new ones (from a snapshot) too, ends with every acked command.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        target = None
        while True:
            leader = next((m for m in members if m["rsm"].leading), None)
            if leader is not None and target is None:
                with contextlib.suppress(BKeeperError):
                    await leader["rsm"].read_barrier()
                    target = leader["rsm"].applied
            applied = [m["rsm"].applied for m in members]
            if target is not None and all(a is not None and a >= target for a in applied):
                break
            assert loop.time() < deadline, f"members did not catch up: {applied} < {target}"
            await asyncio.sleep(0.1)
        for m in members:
            assert m["rsm"].reader_restarts == 0
            m["stop"].set()
        await asyncio.gather(*(m["task"] for m in members))
