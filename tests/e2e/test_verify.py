"""``bkeeper verify`` as a user runs it: a real cluster (ZooKeeper + 5 bookie processes with
auto-recovery, each in a network namespace of its own), a seeded schedule of faults (seed
2383 over 18 s: a paused bookie, a partitioned one, a corrupted journal, ZooKeeper killed, a
full disk), the history checked; and bad input refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bkeeper.verify.schedule import NEMESES, make_schedule


def verify(*args: str, timeout_s: float = 600.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bkeeper", "verify", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def test_a_short_run_with_every_fault_kind_finds_no_violation(
    tmp_path: Path, zookeeper_home: Path | None
) -> None:
    if os.geteuid() != 0:
        pytest.skip("disk-full mounts a tmpfs per bookie, partition makes namespaces: root")
    out = tmp_path / "out"
    result = verify("--duration", "18", "--seed", "2383", "--nemesis", "all",
                    "--settle", "120", "--out", str(out))  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "no violation in 1 run(s)" in result.stdout
    assert "skipped" not in result.stderr
    run = out / "seed-2383"
    schedule = make_schedule(2383, NEMESES, 18.0, 5)
    assert {f.kind for f in schedule} == {"pause", "partition", "corrupt", "zk", "disk-full"}
    assert (run / "schedule.txt").read_text() == "".join(f.describe() + "\n" for f in schedule)
    ops = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    injected = [op["f"] for op in ops if op["process"] == "nemesis" and op["type"] == "ok"]
    assert injected == [f"{step} {f.kind}" for f in schedule for step in ("inject", "heal")]
    assert sum(op["f"] == "append" and op["type"] == "ok" for op in ops) > 1000
    assert any(op["f"] == "fence" and op["type"] == "ok" for op in ops)
    assert any(op["f"] == "read" and op["type"] == "ok" for op in ops)
    assert (run / "repro.txt").read_text().startswith("bkeeper verify --workload ledger")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nemesis", "kill,bogus"], "nemesis: 'bogus' is not one of kill"),
        (["--bookies", "3"], "Invalid value for '--bookies'"),
        (["--duration", "0"], "duration: 0.0 s is not between 1 and 86400"),
        (["--workload", "bogus"], "Invalid value for '--workload'"),
        (["--nemesis", "leader-kill"], "nemesis: 'leader-kill' needs --workload kv"),
    ],
)
def test_bad_options_are_one_line_naming_the_problem(args: list[str], message: str) -> None:
    result = verify(*args, timeout_s=60.0)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_the_log_workload_with_kill_zookeeper_and_partition(
    tmp_path: Path, zookeeper_home: Path | None
) -> None:
    """Two writers fencing each other on a named log, a tailing reader and a subscription's
    consumer, while a bookie is killed, ZooKeeper twice and a bookie partitioned (seed 7)."""
    if os.geteuid() != 0:
        pytest.skip("partition makes network namespaces: root")
    out = tmp_path / "out"
    result = verify("--workload", "log", "--duration", "12", "--seed", "7",
                    "--nemesis", "kill,partition,zk", "--settle", "120", "--out", str(out))  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "no violation in 1 run(s)" in result.stdout
    ops = [json.loads(line) for line in (out / "seed-7" / "history.jsonl").read_text().splitlines()]
    kinds = {op["f"] for op in ops if op["type"] == "ok"}
    assert {"append", "tail", "consume", "ack", "inject partition", "heal zk"} <= kinds
