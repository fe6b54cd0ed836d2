"""The tests' bookie fork server (tests/forkserver.py): its children behave as the processes
``python -m bkeeper`` starts (output, exit codes, signals), and it refuses what it cannot do
saying why."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bkeeper.testing.bookie_process import wait_ready
from tests.forkserver import ForkedProcess, ForkServer, ForkServerError


@pytest.fixture
def server(subprocesses: None) -> Iterator[ForkServer]:
    """A fork server of the test's own; the children it still has at the end are killed
    (a failed test's too), then it is stopped."""
    forks = ForkServer()
    try:
        yield forks
    finally:
        for child in forks.children:
            if child.poll() is None:
                os.kill(child.pid, signal.SIGCONT)
                child.kill()
                child.wait(30)
        forks.close()
    assert not forks.work_dir.exists(), "its socket and log are removed when it stops"


def until_state(pid: int, states: tuple[str, ...], what: str, timeout_s: float = 30.0) -> None:
    """Poll ``pid``'s state (``/proc``) until it is one of ``states`` (a hang guard)."""
    deadline = time.monotonic() + timeout_s
    while True:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        if state in states:
            return
        assert time.monotonic() < deadline, f"not {what} within {timeout_s} s (state {state})"
        time.sleep(0.01)


@pytest.mark.parametrize(
    "args", [["--version"], ["no-such-command"], ["bookie", "--port", "not-a-port"]]
)
def test_output_and_exit_code_are_those_of_python_m_bkeeper(
    server: ForkServer, tmp_path: Path, args: list[str]
) -> None:
    started = subprocess.run(
        [sys.executable, "-m", "bkeeper", *args], capture_output=True, check=False
    )
    log = tmp_path / "forked.log"
    forked = server.spawn(args, log)
    assert forked.wait(30) == started.returncode
    assert sorted(log.read_bytes().splitlines()) == sorted(
        (started.stdout + started.stderr).splitlines()
    )
    ran = server.run(args, timeout=30)  # stdout and stderr apart, as text
    assert (ran.returncode, ran.stdout, ran.stderr) == (
        started.returncode, started.stdout.decode(), started.stderr.decode(),
    )  # fmt: skip


def test_run_kills_at_its_timeout_as_subprocess_run(server: ForkServer, tmp_path: Path) -> None:
    args = ["bookie", "--data-dir", str(tmp_path / "data"), "--port", "0"]
    with pytest.raises(subprocess.TimeoutExpired):
        server.run(args, timeout=0.5)
    left = sorted(path.name for path in server.work_dir.iterdir())
    assert left == ["forkserver.log", "forkserver.sock"], "its output files are removed"


def test_a_forked_bookie_serves_and_answers_signals(server: ForkServer, tmp_path: Path) -> None:
    log = tmp_path / "bookie.log"
    args = ["bookie", "--data-dir", str(tmp_path / "data"), "--port", "0"]
    bookie = server.spawn(args, log)
    port = wait_ready(bookie, log, 0)
    with socket.create_connection(("127.0.0.1", port), timeout=10):
        pass  # it listens: its own process, its own port
    assert bookie.pid != os.getpid() and bookie.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        bookie.wait(0.1)
    bookie.send_signal(signal.SIGSTOP)  # delivered asynchronously: wait until it shows
    until_state(bookie.pid, ("T", "t"), "stopped by the signal, as a Popen child is")
    bookie.send_signal(signal.SIGCONT)
    until_state(bookie.pid, ("R", "S", "D"), "running again")
    bookie.kill()
    assert bookie.wait(30) == -signal.SIGKILL, "a signal's exit reads as Popen reads it"
    bookie.kill()  # exited: as Popen, signalling it again does nothing


def test_a_sigterm_ends_a_forked_bookie_as_a_started_one(
    server: ForkServer, tmp_path: Path
) -> None:
    def sigterm_exit(proc: subprocess.Popen[bytes] | ForkedProcess, log: Path) -> int:
        wait_ready(proc, log, 0)
        proc.terminate()
        return proc.wait(30)

    def args(name: str) -> list[str]:
        return ["bookie", "--data-dir", str(tmp_path / name), "--port", "0"]

    started_log, forked_log = tmp_path / "started.log", tmp_path / "forked.log"
    with open(started_log, "ab") as out:
        started = subprocess.Popen(
            [sys.executable, "-m", "bkeeper", *args("started")],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    expected = sigterm_exit(started, started_log)  # stopped before the fork: none is left
    assert sigterm_exit(server.spawn(args("forked"), forked_log), forked_log) == expected


def test_a_pid_that_is_not_its_child_is_refused_by_name(server: ForkServer) -> None:
    with pytest.raises(ForkServerError, match=rf"pid {os.getpid()} is not a child of this fork"):
        server.wait(os.getpid(), 0.0)


def test_it_ends_with_the_process_that_started_it(server: ForkServer) -> None:
    assert server.proc.stdin is not None
    server.proc.stdin.close()  # as when the pytest process dies
    assert server.proc.wait(30) == 0
