"""Three ``bkeeper dice`` processes on a real cluster: leaders paused past their session
timeout and resumed, leaders killed and new processes started. Afterwards every process's
printed values are a prefix of the one sequence in the log.

The processes have the library's ZooKeeper session timeout (issue 41: 2 s sessions expired
on a loaded machine without a pause), and the test waits for the events (another process
leading, values printed), not for wall-clock guesses. It kills no bookie: the module's shared
cluster (4 bookies: E3 named-log ledgers with a spare)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from bkeeper.client import BookKeeper
from bkeeper.namedlog import NamedLogs
from tests.client.conftest import shared_cluster, shared_cluster_left_running

__all__ = ["shared_cluster", "shared_cluster_left_running"]  # the module's cluster, its check


#: Long enough for a leader's session to expire (the library's 10 s) and another to lead.
EVENT_TIMEOUT_S = 90.0


class DiceProcess:
    def __init__(self, uri: str, out: Path) -> None:
        self.out = out
        self._file = open(out, "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [
                sys.executable, "-m", "bkeeper", "dice", "--metadata", uri, "--log", "e2e",
                "--period", "0.2",
            ],
            stdout=self._file,
            stderr=subprocess.STDOUT,
        )  # fmt: skip

    def values(self) -> list[tuple[int, int, str]]:
        out = []
        for line in self.out.read_text(errors="replace").splitlines():
            if line.startswith("Value = "):
                value, epoch, role = (part.strip() for part in line[8:].split(","))
                out.append((int(value), int(epoch.removeprefix("epoch = ")), role))
        return out

    def leading_count(self) -> int:
        return sum(1 for *_, role in self.values() if role == "leading")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._file.close()


def current_leader(processes: list[DiceProcess], timeout_s: float = 15.0) -> DiceProcess:
    """The process whose count of "leading" lines grows."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        before = [p.leading_count() for p in processes]
        time.sleep(0.7)
        growing = [
            p for p, n in zip(processes, before, strict=True)
            if p.proc.poll() is None and p.leading_count() > n
        ]  # fmt: skip
        if len(growing) == 1:
            return growing[0]
    raise AssertionError("no single process kept leading")


def wait_printed(processes: list[DiceProcess], count: int) -> None:
    """Wait until each process printed more than ``count`` values."""
    deadline = time.monotonic() + EVENT_TIMEOUT_S
    while (short := [p for p in processes if len(p.values()) <= count]) and all(
        p.proc.poll() is None for p in short
    ):
        assert time.monotonic() < deadline, f"{short[0].out.name} printed {count} values or less"
        time.sleep(0.1)


async def test_dice_survives_paused_and_killed_leaders(shared_cluster, tmp_path: Path) -> None:
    uri = shared_cluster.uri
    processes = [DiceProcess(uri, tmp_path / f"dice-{i}.out") for i in range(3)]
    try:
        leaders = []
        for _ in range(2):  # pause the leader past its session timeout, then resume it
            leader = await asyncio.to_thread(current_leader, processes, EVENT_TIMEOUT_S)
            leaders.append(leader)
            os.kill(leader.proc.pid, signal.SIGSTOP)
            others = [p for p in processes if p is not leader]
            # Another leads once the paused one's session expired.
            new_leader = await asyncio.to_thread(current_leader, others, EVENT_TIMEOUT_S)
            assert new_leader is not leader
            os.kill(leader.proc.pid, signal.SIGCONT)
            await asyncio.to_thread(wait_printed, [leader], len(leader.values()))  # it goes on
        leader = await asyncio.to_thread(current_leader, processes, EVENT_TIMEOUT_S)
        leader.proc.kill()  # kill -9 the leader and start a new process
        leader.proc.wait()
        processes.append(DiceProcess(uri, tmp_path / "dice-3.out"))
        new_leader = await asyncio.to_thread(current_leader, processes, EVENT_TIMEOUT_S)
        assert new_leader is not leader
        await asyncio.to_thread(wait_printed, processes, 3)
    finally:
        for process in processes:
            process.stop()

    async with BookKeeper(uri) as bk:
        named = NamedLogs(bk).log("e2e")
        last = await named.last_position()
        assert last is not None
        reader = await named.open_reader()
        in_log = []
        async for record in reader:
            in_log.append((int(record.payload), record.position.ledger_id))
            if record.position >= last:
                break
        await reader.close()
    assert len({epoch for _, epoch in in_log}) >= 4, "each leader term wrote its own ledger"
    for process in processes:
        printed = [(value, epoch) for value, epoch, _ in process.values()]
        assert len(printed) > 3, process.out.read_text()[-2000:]
        assert printed == in_log[: len(printed)], f"{process.out.name} forked from the log"
