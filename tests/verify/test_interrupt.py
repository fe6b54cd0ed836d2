"""What a stop (Ctrl-C, SIGTERM) does to a run, part by part: the processes are killed from
the handler, the event loop is closed within a bound, and the stop is said once."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bkeeper.testing.sandbox import Sandbox, SandboxConfig
from bkeeper.verify import stop
from bkeeper.verify.status import Cleanup, RunStatus
from bkeeper.verify.teardown import kill_processes


@pytest.fixture(autouse=True)
def _forget() -> Iterator[None]:
    stop.reset()
    yield
    stop.reset()


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def test_every_process_of_the_run_is_killed_also_with_zookeeper_down(
    subprocesses: None, tmp_path: Path
) -> None:
    """The bookies go even when ZooKeeper is already dead (the zk nemesis killed it): the
    first version looked at them only while ZooKeeper ran."""
    sandbox = Sandbox(SandboxConfig(data_dir=tmp_path, bookies=2))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    sandbox.zookeeper._process = dead  # the zk nemesis's kill, as the sandbox sees it
    sandbox.bookies = [_sleeper(), _sleeper()]
    sandbox.autorecoveries = [_sleeper()]
    cleanup = Cleanup()
    try:
        kill_processes(sandbox, None, cleanup)
        codes = [p.wait(10) for p in [*sandbox.bookies, *sandbox.autorecoveries]]
    finally:
        for proc in [*sandbox.bookies, *sandbox.autorecoveries]:
            proc.kill()
            proc.wait()
    assert codes == [-signal.SIGKILL] * 3
    assert cleanup.processes == 3
    kill_processes(sandbox, None, cleanup)  # none left to kill: none counted
    assert cleanup.processes == 3


def test_inside_a_running_loop_the_handler_raises_nothing_and_watch_does() -> None:
    """Raised into the loop's code, the interrupt surfaced in a task that logs its failures
    ('ERROR ... watch for the ledger's deletion failed' and a traceback, on a Ctrl-C)."""
    seen: list[str] = []

    async def task_that_logs_its_failures() -> None:
        try:
            stop.interrupt(signal.SIGINT)
            seen.append("went on")
        except BaseException:
            seen.append("interrupted here")
            raise

    async def work() -> None:
        await asyncio.get_running_loop().create_task(task_that_logs_its_failures())
        await asyncio.sleep(30)

    with pytest.raises(KeyboardInterrupt), stop.BoundedRunner() as runner:
        runner.run(work())
    assert seen == ["went on"]


def test_the_first_signal_kills_then_raises_and_a_second_is_ignored() -> None:
    killed: list[str] = []
    with stop.killing(lambda: killed.append("run")):
        with pytest.raises(KeyboardInterrupt):
            stop.interrupt(signal.SIGINT)
        stop.interrupt(signal.SIGINT)  # Ctrl-C again while the first unwinds: nothing
    assert killed == ["run"]
    assert stop.requested() == signal.SIGINT
    asked = stop.requested_at()
    assert asked is not None and time.monotonic() - asked < 5


def test_a_stopped_loop_is_closed_within_the_teardown_bound(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A task that does not end when cancelled (it waits on something the stop killed) is
    abandoned after TEARDOWN_S; asyncio.Runner waited for it for ever."""

    async def stubborn() -> None:
        while True:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                continue  # as a clean-up waiting on a dead process does

    async def work() -> None:
        asyncio.get_running_loop().create_task(stubborn())
        await asyncio.sleep(0.1)
        stop.interrupt(signal.SIGTERM)  # remembered; watch() raises it
        await asyncio.sleep(30)

    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt), stop.BoundedRunner() as runner:
        runner.run(work())
    assert time.monotonic() - started < stop.TEARDOWN_S * 3 + 2
    err = capsys.readouterr().err
    assert "Task was destroyed" not in err and "never retrieved" not in err, err


def test_status_describes_the_phase_and_the_cleanup() -> None:
    status = RunStatus()
    status.enter("workload with faults", 30.0)
    assert status.describe() == "workload with faults 0 of 30 s"
    status.cleanup = Cleanup(processes=7, namespaces=5, mounts=5, temp_dirs=1)
    assert status.cleanup.describe() == (
        "7 processes, 5 namespaces, 5 tmpfs mounts, 1 temporary directory"
    )
    assert Cleanup(processes=1).describe() == "1 process, 0 namespaces"


def test_a_stop_raised_again_by_a_task_group_does_not_cut_the_teardown(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The handler's KeyboardInterrupt lands in one task of a TaskGroup, which keeps it and
    raises it again at its exit, during the teardown: the teardown went no further and the
    other tasks' clean-ups ran at garbage collection, on a closed loop ("Exception ignored
    in: <coroutine object LedgerWorkload.run>", seen once in eight Ctrl-C)."""
    cleaned: list[str] = []

    async def child() -> None:
        await asyncio.sleep(0.05)
        raise KeyboardInterrupt  # (the handler raises in no task now: watch() does)

    async def other() -> None:
        try:
            await asyncio.sleep(30)
        finally:
            await asyncio.sleep(0.05)  # a clean-up that needs the loop
            cleaned.append("other")

    async def work() -> None:
        asyncio.get_running_loop().create_task(other())
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(child())
                group.create_task(asyncio.sleep(30))
        finally:
            await asyncio.sleep(0)
            cleaned.append("work")

    with pytest.raises(KeyboardInterrupt), stop.BoundedRunner() as runner:
        runner.run(work())
    assert sorted(cleaned) == ["other", "work"]
    assert "Exception ignored" not in capsys.readouterr().err
