"""The key-value store on the in-memory cluster: members in-process (real HTTP on localhost),
the Python client, leader changes by session expiry, snapshots and truncation, histories
checked with the linearizability checker."""

from __future__ import annotations

import asyncio
import math
import random

import pytest

from bkeeper.client.config import ClientConfig
from bkeeper.common.errors import ConfigError, StateMachineError
from bkeeper.kv import BlockingKvClient, KvClient, KvServer, KvServerConfig, log_name
from bkeeper.namedlog import LogConfig, NamedLogs
from bkeeper.testing.cluster import MemoryCluster
from bkeeper.testing.linearizability import Operation, check, kv_model

CLIENT = ClientConfig(
    add_timeout_ms=500, read_timeout_ms=500, long_poll_timeout_ms=100, explicit_lac_interval_ms=10
)


async def wait_for(condition, timeout_s: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition never held"
        await asyncio.sleep(0.01)


class Members:
    """Store members on one in-memory cluster."""

    def __init__(self, cluster: MemoryCluster, log_config: LogConfig, **server_options) -> None:
        self.cluster = cluster
        self.log_config = log_config
        self.options = server_options
        self.servers: list[KvServer | None] = []
        self.stops: list[asyncio.Event] = []
        self.tasks: list[asyncio.Task[None]] = []

    async def start(self, index: int | None = None) -> KvServer:
        bk = await self.cluster.client(CLIENT)
        logs = NamedLogs(bk, self.log_config)
        i = len(self.servers) if index is None else index
        config = KvServerConfig(name="s", member_id=f"m{i}", **self.options)
        server = KvServer(logs, bk.cluster.store, config)
        await server.start()
        stop = asyncio.Event()
        task = asyncio.create_task(server.run(stop))
        if index is None:
            self.servers.append(server)
            self.stops.append(stop)
            self.tasks.append(task)
        else:
            self.servers[i], self.stops[i], self.tasks[i] = server, stop, task
        return server

    def leader(self) -> int | None:
        leading = [i for i, s in enumerate(self.servers) if s is not None and s.rsm.leading]
        return leading[0] if len(leading) == 1 else None

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self.servers if s is not None]

    async def stop(self, index: int) -> None:
        server = self.servers[index]
        assert server is not None
        self.stops[index].set()
        await asyncio.wait_for(self.tasks[index], 20)
        await server.aclose()
        self.servers[index] = None

    async def stop_all(self) -> None:
        for index, server in enumerate(self.servers):
            if server is not None:
                await self.stop(index)


@pytest.fixture
async def members():
    async with MemoryCluster(3) as cluster:
        group = Members(cluster, LogConfig(tail_poll_ms=50))
        try:
            yield group
        finally:
            await group.stop_all()


async def test_operations_redirects_and_stale_reads(members):
    for _ in range(3):
        await members.start()
    await wait_for(lambda: members.leader() is not None)
    leader = members.leader()
    follower = next(i for i in range(3) if i != leader)
    # The client starts at a follower: writes and linearizable reads are redirected.
    async with KvClient([members.servers[follower].url]) as kv:
        assert await kv.put("a/1", "one") == 1
        assert await kv.put("a/1", "uno") == 2
        assert await kv.cas("a/1", 1, "x") == (False, 2)
        assert await kv.cas("a/1", 2, "eins") == (True, 3)
        assert await kv.cas("a/2", 0, "two") == (True, 1)
        item = await kv.get("a/1")
        assert (item.value, item.version) == ("eins", 3)
        assert (await kv.get("missing")).version == 0
        assert kv.retries >= 1
        assert [(i.key, i.value) for i in await kv.range("a/")] == [("a/1", "eins"), ("a/2", "two")]
        result = await kv.txn(
            [
                {"op": "put", "key": "b", "value": "B"},
                {"op": "cas", "key": "a/2", "expected_version": 7, "value": "no"},
            ]
        )
        assert result["applied"] is False
        assert (await kv.get("b")).value is None, "a failed batch changed nothing"
        result = await kv.txn(
            [
                {"op": "put", "key": "b", "value": "B"},
                {"op": "delete", "key": "a/2"},
            ]
        )
        assert result == {"applied": True, "results": [{"version": 1}, {"existed": True}]}
        assert await kv.delete("a/2") is False
        with pytest.raises(ConfigError, match="ops"):
            await kv.txn([{"op": "frob", "key": "z"}])
    # A stale read from a follower answers from its own state (it catches up quickly).
    async with KvClient([members.servers[follower].url]) as stale:
        await wait_for(lambda: members.servers[follower].state.get("b") == ("B", 1))
        item = await stale.get("b", stale=True)
        assert (item.value, item.version) == ("B", 1)
        assert stale.retries == 0


async def test_a_retried_request_id_is_applied_once(members):
    await members.start()
    await wait_for(lambda: members.leader() == 0)
    async with KvClient(members.urls) as kv:
        assert await kv.put("k", "v", request_id="r-1") == 1
        assert await kv.put("k", "v", request_id="r-1") == 1  # the retry: same result
        assert await kv.put("k", "w") == 2
        assert (await kv.get("k")).version == 2


async def test_snapshots_truncate_the_log_and_a_restarted_member_restores(members):
    members.log_config = LogConfig(tail_poll_ms=50, roll_bytes=2_000)
    members.options = {"snapshot_every_commands": 50}
    for _ in range(2):
        await members.start()
    await wait_for(lambda: members.leader() is not None)
    async with KvClient(members.urls) as kv:
        for i in range(300):
            await kv.put(f"k{i % 40}", f"v{i}")
        leader = members.servers[members.leader()]
        await wait_for(lambda: leader.rsm.snapshots_written >= 3)
        bk = await members.cluster.client(CLIENT)
        named = NamedLogs(bk).log(log_name("s"))
        meta = await named.metadata()
        assert meta.truncated_before is not None, "the log was truncated after a snapshot"
        info = await leader.rsm.snapshots.latest()
        assert info is not None
        assert meta.ledgers[0].ledger_id <= info.position.ledger_id
        # A new member starts from the snapshot and tails the rest.
        newcomer = await members.start()
        await wait_for(lambda: newcomer.rsm.snapshots_restored >= 1)
        await wait_for(lambda: newcomer.state.get("k19") == leader.state.get("k19"))
        assert dict(((k, v) for k, v, _ in newcomer.state.items())) == dict(
            ((k, v) for k, v, _ in leader.state.items())
        )
        assert newcomer.rsm.applied_count < 300, "the newcomer did not replay the whole log"


async def test_histories_across_leader_changes_are_linearizable(members):
    for _ in range(3):
        await members.start()
    await wait_for(lambda: members.leader() is not None)
    rng = random.Random(7)
    loop = asyncio.get_running_loop()
    history: list[Operation] = []
    unknown: list[tuple] = []
    stop = asyncio.Event()

    async def worker(client_id: int) -> None:
        async with KvClient(members.urls, timeout_s=20, pause_s=0.05) as kv:
            while not stop.is_set():
                key = f"k{rng.randrange(3)}"
                kind = rng.choice(["get", "put", "cas", "delete", "get"])
                expected = rng.randrange(3)
                value = f"{client_id}-{rng.random()}"
                inp = {
                    "get": ("get", key),
                    "put": ("put", key, value),
                    "delete": ("delete", key),
                    "cas": ("cas", key, expected, value),
                }[kind]
                call = loop.time()
                try:
                    if kind == "get":
                        item = await kv.get(key)
                        out: object = (item.value, item.version)
                    elif kind == "put":
                        out = await kv.put(key, value)
                    elif kind == "delete":
                        out = await kv.delete(key)
                    else:
                        out = await kv.cas(key, expected, value)
                except StateMachineError:
                    unknown.append(inp)
                    if kind != "get":  # a write's outcome is unknown
                        history.append(Operation(client_id, inp, call, None, math.inf))
                    continue
                history.append(Operation(client_id, inp, call, out, loop.time()))

    workers = [asyncio.create_task(worker(c)) for c in range(4)]
    for _ in range(2):
        await wait_for(lambda: len(history) >= 40)
        leader = members.leader()
        assert leader is not None
        count = len(history)
        await members.servers[leader]._store.expire_session()
        await wait_for(lambda old=leader: members.leader() not in (None, old))
        await wait_for(lambda c=count: len(history) >= c + 40)
    stop.set()
    await asyncio.gather(*workers)
    assert len(history) > 100
    result = check(kv_model(), history)
    assert result.ok, result.failed[:20]


async def test_concurrent_writes_are_coalesced_into_batches(members):
    await members.start()
    await wait_for(lambda: members.leader() == 0)
    rsm = members.servers[0].rsm
    async with KvClient(members.urls) as kv:
        await kv.put("warm", "up")
        before = rsm.applied_count
        versions = await asyncio.gather(*(kv.put(f"c{i % 50}", str(i)) for i in range(200)))
        commands = rsm.applied_count - before
        assert sorted(versions) == sorted([1, 2, 3, 4] * 50), "every put applied once"
        assert 1 <= commands < 50, f"{commands} commands for 200 puts"
        deleted = await asyncio.gather(*(kv.delete(f"c{i}") for i in range(60)))
        assert deleted == [True] * 50 + [False] * 10
    async with KvClient(members.urls, coalesce_writes=False) as kv:
        before = rsm.applied_count
        await asyncio.gather(*(kv.put(f"d{i}", "x") for i in range(20)))
        assert rsm.applied_count - before == 20, "one command per put without coalescing"


async def test_the_blocking_client(members):
    for _ in range(2):
        await members.start()
    await wait_for(lambda: members.leader() is not None)
    urls = members.urls

    def calls() -> list:
        with BlockingKvClient(urls) as kv:
            return [
                kv.put("b/1", "one"),
                kv.cas("b/1", 1, "uno"),
                kv.get("b/1"),
                kv.txn([{"op": "put", "key": "b/2", "value": "two"}]),
                [(i.key, i.value) for i in kv.range("b/")],
                kv.delete("b/2"),
            ]

    put, cas, item, txn, listed, deleted = await asyncio.to_thread(calls)
    assert (put, cas, (item.value, item.version)) == (1, (True, 2), ("uno", 2))
    assert txn == {"applied": True, "results": [{"version": 1}]}
    assert listed == [("b/1", "uno"), ("b/2", "two")]
    assert deleted is True


async def test_coalesced_writes_of_large_values_are_split_by_size(members):
    await members.start()
    await wait_for(lambda: members.leader() == 0)
    async with KvClient(members.urls) as kv:
        big = "x" * 20_000
        versions = await asyncio.gather(*(kv.put(f"big{i}", big) for i in range(100)))
        assert versions == [1] * 100  # 2 MB of writes in flight at once
        with pytest.raises(ConfigError, match="size limit"):
            await kv.put("huge", "y" * 5_000_000)
        assert (await kv.get("big99")).value == big


@pytest.mark.parametrize("lease_s", [0.0, 2.0])
async def test_linearizable_gets_under_the_leader_read_lease(lease_s: float):
    """With a lease, serial gets are answered from the leader's state without a barrier each
    (one append renews it at most every half lease); without one, each waits for a barrier."""
    async with MemoryCluster(3) as cluster:
        members = Members(cluster, LogConfig(tail_poll_ms=50), read_lease_s=lease_s)
        try:
            await members.start()
            await wait_for(lambda: members.leader() is not None)
            server = members.servers[0]
            async with KvClient(members.urls) as kv:
                await kv.put("k", "v")
                before = server.rsm.applied
                for _ in range(20):
                    assert (await kv.get("k")).value == "v"
                status = await kv.status(server.url)
            if lease_s:
                assert status["lease_reads"] == 20
            else:
                assert status["lease_reads"] == 0
                assert server.rsm.applied > before  # barriers were appended
        finally:
            await members.stop_all()


async def test_followers_depose_a_leader_whose_port_refuses_connections():
    """The in-memory store never expires a session by itself: a leader whose HTTP server is
    gone (its process died, as far as a follower can tell) would lead for ever. Followers
    probing its port delete its election node, and one of them leads. A leader that answers
    is never deposed."""
    async with MemoryCluster(3) as cluster:
        members = Members(cluster, LogConfig(tail_poll_ms=50), leader_probe_s=0.05)
        try:
            for _ in range(3):
                await members.start()
            await wait_for(lambda: members.leader() is not None)
            old = members.leader()
            followers = [s for i, s in enumerate(members.servers) if i != old]
            await wait_for(lambda: all(s.detector.probes >= 10 for s in followers))
            assert members.leader() == old
            assert [s.detector.deposed for s in followers] == [0, 0]
            await members.servers[old].aclose()  # its port refuses; its machine still runs
            await wait_for(lambda: members.leader() not in (None, old))
            assert sum(s.detector.deposed for s in followers) >= 1
            assert not members.servers[old].rsm.leading  # it saw its node go, and follows
            async with KvClient([s.url for s in followers]) as kv:
                assert await kv.put("after", "x") == 1
        finally:
            await members.stop_all()
