"""An ex-leader cannot disturb the new one (issue 22, part 2), with real processes: a ``bkeeper
dice`` process stops itself (SIGSTOP, the test hook) exactly between its leadership check and
``open_writer``; its session expires, a second process takes over; on SIGCONT the first one's
writer is refused (an older term) and the second keeps leading, never fenced."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from bkeeper.cli.dice import STOP_BEFORE_OPEN_WRITER_ENV
from bkeeper.client import BookKeeper
from bkeeper.namedlog import NamedLogs

SESSION_MS = 2_000


class DiceProcess:
    def __init__(self, uri: str, out: Path, *, stop_before_open_writer: bool = False) -> None:
        self.out = out
        self._file = open(out, "wb")  # noqa: SIM115
        env = dict(os.environ)
        env.pop(STOP_BEFORE_OPEN_WRITER_ENV, None)
        if stop_before_open_writer:
            env[STOP_BEFORE_OPEN_WRITER_ENV] = "1"
        self.proc = subprocess.Popen(
            [
                sys.executable, "-m", "bkeeper", "dice", "--metadata", uri, "--log", "terms",
                "--period", "0.2", "--session-timeout-ms", str(SESSION_MS),
            ],
            stdout=self._file,
            stderr=subprocess.STDOUT,
            env=env,
        )  # fmt: skip

    def text(self) -> str:
        return self.out.read_text(errors="replace")

    def values(self) -> list[tuple[int, int, str]]:
        out = []
        for line in self.text().splitlines():
            if line.startswith("Value = "):
                value, epoch, role = (part.strip() for part in line[8:].split(","))
                out.append((int(value), int(epoch.removeprefix("epoch = ")), role))
        return out

    def leading(self) -> list[tuple[int, int, str]]:
        return [v for v in self.values() if v[2] == "leading"]

    def stopped(self) -> bool:
        """Stopped by a signal (state T in /proc)."""
        stat = Path(f"/proc/{self.proc.pid}/stat").read_text()
        return stat.rpartition(")")[2].split()[0] == "T"

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


def wait_until(condition, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.05)


async def test_a_leader_stopped_before_open_writer_cannot_fence_the_next(
    real_cluster, tmp_path: Path
) -> None:
    first = DiceProcess(real_cluster.uri, tmp_path / "first.out", stop_before_open_writer=True)
    second = None
    try:
        await asyncio.to_thread(wait_until, first.stopped, "the first process stopped itself")
        assert "stopping before open_writer" in first.text()
        assert first.leading() == []
        second = DiceProcess(real_cluster.uri, tmp_path / "second.out")
        # The first one's session expires while it is stopped: the second takes over.
        await asyncio.to_thread(
            wait_until, lambda: len(second.leading()) >= 3, "the second process leading"
        )
        os.kill(first.proc.pid, signal.SIGCONT)
        await asyncio.to_thread(
            wait_until,
            lambda: "not taking over the log" in first.text() or "fenced" in second.text(),
            "the first process's open_writer",
        )
        assert "fenced" not in second.text(), "the ex-leader fenced the new leader"
        assert "older than the log's term" in first.text()
        rolled = len(second.leading())
        await asyncio.to_thread(
            wait_until, lambda: len(second.leading()) >= rolled + 5, "the second leading on"
        )
        await asyncio.to_thread(
            wait_until,
            lambda: any(role == "following" for *_, role in first.values()),
            "the first process following",
        )
        assert "fenced" not in second.text(), "the new leader lost its writer"
        assert first.leading() == []
        assert len({epoch for _, epoch, _ in second.leading()}) == 1, "one leader term, no fork"
    finally:
        first.stop()
        if second is not None:
            second.stop()

    async with BookKeeper(real_cluster.uri) as bk:
        named = NamedLogs(bk).log("terms")
        last = await named.last_position()
        assert last is not None
        reader = await named.open_reader()
        in_log = []
        async for record in reader:
            in_log.append((int(record.payload), record.position.ledger_id))
            if record.position >= last:
                break
        await reader.close()
    for process in (first, second):
        printed = [(value, epoch) for value, epoch, _ in process.values()]
        assert printed == in_log[: len(printed)], f"{process.out.name} forked from the log"
