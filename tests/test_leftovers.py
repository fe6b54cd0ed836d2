"""The session's leftover check (tests/conftest.py) and the process clean-up it relies on:
a pytest session that leaves a process or a temp file fails, naming them; a bookie that does
not listen in time is killed; a real cluster refuses to start bookies once stopped."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bkeeper.common.errors import BKeeperError
from bkeeper.testing.benchmarks import _wait_port, free_port
from tests.client.conftest import RealCluster

ROOT = Path(__file__).resolve().parents[1]

LEAKY = """
import os, subprocess, sys, tempfile

def test_leaks(subprocesses):
    orphan = "import subprocess; subprocess.Popen(['sleep', '600'])"
    subprocess.run([sys.executable, "-c", orphan], check=True)  # its child outlives it
    subprocess.Popen(["sleep", "601"])  # a child nobody waits for
    tempfile.mkdtemp(prefix="spark-")
    os.close(tempfile.mkstemp(prefix="bkeeper-")[0])
"""

TIDY = """
import subprocess, tempfile

def test_tidy(subprocesses):
    subprocess.run(["sleep", "0"], check=True)
    with tempfile.TemporaryDirectory(prefix="spark-"):
        pass
"""


def _session(tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    """A pytest session of one test module, with this suite's conftest as a plugin."""
    (tmp_path / "test_inner.py").write_text(textwrap.dedent(body))
    env = {**os.environ, "BKEEPER_TEST_LEFTOVER_WAIT_S": "1"}
    command = [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider",
               "-q", f"--basetemp={tmp_path / 'inner'}", str(tmp_path / "test_inner.py")]  # fmt: skip
    return subprocess.run(
        command, check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def test_a_session_that_leaves_processes_or_files_fails_naming_them(
    subprocesses: None, tmp_path: Path
) -> None:
    result = _session(tmp_path, LEAKY)
    assert result.returncode == 1, result.stdout
    assert "1 passed, 1 error" in result.stdout, result.stdout
    lines = result.stdout[result.stdout.index("the test session left") :].splitlines()
    assert lines[0] == (
        "the test session left 2 processes (killed now) and 2 temp files (removed now) behind:"
    ), result.stdout
    processes = sorted(line.strip().split(": ", 1) for line in lines[1:3])
    assert [command for _, command in processes] == ["sleep 600", "sleep 601"], result.stdout
    files = sorted(Path(line.strip().removeprefix("file ")) for line in lines[3:5])
    assert [path.name.split("-")[0] for path in files] == ["bkeeper", "spark"], result.stdout
    assert all(path.parent.name.startswith("bkeeper-tests-") for path in files), result.stdout
    assert not any(path.exists() for path in files), "removed, as it says"
    for label, _ in processes:
        pid = int(label.removeprefix("process "))
        assert not _running(pid), f"process {pid} was killed, as it says"


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def test_a_tidy_session_passes(subprocesses: None, tmp_path: Path) -> None:
    result = _session(tmp_path, TIDY)
    assert result.returncode == 0, result.stdout
    assert "1 passed" in result.stdout


def test_a_bookie_that_does_not_listen_in_time_is_killed(subprocesses: None) -> None:
    silent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    port = free_port()
    try:
        with pytest.raises(BKeeperError, match=f"did not listen on 127.0.0.1:{port} within 0.5"):
            _wait_port("127.0.0.1", port, silent, 0.5)  # type: ignore[arg-type]
        assert silent.poll() is not None, "killed and reaped"
    finally:
        silent.kill()
        silent.wait()


def test_a_stopped_cluster_starts_no_bookie(tmp_path: Path) -> None:
    real = RealCluster("zk://127.0.0.1:1/none", tmp_path, [free_port()])
    real.stop_all()
    with pytest.raises(BKeeperError, match=r"^bookie 0 not started: the cluster was stopped$"):
        real.start(0)
    assert real.procs == {}
