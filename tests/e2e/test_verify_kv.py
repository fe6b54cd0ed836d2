"""``bkeeper verify --workload kv`` as a user runs it: a real cluster, three ``bkeeper kv
serve`` members, clients calling get/put/delete/CAS while leaders are stopped past their
session timeout and killed, and bookies killed and stopped; every history checked
linearizable (with final reads: no acknowledged write lost) and the members converged.

Seed 5 (leader-pause) is the schedule that caught a leader answering linearizable reads
from what it believed (no barrier) while it was stopped and another took writes: two
pauses of 9.6 and 10.2 s, past the fail-over."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bkeeper.verify.schedule import make_schedule


def verify(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bkeeper", "verify", "--workload", "kv", *args],
        capture_output=True,
        text=True,
        timeout=600.0,
        check=False,
    )


def assert_served_around_the_faults(ops: list[dict[str, Any]], kinds: tuple[str, ...]) -> None:
    """The members acknowledged operations of ``kinds`` before the first fault and after the
    last heal: the store served on both sides of the faults. (It asserted more than 500 of
    them in all: a count of the machine's speed.)"""
    nemesis = [i for i, op in enumerate(ops) if op["process"] == "nemesis" and op["type"] == "ok"]
    assert len(nemesis) >= 2, "no fault was injected and healed"
    done = [
        i
        for i, op in enumerate(ops)
        if op["process"].startswith("kv-") and op["type"] == "ok" and op["f"] in kinds
    ]
    assert any(i < nemesis[0] for i in done), f"no {'/'.join(kinds)} before the first fault"
    assert any(i > nemesis[-1] for i in done), f"no {'/'.join(kinds)} after the last heal"


def test_kv_histories_under_leader_pauses_are_linearizable(
    tmp_path: Path, zookeeper_home: Path | None
) -> None:
    """Seed 5: the schedule that catches a read path without barrier or lease. Leader and
    bookie kills are in the kv campaigns (docs/verification.md) and, with real processes,
    tests/e2e/test_kv.py: one run here keeps the suite short."""
    seed, nemeses, kinds = 5, "leader-pause", {"leader-pause"}
    out = tmp_path / "out"
    result = verify("--duration", "25", "--seed", str(seed), "--nemesis", nemeses,
                    "--settle", "60", "--out", str(out))  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "no violation in 1 run(s)" in result.stdout
    schedule = make_schedule(seed, nemeses.split(","), 25.0, 5)
    assert {f.kind for f in schedule} >= kinds
    ops = [json.loads(line) for line in (out / f"seed-{seed}" / "history.jsonl").open()]
    injected = [op["f"] for op in ops if op["process"] == "nemesis" and op["type"] == "ok"]
    assert injected == [f"{step} {f.kind}" for f in schedule for step in ("inject", "heal")]
    assert_served_around_the_faults(ops, ("get",))
    assert_served_around_the_faults(ops, ("put", "delete", "cas"))
    assert [op["f"] for op in ops if op["process"] == "final" and op["type"] == "ok"] == ["get"] * 6


@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")
def test_kv_histories_under_partitions_of_the_leader_are_linearizable(
    tmp_path: Path, zookeeper_home: Path | None
) -> None:
    """Seed 8 (a read lease): the leader cut from ZooKeeper twice (3.3 s and 6.9 s: past its
    4 s session, so another member takes over while the cut one still serves clients and
    reaches the bookies), from everyone (2.5 s) and from the bookies (2.9 s)."""
    seed, nemeses = 8, "leader-partition,leader-partition-zk,leader-partition-bookies"
    out = tmp_path / "out"
    result = verify("--duration", "25", "--seed", str(seed), "--nemesis", nemeses,
                    "--settle", "60", "--out", str(out))  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "no violation in 1 run(s)" in result.stdout
    schedule = make_schedule(seed, nemeses.split(","), 25.0, 5)
    assert {f.kind for f in schedule} == set(nemeses.split(","))
    ops = [json.loads(line) for line in (out / f"seed-{seed}" / "history.jsonl").open()]
    injected = [op for op in ops if op["process"] == "nemesis" and op["type"] == "ok"]
    assert [op["f"] for op in injected] == [
        f"{step} {f.kind}" for f in schedule for step in ("inject", "heal")
    ]
    assert "cut off from ZooKeeper" in injected[0]["value"]
    assert_served_around_the_faults(ops, ("put", "delete", "cas"))
    # the member cut from ZooKeeper for 6.9 s (the leader, unless an election was under way)
    # lost its session meanwhile
    logs = "".join(p.read_text() for p in (out / f"seed-{seed}").glob("member-*.log"))
    assert "session expired" in logs
