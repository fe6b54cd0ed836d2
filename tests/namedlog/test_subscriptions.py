"""Durable subscriptions (issue 21) on the in-memory cluster: the pure state, consumers that
resume after what they acknowledged, redelivery after a crash, exclusive consumers fenced,
out-of-order acks, retention by consumption, truncation never skipped silently."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from bkeeper.client.config import ClientConfig
from bkeeper.common.errors import (
    ConfigError,
    LedgerNotFoundError,
    LogError,
    LogNotFoundError,
    LogTruncatedError,
    ProtocolError,
    SubscriptionBusyError,
    SubscriptionFencedError,
    SubscriptionNotFoundError,
)
from bkeeper.namedlog import LATEST, LogConfig, NamedLogs, Position, SubscribeOptions
from bkeeper.namedlog.core import Claim, SubscriptionState, check_subscription_name
from bkeeper.testing.cluster import MemoryCluster
from bkeeper.testing.virtual_time import on_virtual_time

FAST = ClientConfig(
    add_timeout_ms=500, read_timeout_ms=500, long_poll_timeout_ms=200, explicit_lac_interval_ms=20
)
SMALL = LogConfig(roll_bytes=400, tail_poll_ms=100)
TINY = LogConfig(roll_bytes=40, tail_poll_ms=100)
P = Position


# -- the state (pure) ------------------------------------------------------------------------
def test_cumulative_and_individual_acks_merge_into_the_mark_and_runs() -> None:
    state = SubscriptionState(1, P(5, 0))
    assert state.resume_from == P(5, 0)
    state = state.with_acks(None, [P(5, 2), P(5, 3), P(6, 0)])
    assert (state.mark, state.acked) == (None, ((5, 2, 3), (6, 0, 0)))
    assert state.is_acked(P(5, 3)) and not state.is_acked(P(5, 1))
    state = state.with_acks(None, [P(5, 0)])  # from the very start: a mark
    assert (state.mark, state.acked) == (P(5, 0), ((5, 2, 3), (6, 0, 0)))
    state = state.with_acks(None, [P(5, 1)])  # closes the gap: the run joins the mark
    assert (state.mark, state.acked) == (P(5, 3), ((6, 0, 0),))
    assert state.resume_from == P(5, 4)
    state = state.with_acks(P(6, 5), [])
    assert (state.mark, state.acked) == (P(6, 5), ())
    assert state.with_acks(P(5, 9), []).mark == P(6, 5), "the mark never goes back"


def test_the_state_round_trips_and_bad_json_is_refused() -> None:
    state = SubscriptionState(7, P(1, 2), P(3, 4), ((3, 6, 9),), epoch=2, owner="c1")
    assert SubscriptionState.decode(state.encode()) == state
    with pytest.raises(ProtocolError, match="subscription is unreadable"):
        SubscriptionState.decode(b'{"format":1}')
    with pytest.raises(ProtocolError, match="malformed"):
        SubscriptionState.decode(b'{"format":1,"ctime_ms":1,"start":[1,0],"acked":[[1,5,2]]}')
    with pytest.raises(ConfigError, match="subscription name 'a/b'"):
        check_subscription_name("a/b")


def test_too_many_runs_out_of_order_are_refused() -> None:
    state = SubscriptionState(1, P(1, 0))
    with pytest.raises(LogError, match="acknowledge cumulatively"):
        state.with_acks(None, [P(1, e) for e in range(2, 40_000, 2)])


# -- consumers -------------------------------------------------------------------------------
async def filled(cluster: MemoryCluster, records: int, config: LogConfig = SMALL):
    logs = NamedLogs(await cluster.client(FAST), config)
    named = await logs.create("events")
    writer = await named.open_writer()
    positions = [await writer.append(b"r%03d" % i) for i in range(records)]
    return logs, named, writer, positions


async def take(consumer, count: int) -> list:
    records = []
    for _ in range(count):
        record = await consumer.receive(10.0)
        assert record is not None, f"only {len(records)} of {count} records"
        records.append(record)
    return records


@on_virtual_time
async def test_a_consumer_resumes_after_what_it_acknowledged() -> None:
    async with MemoryCluster(3) as cluster:
        _logs, named, _writer, positions = await filled(cluster, 10)
        consumer = await named.subscribe("s")
        got = await take(consumer, 4)
        assert [r.payload for r in got] == [b"r000", b"r001", b"r002", b"r003"]
        consumer.ack(got[2].position)
        await consumer.close()
        again = await named.subscribe("s")
        assert (await again.receive(10.0)).payload == b"r003"
        assert (await named.subscriptions())["s"].mark == positions[2]
        await again.close()


@on_virtual_time
async def test_a_consumer_killed_between_read_and_ack_gets_its_records_again() -> None:
    async with MemoryCluster(3) as cluster:
        _logs, named, _writer, _ = await filled(cluster, 6)
        other = NamedLogs(await cluster.client(FAST), SMALL).log("events")
        dying = await other.subscribe("s", ack_flush_ms=60_000)
        got = await take(dying, 3)
        dying.ack(got[0].position)
        await dying.flush()  # r000 acknowledged, durably
        dying.ack(got[2].position)  # gathered, never flushed: lost with the process
        await other.logs.bk.cluster.store.expire_session()  # the process is gone
        successor = await named.subscribe("s", wait_s=10.0)
        assert [r.payload for r in await take(successor, 5)] == [
            b"r001", b"r002", b"r003", b"r004", b"r005",
        ]  # fmt: skip
        await successor.close()


@on_virtual_time
async def test_two_consumers_race_for_an_exclusive_subscription() -> None:
    async with MemoryCluster(3) as cluster:
        _logs, named, _writer, _ = await filled(cluster, 4)
        first_logs = NamedLogs(await cluster.client(FAST), SMALL)
        first = await first_logs.log("events").subscribe("s", consumer_id="first")
        with pytest.raises(SubscriptionBusyError, match="held by consumer 'first'"):
            await named.subscribe("s", consumer_id="second")
        standby = asyncio.ensure_future(named.subscribe("s", consumer_id="second", wait_s=None))
        await asyncio.sleep(0.1)
        assert not standby.done(), "the standby waits while the first holds it"
        got = await take(first, 2)
        await first_logs.bk.cluster.store.expire_session()  # paused past its session
        second = await asyncio.wait_for(standby, 10.0)
        assert second.epoch == first.epoch + 1
        first.ack(got[1].position)
        with pytest.raises(SubscriptionFencedError, match="taken over by consumer 'second'"):
            await first.flush()
        assert (await named.subscriptions())["s"].mark is None, "the loser's ack was refused"
        assert [r.payload for r in await take(second, 4)] == [b"r000", b"r001", b"r002", b"r003"]
        await second.close()


@on_virtual_time
async def test_records_acknowledged_out_of_order_are_not_delivered_again() -> None:
    async with MemoryCluster(3) as cluster:
        _logs, named, _writer, _ = await filled(cluster, 6)
        consumer = await named.subscribe("s")
        got = await take(consumer, 5)
        for index in (0, 1, 3):
            consumer.ack_individual(got[index].position)
        await consumer.close()
        state = (await named.subscriptions())["s"]
        assert state.mark == got[1].position
        assert state.acked == ((got[3].position.ledger_id, got[3].position.entry_id,
                                got[3].position.entry_id),)  # fmt: skip
        again = await named.subscribe("s")
        assert [r.payload for r in await take(again, 3)] == [b"r002", b"r004", b"r005"]
        await again.close()


@on_virtual_time
async def test_a_subscription_created_mid_log_starts_there() -> None:
    async with MemoryCluster(3) as cluster:
        _logs, named, writer, _ = await filled(cluster, 3)
        consumer = await named.subscribe("late", LATEST)
        await writer.append(b"after")
        assert (await consumer.receive(10.0)).payload == b"after"
        await consumer.close()


@on_virtual_time
async def test_retention_never_deletes_what_a_subscription_has_not_consumed() -> None:
    config = LogConfig(roll_bytes=200, tail_poll_ms=100, retention_consumed=True)
    async with MemoryCluster(3) as cluster:
        logs, named, writer, _ = await filled(cluster, 0, config)
        slow = await named.subscribe("slow")
        fast = await named.subscribe("fast")
        positions = [await writer.append(b"x%03d" % i + b"." * 60) for i in range(40)]
        assert len((await named.metadata()).ledgers) > 4
        fast_records = await take(fast, 40)
        fast.ack(fast_records[-1].position)
        await fast.flush()
        await writer.append(b"roll" + b"." * 200)  # rolls: retention runs
        await writer.append(b"roll" + b"." * 200)
        first = (await named.metadata()).ledgers[0].ledger_id
        assert first <= positions[0].ledger_id, "slow has consumed nothing: all kept"
        slow_records = await take(slow, 20)
        slow.ack(slow_records[-1].position)
        await slow.flush()
        await writer.append(b"roll" + b"." * 200)
        await writer.append(b"roll" + b"." * 200)
        kept = (await named.metadata()).ledgers[0].ledger_id
        assert kept == slow_records[-1].position.ledger_id, "consumed ledgers deleted"
        assert [r.payload[:4] for r in await take(slow, 20)] == [
            b"x%03d" % i for i in range(20, 40)
        ]
        await slow.close()
        await fast.close()
        await logs.delete("events")
        assert await named._subscriptions().names("events") == []


@on_virtual_time
async def test_a_subscription_behind_a_truncation_is_told_never_skipped() -> None:
    async with MemoryCluster(3) as cluster:
        _logs, named, writer, positions = await filled(cluster, 0)
        consumer = await named.subscribe("s")
        await consumer.close()
        positions = [await writer.append(b"y%03d" % i + b"." * 60) for i in range(20)]
        await named.truncate(positions[-1])
        with pytest.raises(LogTruncatedError, match="are gone"):
            await named.subscribe("s")
        skipping = await named.subscribe("s", skip_truncated=True)
        record = await skipping.receive(10.0)
        assert record is not None and record.position.ledger_id == positions[-1].ledger_id
        await skipping.close()
        await named.unsubscribe("s")
        with pytest.raises(SubscriptionNotFoundError):
            await named.unsubscribe("s")


@on_virtual_time
async def test_acks_past_what_was_delivered_are_refused() -> None:
    async with MemoryCluster(3) as cluster:
        _logs, named, _writer, positions = await filled(cluster, 4)
        consumer = await named.subscribe("s")
        with pytest.raises(ConfigError, match="past the last record delivered"):
            consumer.ack(positions[0])
        got = await take(consumer, 2)
        consumer.ack(got[1].position)
        with pytest.raises(ConfigError, match="past the last record delivered"):
            consumer.ack_individual(positions[3])
        with pytest.raises(ConfigError, match="past the last record of log 'events'"):
            await consumer.ack_up_to(Position(positions[3].ledger_id + 5, 0))
        await consumer.ack_up_to(positions[3])
        assert (await named.subscriptions())["s"].mark == positions[3]
        await consumer.close()
        with pytest.raises(SubscriptionNotFoundError):
            await named.subscribe("typo", create=False)
        with pytest.raises(LogNotFoundError):
            await NamedLogs(named.logs.bk).log("nolog").subscribe("s")


# -- across ledgers, and shared subscriptions --------------------------------------------------
def test_the_mark_moves_from_a_sealed_ledgers_last_record_to_the_next_ledger() -> None:
    state = SubscriptionState(1, P(5, 0), mark=P(5, 9))
    moved = state.with_acks(None, [P(7, 0), P(7, 1)], {5: (9, 7)})
    assert (moved.mark, moved.acked) == (P(7, 1), ())
    stuck = state.with_acks(None, [P(7, 0)], {5: (10, 7)})  # 5 holds more than the mark
    assert (stuck.mark, stuck.acked) == (P(5, 9), ((7, 0, 0),))


def test_claims_round_trip_and_are_dropped_once_acknowledged() -> None:
    state = SubscriptionState(1, P(5, 0), mode="shared")
    claim = Claim("a", 5, 0, 9, 1_000)
    state = state.with_claim(claim)
    assert state.dispatch_from == P(5, 10) and state.claims == (claim,)
    assert SubscriptionState.decode(state.encode()) == state
    taken = state.with_claim_taken(claim, Claim("b", 5, 0, 9, 2_000))
    assert taken.claims[0].consumer == "b"
    done = taken.with_acks(None, [P(5, e) for e in range(10)])
    assert (done.mark, done.claims) == (P(5, 9), ())


def test_a_claim_expires_after_its_time_unless_every_record_of_it_is_acknowledged() -> None:
    state = SubscriptionState(1, P(5, 0), mode="shared")
    first, second = Claim("a", 5, 0, 4, 1_000), Claim("b", 5, 5, 9, 2_000)
    state = state.with_claim(first).with_claim(second)
    assert state.expired_claims(1_000) == []
    assert state.expired_claims(1_001) == [first]
    assert state.expired_claims(2_001) == [first, second]
    # the claims stay (with_acks would drop a done one): expired_claims must skip it itself
    acked = dataclasses.replace(state, mark=P(5, 4))
    assert acked.expired_claims(5_000) == [second]


@on_virtual_time
async def test_shared_consumers_each_get_distinct_records_and_all_are_consumed() -> None:
    async with MemoryCluster(3) as cluster:
        _logs, named, _writer, positions = await filled(cluster, 30, TINY)
        assert len({p.ledger_id for p in positions}) >= 3, "records in several ledgers"
        a = await named.subscribe("work", mode="shared", consumer_id="a", claim_records=4)
        b = (
            await NamedLogs(await cluster.client(FAST), SMALL)
            .log("events")
            .subscribe("work", mode="shared", consumer_id="b", claim_records=4)
        )
        seen: dict[str, list] = {"a": [], "b": []}

        async def work(consumer, name: str) -> None:
            while (record := await consumer.receive(1.0)) is not None:
                seen[name].append(record.position)
                await asyncio.sleep(0.02)  # the work each record takes
                consumer.ack_individual(record.position)

        await asyncio.gather(work(a, "a"), work(b, "b"))
        await a.close()
        await b.close()
        assert seen["a"] and seen["b"], seen
        assert sorted(seen["a"] + seen["b"]) == positions, "each record once"
        state = (await named.subscriptions())["work"]
        assert (state.mark, state.acked, state.claims) == (positions[-1], (), ())
        with pytest.raises(ConfigError, match="is shared, not exclusive"):
            await named.subscribe("work")
        with pytest.raises(ConfigError, match="acknowledge each record"):
            a.ack(positions[0])


@on_virtual_time
async def test_a_shared_claim_not_acknowledged_in_time_goes_to_another_consumer() -> None:
    async with MemoryCluster(3) as cluster:
        _logs, named, _writer, positions = await filled(cluster, 6)
        slow = await named.subscribe("work", mode="shared", consumer_id="slow",
                                     ack_timeout_ms=300, claim_records=3)  # fmt: skip
        got = [await slow.receive(5.0) for _ in range(3)]
        assert [r.position for r in got] == positions[:3]
        slow.ack_individual(got[0].position)
        await slow.flush()
        other = await named.subscribe("work", mode="shared", consumer_id="other",
                                      ack_timeout_ms=300, claim_records=3)  # fmt: skip
        later = [await other.receive(5.0) for _ in range(5)]
        assert [r.position for r in later] == [*positions[3:6], *positions[1:3]]
        for record in later:
            other.ack_individual(record.position)
        await other.close()
        await slow.close()
        assert (await named.subscriptions())["work"].mark == positions[-1]


# -- acks in a cursor ledger -----------------------------------------------------------------
@on_virtual_time
async def test_acks_in_a_cursor_ledger_survive_and_the_old_consumer_is_fenced() -> None:
    async with MemoryCluster(3) as cluster:
        _logs, named, _writer, positions = await filled(cluster, 8)
        store = named._subscriptions()
        first_logs = NamedLogs(await cluster.client(FAST), SMALL)
        first = await first_logs.log("events").subscribe(
            "s", ack_store="ledger", ack_flush_ms=60_000
        )
        node, _ = await store.read("events", "s")
        assert node.cursor is not None
        cursor = node.cursor
        got = await take(first, 3)
        first.ack(got[2].position)
        await first.flush()
        node_after, _ = await store.read("events", "s")
        assert node_after.mark is None, "the flush went to the cursor ledger, not the node"
        for _ in range(500):  # the listing reads the cursor's last confirmed entry
            if (await named.subscriptions())["s"].mark == positions[2]:
                break
            await asyncio.sleep(0.01)
        assert (await named.subscriptions())["s"].mark == positions[2]
        await first_logs.bk.cluster.store.expire_session()  # gone without closing
        second = await named.subscribe("s", ack_store="ledger", wait_s=10.0)
        assert (await second.receive(10.0)).payload == b"r003"
        got = await take(first, 1)  # the old consumer still reads...
        first.ack(got[0].position)
        with pytest.raises(SubscriptionFencedError, match="fenced this consumer's cursor ledger"):
            await first.flush()  # ...but its acks are refused
        second.ack(positions[3])
        await second.close()
        node, _ = await store.read("events", "s")
        assert (node.cursor, node.mark) == (None, positions[3]), "the state back in the node"
        with pytest.raises(LedgerNotFoundError):
            await named.logs.bk.ledger_metadata(cursor)
        third = await named.subscribe("s")  # and a metadata-acking consumer carries on
        assert (await third.receive(10.0)).payload == b"r004"
        await third.close()
        with pytest.raises(ConfigError, match="exclusive subscriptions only"):
            await named.subscribe("w", mode="shared", ack_store="ledger")


@on_virtual_time
async def test_subscribe_options_come_as_one_dataclass_or_as_keywords_over_it() -> None:
    async with MemoryCluster(3) as cluster:
        _logs, named, _writer, positions = await filled(cluster, 2)
        with pytest.raises(ConfigError, match="subscribe: no option 'ack_flush'"):
            await named.subscribe("s", ack_flush=5)
        with pytest.raises(ConfigError, match="ack_flush_ms: must be at least 1"):
            SubscribeOptions(ack_flush_ms=0)
        options = SubscribeOptions(consumer_id="c1", mode="shared")
        consumer = await named.subscribe("s", options=options, claim_records=1)
        record = await consumer.receive(5.0)
        assert record is not None and record.position == positions[0]
        assert consumer.consumer_id == "c1"
        assert (await named.subscriptions())["s"].mode == "shared"
        await consumer.close()
