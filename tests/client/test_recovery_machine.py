"""Ledger recovery: the pure machine (client.recovery_machine) under random replies and orders, and
its shell (client.ledger_recovery) leaving no request behind."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from bkeeper.client.config import ClientConfig
from bkeeper.client.distribution import write_set
from bkeeper.client.entry import Entry
from bkeeper.client.recovery_machine import (
    Ask,
    Phase,
    Question,
    RecoveryMachine,
    Reply,
    ReplyKind,
    Step,
)
from bkeeper.common.errors import BKeeperError
from bkeeper.meta.ledger_metadata import LedgerMetadata, LedgerState
from bkeeper.testing.cluster import MemoryCluster
from bkeeper.testing.virtual_time import on_virtual_time
from bkeeper.wire.digest import DigestType
from bkeeper.wire.messages import ReadRequest

LEDGER = 7
LIMIT_S = 10.0
SHAPES = [(3, 3, 2), (3, 2, 2), (5, 3, 2), (4, 3, 3), (3, 3, 1), (1, 1, 1)]


def entry(entry_id: int, lac: int = -1) -> Entry:
    return Entry(LEDGER, entry_id, lac, 10 * (entry_id + 1), memoryview(b""))


@dataclass
class Run:
    """One recovery driven to its end: its last step and what the test answered."""

    step: Step
    #: Each question asked, with the reply given at each position (None: not answered).
    replies: dict[Question, list[Reply | None]] = field(default_factory=dict)
    rewritten: dict[int, int] = field(default_factory=dict)
    silences: int = 0


def drive(
    machine: RecoveryMachine,
    holders: dict[int, set[str]],
    lacs: dict[str, int],
    pick: Callable[[int], int],
    silent: Callable[[], bool],
) -> Run:
    """Answer ``machine``'s requests, one at a time in the order ``pick`` chooses among those
    outstanding (given their number), as bookies holding ``holders`` (entry -> bookies) with
    ``lacs`` would; a request ``silent`` says so gets no answer (a timeout)."""
    run = Run(machine.start())
    outstanding: list[tuple[Question, int]] = []
    settled: set[Question] = set()
    for _ in range(5_000):
        step = run.step
        settled.update(step.settled)
        if step.result is not None or step.error is not None:
            return run
        for question in step.ask:
            run.replies[question] = [None] * len(question.bookies)
        outstanding += [(q, p) for q in step.ask for p in range(len(q.bookies))]
        assert outstanding, "the machine waits for nothing"
        question, position = outstanding.pop(pick(len(outstanding)))
        bookie = question.bookies[position]
        if silent():
            reply = Reply(ReplyKind.NONE, detail="timeout")
            run.silences += 1
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
            run.rewritten[question.entry_id] = run.rewritten.get(question.entry_id, 0) + 1
        run.replies[question][position] = reply
        was_settled = question in settled
        run.step = machine.reply(question, position, reply)
        if was_settled:
            assert run.step == Step(), "a straggler's reply changes nothing"
    raise AssertionError("recovery did not end")


def why_it_failed(run: Run, meta: LedgerMetadata) -> str:
    """Check that the replies the test gave justify ``run``'s error; which failure it was."""
    error = str(run.step.error)
    e, qw, qa = meta.ensemble_size, meta.write_quorum, meta.ack_quorum
    by_entry = {(q.ask, q.entry_id): replies for q, replies in run.replies.items()}

    def kinds(ask: Ask, entry_id: int) -> list[ReplyKind]:
        replies = by_entry[ask, entry_id]
        assert None not in replies, f"{error}: with a reply still to come"
        return [r.kind for r in replies if r is not None]

    if re.search(r"could not fence, too few bookies answered", error):
        answered = {p for p, k in enumerate(kinds(Ask.FENCE, -1)) if k is not ReplyKind.NONE}
        assert any(len(answered & set(write_set(i, e, qw))) < qw - qa + 1 for i in range(e)), (
            f"{error}: but bookies {sorted(answered)} cover every write set"
        )
        return "fencing"
    if found := re.search(r"cannot tell whether entry (\d+) exists", error):
        got = kinds(Ask.READ, int(found[1]))
        assert ReplyKind.FOUND not in got, f"{error}: but a bookie returned it"
        assert got.count(ReplyKind.ABSENT) < qw - qa + 1, f"{error}: but a quorum lacks it"
        return "reading"
    if found := re.search(r"recovery add of entry (\d+) reached", error):
        got = kinds(Ask.REWRITE, int(found[1]))
        assert got.count(ReplyKind.FOUND) < qa, f"{error}: but {qa} bookies acknowledged it"
        return "rewriting"
    raise AssertionError(f"recovery failed for no reason the replies give: {error}")


@settings(max_examples=300)
@given(
    data=st.data(),
    shape=st.sampled_from(SHAPES),
    written=st.integers(0, 12),
    batch=st.integers(1, 5),
)
def test_recovery_never_loses_an_acknowledged_entry(
    data: st.DataObject, shape: tuple[int, int, int], written: int, batch: int
) -> None:
    """Recovery ends DONE, or FAILED only when bookies stayed silent and those silences
    justify the error (checked from the replies given); both outcomes are counted
    (``pytest --hypothesis-show-statistics``)."""
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
    run = drive(
        machine,
        holders,
        lacs,
        pick=lambda count: data.draw(st.integers(0, count - 1)),
        silent=lambda: data.draw(st.booleans()) and data.draw(st.booleans()),
    )
    if run.step.error is not None:
        assert run.silences > 0, f"recovery failed with every bookie answering: {run.step.error}"
        event(f"recovery failed: {why_it_failed(run, meta)}")
        assert machine.phase is Phase.FAILED
        return
    event("recovery done" + (" despite silences" if run.silences else ""))
    assert machine.phase is Phase.DONE
    last, length = run.step.result  # type: ignore[misc]
    assert all(n <= last for n in acked), "an acknowledged entry is never cut off"
    assert last < written and length == (10 * (last + 1) if last >= 0 else 0)
    fenced_lac = max(lacs.values())
    for n in range(fenced_lac + 1, last + 1):
        assert run.rewritten.get(n, 0) >= qa, f"entry {n} re-written to an ack quorum"


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("order", ["first", "last"])
def test_recovery_with_every_bookie_answering_recovers_every_entry(
    shape: tuple[int, int, int], order: str
) -> None:
    """The property test's scenario with no silence, answered in two fixed orders: recovery
    must end DONE with all 6 entries (those past the LAC re-written), not fail."""
    e, qw, qa = shape
    bookies = tuple(f"b{i}" for i in range(e))
    meta = LedgerMetadata.new(bookies, qw, qa, DigestType.CRC32C, b"pw")
    holders = {n: {bookies[i] for i in write_set(n, e, qw)} for n in range(6)}
    lacs = {b: 2 - i % 2 for i, b in enumerate(bookies)}  # 2 and 1: the fence finds LAC 2
    machine = RecoveryMachine(LEDGER, meta, 2)
    run = drive(
        machine, holders, lacs, pick=lambda count: 0 if order == "first" else count - 1,
        silent=lambda: False,
    )  # fmt: skip
    assert run.step.error is None and machine.phase is Phase.DONE
    assert run.step.result == (5, 60)
    assert {n: count >= qa for n, count in run.rewritten.items()} == {3: True, 4: True, 5: True}


@on_virtual_time
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
