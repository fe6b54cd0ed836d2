"""Ledger recovery: the pure machine (client.recovery_machine) under random replies and orders, and
its shell (client.ledger_recovery) leaving no request behind."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from bkeeper.client.config import ClientConfig
from bkeeper.client.distribution import write_set
from bkeeper.client.entry import Entry
from bkeeper.client.recovery_machine import Ask, Phase, Question, RecoveryMachine, Reply, ReplyKind
from bkeeper.common.errors import BKeeperError
from bkeeper.meta.ledger_metadata import LedgerMetadata, LedgerState
from bkeeper.testing.cluster import MemoryCluster
from bkeeper.wire.digest import DigestType
from bkeeper.wire.messages import ReadRequest

LEDGER = 7
LIMIT_S = 10.0


def entry(entry_id: int, lac: int = -1) -> Entry:
    return Entry(LEDGER, entry_id, lac, 10 * (entry_id + 1), memoryview(b""))


@settings(max_examples=300, deadline=None)
@given(
    data=st.data(),
    shape=st.sampled_from([(3, 3, 2), (3, 2, 2), (5, 3, 2), (4, 3, 3), (3, 3, 1), (1, 1, 1)]),
    written=st.integers(0, 12),
    batch=st.integers(1, 5),
)
def test_recovery_never_loses_an_acknowledged_entry(
    data: st.DataObject, shape: tuple[int, int, int], written: int, batch: int
) -> None:
    e, qw, qa = shape
    bookies = tuple(f"b{i}" for i in range(e))
    meta = LedgerMetadata.new(bookies, qw, qa, DigestType.CRC32C, b"pw")
    # Which bookies of its write set hold each entry (any subset: adds in flight fail too).
    holders = {
        n: set(data.draw(st.sets(st.sampled_from([bookies[i] for i in write_set(n, e, qw)]))))
        for n in range(written)
    }
    # The writer completed (acknowledged) an entry once it and every lower one had Qa holders.
    on_quorum = {n for n, have in holders.items() if len(have) >= qa}
    prefix = next((n for n in range(written) if n not in on_quorum), written) - 1
    acked = set(range(prefix + 1))
    lacs = {b: data.draw(st.integers(-1, prefix)) for b in bookies}
    machine = RecoveryMachine(LEDGER, meta, batch)
    step = machine.start()
    outstanding: list[tuple[Question, int]] = []
    settled: set[Question] = set()
    rewritten: dict[int, int] = {}
    for _ in range(5_000):
        settled.update(step.settled)
        if step.result is not None or step.error is not None:
            break
        outstanding += [(q, p) for q in step.ask for p in range(len(q.bookies))]
        assert outstanding, "the machine waits for nothing"
        question, position = outstanding.pop(data.draw(st.integers(0, len(outstanding) - 1)))
        bookie = question.bookies[position]
        silent = data.draw(st.booleans().map(lambda b: b and data.draw(st.booleans())))
        if silent:
            reply = Reply(ReplyKind.NONE, detail="timeout")
        elif question.ask is Ask.FENCE:
            reply = Reply(ReplyKind.FOUND, entry(max(lacs[bookie], 0), lacs[bookie]))
        elif question.ask is Ask.READ:
            have = bookie in holders.get(question.entry_id, set())
            reply = (
                Reply(ReplyKind.FOUND, entry(question.entry_id))
                if have
                else Reply(ReplyKind.ABSENT)
            )
        else:
            reply = Reply(ReplyKind.FOUND)
            rewritten[question.entry_id] = rewritten.get(question.entry_id, 0) + 1
        was_settled = question in settled
        step = machine.reply(question, position, reply)
        if was_settled:
            assert step.ask == () and step.settled == () and step.result is None
    else:
        raise AssertionError("recovery did not end")
    if step.error is not None:
        assert machine.phase is Phase.FAILED
        return
    assert machine.phase is Phase.DONE
    last, length = step.result  # type: ignore[misc]
    assert all(n <= last for n in acked), "an acknowledged entry is never cut off"
    assert last < written and length == (10 * (last + 1) if last >= 0 else 0)
    fenced_lac = max(lacs.values())
    for n in range(fenced_lac + 1, last + 1):
        assert rewritten.get(n, 0) >= qa, f"entry {n} re-written to an ack quorum"


async def test_recovery_leaves_no_request_behind() -> None:
    config = ClientConfig(read_timeout_ms=60_000)  # a straggler would wait a minute
    async with MemoryCluster(3) as cluster:
        writer = await cluster.client(config)
        wh = await writer.create_ledger(3, 3, 2, password=b"pw")
        for i in range(5):
            assert await asyncio.wait_for(wh.append(b"%d" % i), LIMIT_S) == i
        silent = cluster.bookies.index(cluster.bookie(wh.ensemble[2]))
        fault = cluster.fault(silent, ReadRequest, drop=True, serve_dropped=False)
        reader = await cluster.client(config)
        tasks_before = asyncio.all_tasks()
        rh = await asyncio.wait_for(reader.open_ledger(wh.ledger_id, b"pw"), LIMIT_S)
        assert rh.metadata.state is LedgerState.CLOSED and rh.metadata.last_entry_id == 4
        assert fault.applied > 0  # the silent bookie was asked, and never answered
        assert cluster.requests_in_flight() == 0
        assert not {t for t in asyncio.all_tasks() - tasks_before if not t.done()}


def test_a_batch_is_settled_at_the_first_absent_entry() -> None:
    meta = LedgerMetadata.new(("b0", "b1", "b2"), 3, 2, DigestType.CRC32C, b"pw")
    machine = RecoveryMachine(LEDGER, meta, 4)
    (fence,) = machine.start().ask
    machine.reply(fence, 0, Reply(ReplyKind.ABSENT))
    step = machine.reply(fence, 1, Reply(ReplyKind.ABSENT))  # Qw - Qa + 1 = 2: fenced
    assert step.settled == (fence,)
    assert [q.entry_id for q in step.ask] == [0, 1, 2, 3]
    first, second = step.ask[0], step.ask[1]
    machine.reply(first, 0, Reply(ReplyKind.FOUND, entry(0)))
    machine.reply(second, 0, Reply(ReplyKind.ABSENT))
    step = machine.reply(second, 1, Reply(ReplyKind.ABSENT))
    # entries 2 and 3 no longer matter: their requests are settled (to be cancelled)
    assert {q.entry_id for q in step.settled} == {1, 2, 3}
    assert [(q.ask, q.entry_id) for q in step.ask] == [(Ask.REWRITE, 0)]
    machine.reply(step.ask[0], 0, Reply(ReplyKind.FOUND))
    step = machine.reply(step.ask[0], 1, Reply(ReplyKind.FOUND))
    assert step.result == (0, 10)


def test_an_unknown_entry_fails_recovery() -> None:
    meta = LedgerMetadata.new(("b0", "b1", "b2"), 3, 2, DigestType.CRC32C, b"pw")
    machine = RecoveryMachine(LEDGER, meta, 2)
    (fence,) = machine.start().ask
    machine.reply(fence, 0, Reply(ReplyKind.ABSENT))
    first = machine.reply(fence, 1, Reply(ReplyKind.ABSENT)).ask[0]
    machine.reply(first, 0, Reply(ReplyKind.ABSENT))
    machine.reply(first, 1, Reply(ReplyKind.NONE, detail="EIO"))
    step = machine.reply(first, 2, Reply(ReplyKind.NONE, detail="EIO"))
    assert isinstance(step.error, BKeeperError)
    assert "cannot tell whether entry 0 exists" in str(step.error)
