"""``AutoRecovery`` in an in-memory cluster: one auditor among the participants, leadership
moving when the auditor closes or its session expires, and a lost bookie's ledgers repaired
without anyone asking."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import pytest

from bkeeper.autorecovery.config import AutoRecoveryConfig
from bkeeper.autorecovery.service import AutoRecovery, default_participant_id, keep_running
from bkeeper.cli import autorecovery as cli_autorecovery
from bkeeper.client.bookkeeper import BookKeeper
from bkeeper.common.errors import ConfigError, ConnectionLossError
from bkeeper.meta.ledger_metadata import LedgerState
from bkeeper.meta.memory import MemoryNodeStore
from bkeeper.testing.clock import FakeClock
from bkeeper.testing.cluster import MemoryCluster

PASSWORD = b"pw"
WAIT_S = 30.0
#: Polls fast so the scenarios do not wait on the defaults' idle pauses.
CONFIG = AutoRecoveryConfig(idle_poll_interval_ms=20, failed_ledger_retry_delay_ms=50)


async def wait_for(condition: Callable[[], Awaitable[bool]], what: str) -> None:
    """Wait until ``condition()`` holds (looked at every 20 ms), at most ``WAIT_S``."""
    async with asyncio.timeout(WAIT_S):
        while not await condition():
            await asyncio.sleep(0.02)


async def auditor_of(bk: BookKeeper) -> str | None:
    return await bk.cluster.underreplication.current_auditor()


async def test_one_auditor_and_it_moves_when_the_auditor_closes() -> None:
    async with MemoryCluster(3) as cluster:
        bk1, bk2 = await cluster.client(), await cluster.client()
        first = AutoRecovery(bk1, "recovery-1:0", CONFIG)
        await first.start()
        await first.wait_auditor(WAIT_S)
        async with AutoRecovery(bk2, "recovery-2:0", CONFIG) as second:
            try:
                await wait_for(lambda: _votes(bk2, 2), "the second's vote")
                assert first.is_auditor
                assert first.auditor is not None
                assert not second.is_auditor
                assert second.auditor is None
                assert await auditor_of(bk2) == "recovery-1:0"
            finally:
                await first.aclose()
            assert not first.is_auditor
            await second.wait_auditor(WAIT_S)
            assert second.is_auditor
            assert await auditor_of(bk1) == "recovery-2:0"


async def test_the_auditor_moves_when_its_session_expires_and_it_stands_again() -> None:
    async with MemoryCluster(3) as cluster:
        bk1, bk2 = await cluster.client(), await cluster.client()
        async with AutoRecovery(bk1, "recovery-1:0", CONFIG) as first:
            await first.wait_auditor(WAIT_S)
            async with AutoRecovery(bk2, "recovery-2:0", CONFIG) as second:
                store = bk1.cluster.store
                await store.expire_session()  # type: ignore[attr-defined]
                await second.wait_auditor(WAIT_S)
                # The first learns of the expiry by its own session's events, perhaps after
                # the second took over (as with ZooKeeper); then its auditor stops.
                await wait_for(_now(lambda: not first.is_auditor), "the first steps down")
                assert first.auditor is None
                assert await auditor_of(bk2) == "recovery-2:0"
                # The first stands again as a plain candidate, behind the second.
                await wait_for(lambda: _votes(bk2, 2), "the first's new vote")
                assert not first.is_auditor
            await first.wait_auditor(WAIT_S)
            assert await auditor_of(bk1) == "recovery-1:0"


def _now(check: Callable[[], bool]) -> Callable[[], Awaitable[bool]]:
    async def condition() -> bool:
        return check()

    return condition


async def _votes(bk: BookKeeper, count: int) -> bool:
    directory = f"{bk.cluster.root}/underreplication/auditorelection"
    return len(await bk.cluster.store.children(directory)) == count


async def test_a_lost_bookie_is_replaced_in_every_ledger_without_anyone_asking() -> None:
    async with MemoryCluster(4) as cluster:
        writer, runner = await cluster.client(), await cluster.client()
        ledgers = []
        for _ in range(4):
            handle = await writer.create_ledger(3, 2, 2, password=PASSWORD)
            for entry_id in range(20):
                await handle.append(b"entry-%d" % entry_id)
            await handle.close()
            ledgers.append(handle.ledger_id)
        lost = cluster.bookies[0].bookie_id
        async with AutoRecovery(runner, "recovery-1:0", CONFIG) as recovery:
            await recovery.wait_auditor(WAIT_S)
            await cluster.stop_bookie(cluster.bookies[0])

            async def repaired() -> bool:
                for ledger_id in ledgers:
                    meta = await writer.ledger_metadata(ledger_id)
                    if any(lost in map(str, ens) for ens in meta.segments.values()):
                        return False
                return [e async for e in writer.cluster.underreplication.ledgers()] == []

            await wait_for(repaired, "every ledger repaired")
        for ledger_id in ledgers:
            meta = await writer.ledger_metadata(ledger_id)
            assert meta.state is LedgerState.CLOSED
            reader = await writer.open_ledger(ledger_id, PASSWORD, recovery=False)
            got = [entry.data async for entry in reader.read(0, 19)]
            assert got == [b"entry-%d" % i for i in range(20)]


async def test_the_auditor_sets_the_delay_node_only_when_absent() -> None:
    async with MemoryCluster(1) as cluster:
        bk = await cluster.client()
        urm = bk.cluster.underreplication
        config = AutoRecoveryConfig(lost_bookie_recovery_delay_s=7)
        async with AutoRecovery(bk, "recovery-1:0", config) as recovery:
            await recovery.wait_auditor(WAIT_S)
            await wait_for(lambda: _delay_is(bk, 7), "the delay node")
        await urm.set_lost_bookie_recovery_delay_s(3)  # an operator's value wins
        async with AutoRecovery(bk, "recovery-1:0", config) as recovery:
            await recovery.wait_auditor(WAIT_S)
            await recovery.auditor.audit_now()  # type: ignore[union-attr]
            assert await urm.lost_bookie_recovery_delay_s() == 3


async def _delay_is(bk: BookKeeper, seconds: int) -> bool:
    return await bk.cluster.underreplication.lost_bookie_recovery_delay_s() == seconds


async def test_the_process_says_ready_only_once_its_vote_is_in_the_election(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``bkeeper autorecovery`` prints "ready" once ``shell whoisauditor`` names an auditor;
    it used to print it before its vote was written (seen in CI: "no auditor is elected")."""
    gate = asyncio.Event()
    create = MemoryNodeStore.create

    async def slow_vote(self: MemoryNodeStore, path: str, *args: object, **kwargs: object) -> str:
        if "/auditorelection/" in path:
            await gate.wait()
        return await create(self, path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(MemoryNodeStore, "create", slow_vote)
    async with MemoryCluster(1) as cluster:
        bk = await cluster.client()
        process = asyncio.create_task(cli_autorecovery._run(cluster.uri, "tester:1", CONFIG, None))
        try:
            await wait_for(_layout_made(bk), "the election's directory")
            for _ in range(50):  # the process runs on while its vote waits
                await asyncio.sleep(0)
            assert "ready" not in capsys.readouterr().err
            assert await auditor_of(bk) is None
            gate.set()
            async with asyncio.timeout(WAIT_S):
                while "autorecovery tester:1 ready" not in (err := capsys.readouterr().err):
                    assert not process.done(), err
                    await asyncio.sleep(0.01)
            assert await auditor_of(bk) == "tester:1"
        finally:
            process.cancel()
            await asyncio.gather(process, return_exceptions=True)


async def test_a_stop_before_the_vote_is_written_ends_the_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    create = MemoryNodeStore.create

    async def no_vote(self: MemoryNodeStore, path: str, *args: object, **kwargs: object) -> str:
        if "/auditorelection/" in path:
            await asyncio.Event().wait()  # the vote's create never answers
        return await create(self, path, *args, **kwargs)  # type: ignore[arg-type]

    async with MemoryCluster(1) as cluster:
        bk = await cluster.client()
        monkeypatch.setattr(MemoryNodeStore, "create", no_vote)
        async with AutoRecovery(bk, "tester:1", CONFIG) as recovery:
            stop = asyncio.Event()
            waiting = asyncio.create_task(cli_autorecovery._joined_unless_stopped(recovery, stop))
            await asyncio.sleep(0.05)
            assert not waiting.done()
            stop.set()
            async with asyncio.timeout(WAIT_S):
                assert await waiting is False


def _layout_made(bk: BookKeeper) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        root = f"{bk.cluster.root}/underreplication"
        return await bk.cluster.store.exists(root) is not None

    return check


@pytest.mark.parametrize("bad", ["", "has space:1", "slash/no", "x" * 256])
async def test_a_participant_id_java_cannot_read_is_refused(bad: str) -> None:
    async with MemoryCluster(1) as cluster:
        bk = await cluster.client()
        with pytest.raises(ConfigError, match=r"^id: "):
            AutoRecovery(bk, bad, CONFIG)


def test_the_default_id_is_host_and_pid() -> None:
    participant = default_participant_id()
    host, _, rest = participant.rpartition(":")
    assert host
    assert rest.startswith("autorecovery-")
    assert rest.removeprefix("autorecovery-").isdigit()


async def test_keep_running_restarts_with_a_doubling_pause_reset_after_a_long_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    runs = 0
    fifth = asyncio.Event()

    async def run() -> None:
        nonlocal runs
        runs += 1
        if runs == 3:
            clock.advance(1.0)  # a long run before it failed: not a crash loop
        if runs == 2:  # expected while ZooKeeper is away: one line, no traceback
            raise ConnectionLossError("ZooKeeper: disconnected (reconnecting)")
        if runs <= 3:
            raise RuntimeError(f"failure {runs}")
        if runs == 4:
            return  # returning is restarted too
        fifth.set()
        await asyncio.Event().wait()

    caplog.set_level(logging.WARNING, logger="bkeeper.autorecovery.service")
    task = asyncio.create_task(
        keep_running("thing", run, clock=clock, delay_s=0.001, delay_s_max=0.004)
    )
    try:
        async with asyncio.timeout(WAIT_S):
            await fifth.wait()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert task.cancelled() and runs == 5
    restarts = [r.getMessage() for r in caplog.records if "starting it again" in r.getMessage()]
    assert restarts == [
        "thing failed; starting it again in 0.001 s",
        "thing failed; starting it again in 0.002 s",
        "thing failed; starting it again in 0.001 s",
        "thing returned; starting it again in 0.002 s",
    ]
    failures = [r for r in caplog.records if r.getMessage() == "thing failed"]
    assert [str(r.exc_info[1]) for r in failures if r.exc_info] == ["failure 1", "failure 3"]
    lost = [r for r in caplog.records if r.getMessage().startswith("thing failed: ")]
    assert [(r.getMessage(), r.levelname, r.exc_info) for r in lost] == [
        ("thing failed: ZooKeeper: disconnected (reconnecting)", "WARNING", None)
    ]


async def test_keep_running_ends_when_cancelled_even_if_the_run_fails_on_its_way_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A cancel that the run turned into another error (its clean-up failed) was taken for
    a failure: the supervisor started the run again and never ended (a bookie ignored its
    SIGTERM for good)."""
    started = asyncio.Event()
    runs = 0

    async def run() -> None:
        nonlocal runs
        runs += 1
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise RuntimeError("clean-up failed") from None

    caplog.set_level(logging.WARNING, logger="bkeeper.autorecovery.service")
    task = asyncio.create_task(keep_running("thing", run, delay_s=0.001, delay_s_max=0.004))
    async with asyncio.timeout(WAIT_S):
        await started.wait()
    task.cancel()
    done, _pending = await asyncio.wait({task}, timeout=WAIT_S)
    assert done and task.cancelled(), "keep_running swallowed its cancellation"
    assert runs == 1
    assert not [r for r in caplog.records if "starting it again" in r.getMessage()]
    failed = [r for r in caplog.records if "while it was being cancelled" in r.getMessage()]
    assert len(failed) == 1 and failed[0].exc_info is not None
