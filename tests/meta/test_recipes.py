"""Conformance of the recipes built on the port: id generation, lock, leader election."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from bkeeper.meta.election import ElectionConfig, LeaderElection
from bkeeper.meta.idgen import IdGeneratorConfig, LedgerIdGenerator
from bkeeper.meta.layout import SHORT_LEDGER_ID_LIMIT, ledger_path
from bkeeper.meta.lock import Lock
from bkeeper.meta.store import NodeStore, basename, join_path

OpenStore = Callable[..., Awaitable[NodeStore]]

pytestmark = pytest.mark.asyncio(loop_scope="session")

WAIT_S = 10.0


async def test_generated_ids_are_unique_and_increasing(open_store: OpenStore, root: str) -> None:
    generators = [LedgerIdGenerator(await open_store(), root) for _ in range(2)]
    ids = [await generators[i % 2].generate() for i in range(10)]
    assert ids == sorted(set(ids))
    assert ids[0] >= 0 and ids[-1] < SHORT_LEDGER_ID_LIMIT
    store = await open_store()
    assert await store.children(join_path(root, "idgen")) == []  # every ID- node was deleted


async def test_concurrent_ids_are_unique(open_store: OpenStore, root: str) -> None:
    generators = [LedgerIdGenerator(await open_store(), root) for _ in range(3)]
    ids = await asyncio.gather(*(g.generate() for g in generators for _ in range(5)))
    assert len(set(ids)) == 15


async def test_ids_switch_to_64_bits_when_31_bits_run_out(open_store: OpenStore, root: str) -> None:
    # A tiny short_id_limit stands in for Integer.MAX_VALUE.
    config = IdGeneratorConfig(short_id_limit=3)
    first, other = await open_store(), await open_store()
    generator = LedgerIdGenerator(first, root, config)
    ids = [await generator.generate() for _ in range(8)]
    assert ids[:3] == [0, 1, 2]
    high = [i for i in ids if i > 2]
    assert high == sorted(set(high))
    assert high[0] == (1 << 32) | 0  # HOB-0000000001, low sequence 0
    assert any(i >> 32 == 2 for i in high)  # the low half ran out too: HOB-0000000002
    assert ledger_path("/ledgers", high[0]) == "/ledgers/000/0000/0042/9496/L7296"
    # A fresh client sees the HOB- directories and never goes back to 31-bit ids.
    assert await LedgerIdGenerator(other, root, config).generate() > max(ids)
    names = await first.children(join_path(root, "idgen-long"))
    assert names[:2] == ["HOB-0000000001", "HOB-0000000002"]


async def test_lock_is_exclusive_and_passes_on(open_store: OpenStore, root: str) -> None:
    directory = join_path(root, "lock")
    a = Lock(await open_store(), directory, owner=b"a")
    b = Lock(await open_store(), directory, owner=b"b")
    await a.acquire()
    with pytest.raises(TimeoutError):
        await b.acquire(timeout_s=0.3)
    assert await b.holder() == b"a"
    waiter = asyncio.ensure_future(b.acquire(timeout_s=WAIT_S))
    await asyncio.sleep(0.1)
    assert not waiter.done()
    await a.release()
    await waiter
    assert b.held and not a.held and await a.holder() == b"b"
    await b.release()
    assert await a.holder() is None


async def test_lock_is_lost_when_the_session_expires(open_store: OpenStore, root: str) -> None:
    directory = join_path(root, "lock")
    holder_store = await open_store()
    holder = Lock(holder_store, directory, owner=b"a")
    other = Lock(await open_store(), directory, owner=b"b")
    await holder.acquire()
    lost = asyncio.ensure_future(holder.wait_lost())
    taken = asyncio.ensure_future(other.acquire(timeout_s=WAIT_S))
    await holder_store.expire_session()
    await asyncio.wait_for(lost, WAIT_S)
    await taken
    assert not holder.held and other.held


async def test_many_contenders_hold_the_lock_one_at_a_time(
    open_store: OpenStore, root: str
) -> None:
    directory = join_path(root, "lock")
    inside, most = 0, 0

    async def contend(store: NodeStore) -> None:
        nonlocal inside, most
        async with Lock(store, directory):
            inside += 1
            most = max(most, inside)
            await asyncio.sleep(0.01)
            inside -= 1

    stores = [await open_store() for _ in range(4)]
    await asyncio.wait_for(asyncio.gather(*(contend(s) for s in stores * 2)), WAIT_S)
    assert most == 1


async def test_election_has_one_leader_and_moves_on_expiry(
    open_store: OpenStore, root: str
) -> None:
    directory = join_path(root, "election")
    stores = [await open_store() for _ in range(3)]
    config = ElectionConfig(requeue_delay_ms=10)
    elections = [
        LeaderElection(s, directory, f"candidate-{i}".encode(), config=config)
        for i, s in enumerate(stores)
    ]
    for election in elections:
        await election.start()
    try:
        first = await _the_leader(elections)
        assert await first.leader() == b"candidate-%d" % elections.index(first)
        assert first.term == 1

        await stores[elections.index(first)].expire_session()
        await first.wait_leadership_lost(WAIT_S)
        second = await _the_leader(elections, not_this=first)
        assert second is not first
        assert await second.leader() == b"candidate-%d" % elections.index(second)

        # The old leader queued again: it leads once the others have gone.
        for election in elections:
            if election is not first:
                await election.aclose()
        assert await first.wait_leadership(WAIT_S) == 2
    finally:
        for election in elections:
            await election.aclose()


async def _the_leader(
    elections: list[LeaderElection], not_this: LeaderElection | None = None
) -> LeaderElection:
    """Wait until exactly one election leads (and it is not ``not_this``); return it."""
    async with asyncio.timeout(WAIT_S):
        while True:
            leaders = [e for e in elections if e.is_leader]
            if len(leaders) == 1 and leaders[0] is not not_this:
                await asyncio.sleep(0.1)  # and it stays alone
                if [e for e in elections if e.is_leader] == leaders:
                    return leaders[0]
            assert len(leaders) <= 1, "two leaders at once"
            await asyncio.sleep(0.01)


@pytest.mark.parametrize("lost", ["delete", "create"])
async def test_a_node_left_queued_by_its_own_session_does_not_block_it(
    open_store: OpenStore, root: str, monkeypatch: pytest.MonkeyPatch, lost: str
) -> None:
    """A round that ends while the connection is down (ZooKeeper restarted) cannot delete
    its node, and the session lives on: the node stays queued, owned by nobody. The next
    round's node queued behind it, and after the holder left nobody ever held the lock
    (verify seed 50095: no kv member led again after ZooKeeper was killed twice; every
    member named the left-behind node's owner as the leader). Likewise a node whose create
    reached ZooKeeper but whose answer was lost with the connection (nobody knows its name).
    A waiter now deletes the nodes of its own session ahead of its own that no contender
    of its store is queued with."""
    from bkeeper.common.errors import ConnectionLossError

    directory = join_path(root, "lock")
    a = Lock(await open_store(), directory, owner=b"a")
    b_store = await open_store()
    b = Lock(b_store, directory, owner=b"b")
    await a.acquire()
    real_create = b_store.create

    async def disconnected(path: str, version: int = -1) -> None:
        raise ConnectionLossError("disconnected (reconnecting)")

    async def answer_lost(*args: object, **kwargs: object) -> str:
        await real_create(*args, **kwargs)  # type: ignore[arg-type]
        raise ConnectionLossError("disconnected (reconnecting)")

    with monkeypatch.context() as patch:
        if lost == "delete":
            patch.setattr(b_store, "delete", disconnected)
            with pytest.raises(TimeoutError):
                await b.acquire(timeout_s=0.2)  # the round ends; its node stays
        else:
            patch.setattr(b_store, "create", answer_lost)
            with pytest.raises(ConnectionLossError):
                await b.acquire()
    assert len(await b_store.children(directory)) == 2
    waiter = asyncio.ensure_future(b.acquire(timeout_s=WAIT_S))
    await asyncio.sleep(0.2)
    await a.release()
    await asyncio.wait_for(waiter, WAIT_S + 5)
    assert b.held and await a.holder() == b"b"
    assert await b_store.children(directory) == [basename(b.node or "")]
    await b.release()


async def test_a_waiter_whose_watch_event_is_lost_takes_the_lock_anyway(
    open_store: OpenStore, root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After ZooKeeper was killed twice and kv leaders killed (verify seed 60103), no member
    led again: waiters wait on their predecessor's watch, and an event that never comes held
    the queue for good. A waiter now looks at the queue every ``RECHECK_S`` too."""
    from bkeeper.meta import lock as lock_module
    from bkeeper.meta.events import Subscription

    monkeypatch.setattr(lock_module, "RECHECK_S", 0.2, raising=False)
    directory = join_path(root, "lock")
    a = Lock(await open_store(), directory, owner=b"a")
    deaf = await open_store()

    async def never_fires(path: str, *args: object, **kwargs: object) -> Subscription[object]:
        return Subscription(one_shot=True)  # as a watch whose event was lost

    monkeypatch.setattr(deaf, "watch", never_fires)
    b = Lock(deaf, directory, owner=b"b")
    await a.acquire()
    waiter = asyncio.ensure_future(b.acquire(timeout_s=WAIT_S))
    await asyncio.sleep(0.3)
    assert not waiter.done()
    await a.release()
    await asyncio.wait_for(waiter, 5.0)
    assert b.held and await a.holder() == b"b"
    await b.release()
