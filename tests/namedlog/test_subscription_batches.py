"""Subscriptions on logs of record batches: the pure state with batch indexes (partly
acknowledged batches, cumulative acks inside a batch, the mark across batches and sealed
ledgers), and consumers (exclusive, shared) on the in-memory cluster delivering and resuming
record by record."""

from __future__ import annotations

import asyncio

import pytest

from bkeeper.client.config import ClientConfig
from bkeeper.common.errors import ProtocolError
from bkeeper.namedlog import LogConfig, NamedLogs, Position, commit_before, ensure_subscription
from bkeeper.namedlog.core import Claim, SubscriptionState
from bkeeper.testing.cluster import MemoryCluster
from bkeeper.testing.virtual_time import on_virtual_time

FAST = ClientConfig(
    add_timeout_ms=500, read_timeout_ms=500, long_poll_timeout_ms=200, explicit_lac_interval_ms=20
)
BATCHED = LogConfig(batching=True, batch_max_records=5, linger_ms=0, tail_poll_ms=100)
P = Position


# -- the state (pure) ------------------------------------------------------------------------
def test_a_cumulative_ack_inside_a_batch_keeps_the_rest_of_it() -> None:
    state = SubscriptionState(1, P(5, 0))
    counts = {(5, 0): 4, (5, 1): 4}
    inside = state.with_acks(P(5, 1, 2), [], counts=counts)
    assert (inside.mark, inside.partial) == (P(5, 0), ((5, 1, 4, ((0, 2),)),))
    assert inside.resume_from == P(5, 1, 3)
    assert inside.is_acked(P(5, 1, 2)) and not inside.is_acked(P(5, 1, 3))
    whole = inside.with_acks(P(5, 1, 3), [], counts=counts)
    assert (whole.mark, whole.partial, whole.resume_from) == (P(5, 1), (), P(5, 2))
    first = state.with_acks(P(5, 0, 0), [], counts=counts)  # record 0 of entry 0: mark before
    assert (first.mark, first.resume_from) == (P(5, -1), P(5, 0, 1))


def test_records_acked_out_of_order_in_batches_join_the_mark_when_complete() -> None:
    counts = {(5, 0): 3, (5, 1): 3}
    state = SubscriptionState(1, P(5, 0)).with_acks(None, [P(5, 1, 1), P(5, 0, 2)], counts=counts)
    assert state.mark is None
    assert state.partial == ((5, 0, 3, ((2, 2),)), (5, 1, 3, ((1, 1),)))
    state = state.with_acks(None, [P(5, 0, 0), P(5, 0, 1)], counts=counts)
    assert (state.mark, state.partial) == (P(5, 0), ((5, 1, 3, ((1, 1),)),))
    state = state.with_acks(None, [P(5, 1, 0), P(5, 1, 2)], counts=counts)
    assert (state.mark, state.partial, state.acked) == (P(5, 1), (), ())
    assert SubscriptionState.decode(state.encode()) == state


def test_the_mark_moves_over_a_batch_completing_a_sealed_ledger_into_the_next() -> None:
    counts = {(5, 9): 2, (7, 0): 2}
    state = SubscriptionState(1, P(5, 0), mark=P(5, 8))
    state = state.with_acks(None, [P(7, 0, 0), P(7, 0, 1), P(5, 9, 1)], {5: (9, 7)}, counts)
    assert (state.mark, state.acked, state.partial) == (
        P(5, 8),
        ((7, 0, 0),),
        ((5, 9, 2, ((1, 1),)),),
    )
    state = state.with_acks(None, [P(5, 9, 0)], {5: (9, 7)}, counts)
    assert (state.mark, state.acked, state.partial) == (P(7, 0), (), ())


def test_a_start_inside_a_batch_counts_the_records_before_it_as_not_wanted() -> None:
    counts = {(5, 3): 4}
    state = SubscriptionState(1, P(5, 3, 2))
    assert state.resume_from == P(5, 3, 2)
    state = state.with_acks(None, [P(5, 3, 2), P(5, 3, 3)], counts=counts)
    assert (state.mark, state.partial) == (P(5, 3), ())


def test_partial_batches_round_trip_and_malformed_ones_are_refused() -> None:
    state = SubscriptionState(1, P(1, 2, 3), P(1, 1), partial=((1, 2, 9, ((0, 3), (5, 5))),))
    assert SubscriptionState.decode(state.encode()) == state
    assert b'"start":[1,2,3]' in state.encode() and b'"mark":[1,1]' in state.encode()
    with pytest.raises(ProtocolError, match="partly acknowledged batch is malformed"):
        SubscriptionState.decode(
            b'{"format":1,"ctime_ms":1,"start":[1,0],"partial":[[1,2,3,[[0,5]]]]}'
        )


def test_a_claim_of_batches_is_done_once_all_their_records_are() -> None:
    counts = {(5, 0): 2, (5, 1): 2}
    state = SubscriptionState(1, P(5, 0), mode="shared").with_claim(Claim("a", 5, 0, 1, 9))
    state = state.with_acks(None, [P(5, 0, 0), P(5, 0, 1), P(5, 1, 0)], counts=counts)
    assert len(state.claims) == 1 and state.mark == P(5, 0)
    state = state.with_acks(None, [P(5, 1, 1)], counts=counts)
    assert (state.claims, state.mark) == ((), P(5, 1))


# -- consumers -------------------------------------------------------------------------------
async def batched_log(cluster: MemoryCluster, records: int, config: LogConfig = BATCHED):
    logs = NamedLogs(await cluster.client(FAST), config)
    named = await logs.create("events")
    writer = await named.open_writer()
    positions = await writer.append_many([b"r%03d" % i for i in range(records)])
    return logs, named, writer, positions


async def take(consumer, count: int) -> list:
    records = []
    for _ in range(count):
        record = await consumer.receive(10.0)
        assert record is not None, f"only {len(records)} of {count} records"
        records.append(record)
    return records


@on_virtual_time
async def test_a_consumer_resumes_inside_a_batch_after_what_it_acknowledged() -> None:
    async with MemoryCluster(3) as cluster:
        _logs, named, writer, positions = await batched_log(cluster, 12)
        await writer.close()
        consumer = await named.subscribe("s")
        got = await take(consumer, 8)
        assert [r.position for r in got] == positions[:8]
        consumer.ack(got[6].position)  # record 1 of the second batch
        await consumer.close()
        state = (await named.subscriptions())["s"]
        assert (state.mark, state.resume_from) == (P(positions[0].ledger_id, 0), positions[7])
        again = await named.subscribe("s")
        assert [r.position for r in await take(again, 5)] == positions[7:12]
        again.ack(positions[11])
        await again.close()
        state = (await named.subscriptions())["s"]
        assert (state.mark, state.partial) == (P(positions[0].ledger_id, 2), ())


@on_virtual_time
async def test_records_acked_out_of_order_inside_batches_are_not_delivered_again() -> None:
    async with MemoryCluster(3) as cluster:
        _logs, named, writer, positions = await batched_log(cluster, 10)
        await writer.close()
        consumer = await named.subscribe("s")
        got = await take(consumer, 10)
        for i in (1, 3, 6, 7, 8, 9):
            consumer.ack_individual(got[i].position)
        await consumer.close()
        again = await named.subscribe("s")
        redelivered = [r.position for r in await take(again, 4)]
        assert redelivered == [positions[i] for i in (0, 2, 4, 5)]
        assert await again.receive(0.3) is None
        for position in redelivered:
            again.ack_individual(position)
        await again.close()
        state = (await named.subscriptions())["s"]
        assert (state.mark, state.acked, state.partial) == (P(positions[0].ledger_id, 1), (), ())


@on_virtual_time
async def test_an_operator_ack_inside_a_batch_reads_the_batch_size() -> None:
    async with MemoryCluster(3) as cluster:
        _logs, named, writer, positions = await batched_log(cluster, 10)
        await writer.close()
        consumer = await named.subscribe("s")
        await consumer.ack_up_to(positions[7])  # never delivered: its batch is read
        state = (await named.subscriptions())["s"]
        assert (state.mark, state.partial) == (
            P(positions[0].ledger_id, 0),
            ((positions[0].ledger_id, 1, 5, ((0, 2),)),),
        )
        await consumer.close()
        again = await named.subscribe("s")
        assert (await again.receive(10.0)).position == positions[8]
        await again.close()


@on_virtual_time
async def test_the_mark_crosses_batches_and_rolled_ledgers_and_retention_follows() -> None:
    config = LogConfig(
        batching=True, batch_max_records=4, linger_ms=0, roll_bytes=150, retention_consumed=True
    )
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST), config)
        named = await logs.create("events")
        writer = await named.open_writer()
        consumer = await named.subscribe("s")
        positions = []
        for round_ in range(6):
            positions += await writer.append_many([b"x%02d-%d" % (round_, i) for i in range(8)])
        ledgers = sorted({p.ledger_id for p in positions})
        assert len(ledgers) >= 3, "rolled"
        got = await take(consumer, 48)
        assert [r.position for r in got] == positions
        for record in reversed(got):  # all out of order: only completions move the mark
            consumer.ack_individual(record.position)
        await consumer.flush()
        state = (await named.subscriptions())["s"]
        last = positions[-1]
        assert (state.mark, state.acked, state.partial) == (
            P(last.ledger_id, last.entry_id),
            (),
            (),
        )
        await writer.append_many([b"roll" * 50])  # rolls: retention runs
        await writer.append_many([b"roll" * 50])
        first = (await named.metadata()).ledgers[0].ledger_id
        assert first > ledgers[0], "consumed ledgers deleted"
        await consumer.close()
        await writer.close()


@on_virtual_time
async def test_shared_consumers_share_batches_and_each_record_goes_to_one() -> None:
    async with MemoryCluster(3) as cluster:
        _logs, named, writer, positions = await batched_log(cluster, 40)
        await writer.close()
        a = await named.subscribe("work", mode="shared", consumer_id="a", claim_records=3)
        b = (
            await NamedLogs(await cluster.client(FAST), BATCHED)
            .log("events")
            .subscribe("work", mode="shared", consumer_id="b", claim_records=3)
        )
        seen: dict[str, list] = {"a": [], "b": []}

        async def work(consumer, name: str) -> None:
            while (record := await consumer.receive(1.0)) is not None:
                seen[name].append(record.position)
                await asyncio.sleep(0.01)  # the work each record takes
                consumer.ack_individual(record.position)

        await asyncio.gather(work(a, "a"), work(b, "b"))
        await a.close()
        await b.close()
        assert seen["a"] and seen["b"], seen
        assert sorted(seen["a"] + seen["b"]) == positions, "each record once"
        # Claims are of whole batches: each consumer got all 5 records of the batches it had.
        for got in seen.values():
            batches = {p.entry_id for p in got}
            assert sorted(got) == [p for p in positions if p.entry_id in batches]
        state = (await named.subscriptions())["work"]
        last = positions[-1]
        assert (state.mark, state.acked, state.partial, state.claims) == (
            P(last.ledger_id, last.entry_id),
            (),
            (),
            (),
        )


@on_virtual_time
async def test_commit_before_a_position_inside_a_batch() -> None:
    async with MemoryCluster(3) as cluster:
        _logs, named, writer, positions = await batched_log(cluster, 10)
        await writer.close()
        await ensure_subscription(named, "spark")
        state = await commit_before(named, "spark", positions[7])
        assert state.resume_from == positions[7]
        state = await commit_before(named, "spark", positions[5])  # an entry's start
        assert state.resume_from == positions[7], "never back"
        state = await commit_before(named, "spark", P(positions[0].ledger_id, 2))
        assert (state.mark, state.partial) == (P(positions[0].ledger_id, 1), ())


@on_virtual_time
async def test_a_log_of_format_1_entries_then_batches_is_consumed_in_order() -> None:
    async with MemoryCluster(3) as cluster:
        client = await cluster.client(FAST)
        named = await NamedLogs(client, LogConfig(tail_poll_ms=100)).create("events")
        old = await named.open_writer()
        old_positions = [await old.append(b"old%d" % i) for i in range(3)]
        await old.close()
        writer = await NamedLogs(client, BATCHED).log("events").open_writer()
        new_positions = await writer.append_many([b"new%d" % i for i in range(7)])
        await writer.close()
        consumer = await named.subscribe("s")
        got = await take(consumer, 10)
        assert [r.position for r in got] == old_positions + new_positions
        consumer.ack(got[4].position)
        await consumer.close()
        again = await named.subscribe("s")
        assert (await again.receive(10.0)).position == new_positions[2]
        await again.close()


@on_virtual_time
async def test_acks_inside_batches_kept_in_a_cursor_ledger() -> None:
    async with MemoryCluster(3) as cluster:
        _logs, named, writer, positions = await batched_log(cluster, 12)
        await writer.close()
        first_logs = NamedLogs(await cluster.client(FAST), BATCHED)
        first = await first_logs.log("events").subscribe(
            "s", ack_store="ledger", ack_flush_ms=60_000
        )
        got = await take(first, 9)
        first.ack(got[2].position)
        first.ack_individual(got[8].position)
        await first.flush()
        node = (await named.subscriptions())["s"]  # read from the cursor ledger
        ledger = positions[0].ledger_id
        assert (node.mark, node.partial) == (
            P(ledger, -1),
            ((ledger, 0, 5, ((0, 2),)), (ledger, 1, 5, ((3, 3),))),
        )
        await first_logs.bk.cluster.store.expire_session()  # gone without closing
        second = await named.subscribe("s", ack_store="ledger", wait_s=10.0)
        again = [r.position for r in await take(second, 8)]
        assert again == [p for i, p in enumerate(positions) if i >= 3 and i != 8]
        await second.close()
