"""``bkeeper verify`` as a person meets it (issue 39): ``--help`` says what it needs, a
machine without those privileges is told at once in one line, progress shows while it runs,
its table fits 80 columns, and Ctrl-C stops it within 3 s, cleans up and says so.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from bkeeper.cli.verify import _table
from bkeeper.verify.check import Verdict
from bkeeper.verify.netns import (
    CAP_NET_ADMIN,
    CAP_SYS_ADMIN,
    effective_capabilities,
    privileges_missing,
)
from bkeeper.verify.run import RunResult
from bkeeper.verify.schedule import MEMBER_PARTITIONS, NEMESES, PARTITIONS, Fault

PARTITIONING = PARTITIONS | MEMBER_PARTITIONS
NOISE = ("Traceback", "never retrieved", "Task was destroyed", "Exception ignored")


def bkeeper(*args: str, timeout_s: float = 60.0, prefix: tuple[str, ...] = ()) -> (
    subprocess.CompletedProcess[str]
):  # fmt: skip
    return subprocess.run(
        [*prefix, sys.executable, "-m", "bkeeper", *args],
        capture_output=True, text=True, timeout=timeout_s, check=False,
    )  # fmt: skip


def test_help_says_what_verify_needs_and_what_happens_without(subprocesses: None) -> None:
    result = bkeeper("verify", "--help")
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    for needed in ("root", "CAP_NET_ADMIN", "CAP_SYS_ADMIN", "ip netns", "network namespace",
                   "tmpfs", "stops at once", "--nemesis kill,pause", "Ctrl-C", "130"):  # fmt: skip
        assert needed in text, needed


def test_privileges_missing_names_the_nemeses_and_what_runs_instead() -> None:
    everything = 1 << CAP_NET_ADMIN | 1 << CAP_SYS_ADMIN
    assert privileges_missing(NEMESES, PARTITIONING, everything, ip_found=True) is None
    assert privileges_missing(("kill", "zk"), PARTITIONING, 0, ip_found=False) is None
    line = privileges_missing(("kill", "partition", "disk-full", "zk"), PARTITIONING, 0, True)
    assert line == (
        "nemesis partition, disk-full need root (CAP_NET_ADMIN and CAP_SYS_ADMIN): partitions "
        "put each bookie in a network namespace (ip netns), disk-full mounts a tmpfs per "
        "bookie; run as root, or without them: --nemesis kill,zk"
    )
    # root without iproute2: only the partitions are out, and the line says why
    line = privileges_missing(("partition", "disk-full"), PARTITIONING, everything, False)
    assert line is not None and line.startswith("nemesis partition needs root")
    assert "the `ip` command (iproute2)" in line and line.endswith("--nemesis disk-full")


def test_capabilities_are_read_from_proc_status() -> None:
    status = "Name:\tpython\nCapInh:\t0000000000000000\nCapEff:\t0000000000201000\n"
    assert effective_capabilities(status) == 1 << CAP_NET_ADMIN | 1 << CAP_SYS_ADMIN
    assert effective_capabilities("Name:\tpython\n") == 0


def test_without_privileges_verify_fails_at_once_in_one_line(subprocesses: None) -> None:
    """Before, it started a cluster, skipped the nemeses that needed root, and said so at the
    end (about 40 s later)."""
    prefix: tuple[str, ...] = ()
    if effective_capabilities() >> CAP_NET_ADMIN & 1:
        if shutil.which("setpriv") is None:
            pytest.skip("running with CAP_NET_ADMIN and no setpriv to drop it")
        # root, but with no capability left: as an unprivileged user is
        prefix = ("setpriv", "--inh-caps=-all", "--bounding-set=-all", "--")
    started = time.monotonic()
    result = bkeeper("verify", "--nemesis", "kill,partition,zk", "--duration", "5",
                     "--out", "/nonexistent/never-made", prefix=prefix)  # fmt: skip
    assert time.monotonic() - started < 15, "it ran instead of refusing"
    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines() == [
        "error: nemesis partition needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN): partitions "
        "put each bookie in a network namespace (ip netns), disk-full mounts a tmpfs per "
        "bookie; run as root, or without them: --nemesis kill,zk"
    ]


def _result(seed: int, kinds: list[str]) -> RunResult:
    faults = [(Fault(1.0, kind, 0, 1.0), "done") for kind in kinds]
    verdict = Verdict(count=0, acknowledged=1_234_567, reads=98_765, ledgers=12_345)
    return RunResult(seed, faults, {}, verdict, 9_999_999, 1_234_567, 12_345, Path("h"),
                     "bkeeper verify", 3_599.0)  # fmt: skip


def test_the_table_fits_80_columns_wrapping_cells_not_titles() -> None:
    """Before: the faults cell of a run with every nemesis took the table past 80 columns
    and rich cut the numbers' titles ('violat…')."""
    console = Console(width=80, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(_table([_result(2_147_483_647, list(NEMESES)), _result(7, [])]))
    lines = console.export_text().splitlines()
    assert max(len(line) for line in lines) <= 80, "\n".join(lines)
    header = next(line for line in lines if "seed" in line)
    for title in ("seed", "faults", "ledgers", "acked", "unknown", "reads", "violations"):
        assert re.search(rf"\b{title}\b", header), header
    body = "\n".join(lines)
    for number in ("2147483647", "12,345", "1,234,567", "98,765", "3599"):
        assert number in body, body
    assert "kill x1" in body and "none" in body, body


# -- a run, interrupted ------------------------------------------------------------------
def _netns() -> str:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                          check=False).stdout  # fmt: skip


@pytest.mark.timeout(240)
def test_ctrl_c_mid_verify_stops_within_3_s_cleans_up_and_says_so(
    subprocesses: None, tmp_path: Path
) -> None:
    """One short run (partitions and full disks: namespaces and mounts to clean up), with a
    progress line at least every 2 s (counted over the run), interrupted once its workload
    runs. Before: Ctrl-C took up to 13 s, printed 'aborted' and three 'Future exception was
    never retrieved' lines; nothing was printed for the first ~40 s."""
    if os.geteuid() != 0:
        pytest.skip("partition and disk-full need root")
    proc = subprocess.Popen(
        [sys.executable, "-m", "bkeeper", "verify", "--nemesis", "kill,partition,disk-full",
         "--duration", "60", "--seed", "5", "--out", str(tmp_path / "out")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    assert proc.stderr is not None
    lines: list[str] = []
    started = time.monotonic()
    try:
        for line in proc.stderr:  # until the progress says the workload runs
            lines.append(line.rstrip("\n"))
            if "workload with faults" in line:
                break
            assert time.monotonic() - started < 150, lines
        else:
            pytest.fail(f"no workload phase: {lines}, exit {proc.wait()}")
        time.sleep(1.0)
        namespace = f"bkv{proc.pid % 100_000}n0"
        assert namespace in _netns()
        root = _run_root(proc.pid)
        assert root is not None and Path(root).is_dir()
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        out, rest = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    err = lines + [line for line in rest.splitlines() if line]
    assert proc.returncode == 130, err
    assert not any(noise in line for line in err for noise in NOISE), err
    # nothing else either: no log line, no "Exception in thread", no kazoo
    assert all(line.startswith(("verify: ", "interrupted: ")) for line in err), err
    # a progress line in each phase up to the workload (how many lines come in a given wall
    # time is the machine's speed, not asserted)
    progress = [line for line in lines if line.startswith("verify: run 1 of 1 (seed 5): ")]
    assert any("starting ZooKeeper and 5 bookies" in line for line in progress), lines
    assert "workload with faults" in progress[-1], lines
    last = err[-1]
    found = re.fullmatch(
        r"interrupted: run 1 of 1 \(seed 5\) stopped in (\d+\.\d) s; cleaned up (\d+) "
        r"processes, 5 namespaces, 5 tmpfs mounts, 1 temporary directory",
        last,
    )
    assert found, err
    # how long the stop took is reported (the 3 s budget is held where it is enforced, on
    # fake processes: tests/verify/test_interrupt.py); the communicate() above is the guard
    assert int(found.group(2)) >= 6, last  # ZooKeeper and 5 bookies at least
    assert namespace not in _netns()
    assert not Path(root).exists()
    assert root not in Path("/proc/mounts").read_text()
    left = subprocess.run(["pgrep", "-fa", root], capture_output=True, text=True, check=False)
    assert left.stdout == ""
    assert out == ""  # no table of a run that did not finish


def _run_root(pid: int) -> str | None:
    """The run's temporary directory: its bookies (children) get ``--data-dir <root>/...``."""
    children = subprocess.run(["pgrep", "-P", str(pid), "-a"], capture_output=True, text=True,
                              check=False).stdout  # fmt: skip
    for line in children.splitlines():
        args = line.split()
        if "--data-dir" in args:
            return str(Path(args[args.index("--data-dir") + 1]).parent)
    return None
