"""``bkeeper sandbox`` watches its children: a bookie killed with SIGKILL is reported on the
sandbox's console (which one, how, its log and last lines) and started again with its id and
data, registered again; with ``--no-restart`` it stays down and the console says so. Stopping
the sandbox reports no failure."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bkeeper.testing.benchmarks import free_port, free_port_range
from tests.e2e.helpers import bkeeper, processes_mentioning

#: Its tests start processes (tests/tiers.py).
pytestmark = pytest.mark.usefixtures("subprocesses")

#: A console line reporting a child that ended (the sandbox's own stop reports none).
ENDED = re.compile(r"^(ZooKeeper|bookie \d+|auto-recovery \d+|dashboard) (killed by|exited with)")


def start_sandbox(data_dir: Path, *extra: str) -> tuple[subprocess.Popen[str], str, int, Path]:
    """A sandbox of 2 bookies: (process, metadata URI, bookie port base, its console file)."""
    console = Path(f"{data_dir}.err")
    bookie_port = free_port_range(2)
    with console.open("w") as err:
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "bkeeper", "sandbox", "--bookies", "2",
                "--no-dashboard", "--no-autorecovery", "--data-dir", str(data_dir),
                "--zookeeper-port", str(free_port()), "--bookie-port", str(bookie_port),
                "--http-port", str(free_port_range(2)), *extra,
            ],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()  # once the sandbox is ready (or dead)
    if not line.startswith("metadata URI: "):
        proc.kill()
        proc.wait()
        pytest.fail(f"sandbox did not start: {line!r}\n{console.read_text()}")
    return proc, line.removeprefix("metadata URI: ").strip(), bookie_port, console


def bookie_pids(data_dir: Path, index: int) -> list[int]:
    return processes_mentioning(f"--data-dir {data_dir}/bookie-{index} ")


def wait_console(console: Path, line: str, timeout_s: float = 90.0) -> list[str]:
    """The console's lines, once ``line`` is one of them."""
    deadline = time.monotonic() + timeout_s
    while True:
        lines = console.read_text().splitlines()
        if line in lines:
            return lines
        assert time.monotonic() < deadline, f"no {line!r} in:\n" + "\n".join(lines)
        time.sleep(0.1)


def stop_sandbox(proc: subprocess.Popen[str], data_dir: Path) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    deadline = time.monotonic() + 10
    while processes_mentioning(str(data_dir)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_mentioning(str(data_dir)) == [], "processes left behind"


def test_a_killed_bookie_is_reported_and_started_again(tmp_path: Path) -> None:
    data_dir = tmp_path / "sb"
    proc, uri, bookie_port, console = start_sandbox(data_dir)
    try:
        printed = console.read_text().splitlines()
        log = data_dir / "bookie-1.log"
        assert f"log of bookie 1: {log}" in printed
        assert f"log of ZooKeeper: {data_dir / 'zookeeper' / 'zookeeper.log'}" in printed
        assert not [line for line in printed if " INFO " in line]  # no logger prefixes
        [pid] = bookie_pids(data_dir, 1)
        os.kill(pid, signal.SIGKILL)
        lines = wait_console(
            console, f"bookie 1: running again (ready on 127.0.0.1:{bookie_port + 1})"
        )
        report = lines.index(f"bookie 1 killed by SIGKILL; its log {log} ends:")
        tail = lines[report + 1 : report + 6]
        assert len(tail) == 5 and all(line.startswith("  | ") for line in tail), lines
        assert f"ready on 127.0.0.1:{bookie_port + 1}" in "".join(tail)  # the log's end
        assert lines[report + 6] == "bookie 1: starting it again (restart 1, at most 3 per 60 s)"
        assert bookie_pids(data_dir, 1) not in ([], [pid])
        listing = bkeeper(uri, "shell", "listbookies")
        assert listing.returncode == 0, listing.stderr
        assert f"127.0.0.1:{bookie_port + 1} │ writable" in listing.stdout
        wrote = bkeeper(uri, "shell", "simpletest", "--entries", "5", "--ensemble", "2",
                        "--write-quorum", "2", "--ack-quorum", "2")  # fmt: skip
        assert wrote.returncode == 0, wrote.stderr  # the restarted bookie takes writes
    finally:
        stop_sandbox(proc, data_dir)
    ended = [line for line in console.read_text().splitlines() if ENDED.match(line)]
    assert ended == [f"bookie 1 killed by SIGKILL; its log {log} ends:"]  # none at the stop


def test_with_no_restart_a_killed_bookie_stays_down(tmp_path: Path) -> None:
    data_dir = tmp_path / "sb"
    proc, _uri, _bookie_port, console = start_sandbox(data_dir, "--no-restart")
    try:
        printed = console.read_text().splitlines()
        assert "restarts: off (--no-restart); a child process that exits stays down" in printed
        [pid] = bookie_pids(data_dir, 0)
        os.kill(pid, signal.SIGKILL)
        lines = wait_console(console, "bookie 0: left down (--no-restart)")
        assert f"bookie 0 killed by SIGKILL; its log {data_dir / 'bookie-0.log'} ends:" in lines
        time.sleep(1.0)  # a few of the sandbox's looks at its children
        assert bookie_pids(data_dir, 0) == []
        assert not [line for line in console.read_text().splitlines() if "again" in line]
    finally:
        stop_sandbox(proc, data_dir)
