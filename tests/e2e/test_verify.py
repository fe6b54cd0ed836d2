"""``bkeeper verify`` as a user runs it: a real cluster (ZooKeeper + 5 bookie processes with
auto-recovery, each in a network namespace of its own), seeded schedules of faults that
inject every nemesis, the history checked; and bad input refused."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from bkeeper.verify.schedule import make_schedule
from tests.cli.runner import run_cli

#: Every test here starts processes itself (tests/tiers.py).
pytestmark = pytest.mark.usefixtures("subprocesses")

#: The nemeses of the run that injects every kind but :data:`LATER`'s, in this order (the
#: seed's schedule depends on it).
ONE_RUN = (
    "kill", "pause", "partition", "disk-full", "corrupt", "zk", "client-kill", "corrupt-entry-log",
)  # fmt: skip
#: The nemeses added later: partial partitions, slow disks, a ZooKeeper session-expiry storm.
LATER = ("slow-disk", "zk-pause", "partition-zk", "partition-clients")


def verify(*args: str, timeout_s: float = 600.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bkeeper", "verify", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def assert_appends_after_a_heal(ops: list[dict[str, Any]]) -> None:
    """Appends were acknowledged after the first fault healed: the cluster served writes
    again once a fault was gone (the schedules' first heal comes 2.6 and 4.3 s into runs of
    18 and 26 s). It asserted more than 1,000 appends in all before: a count of the
    machine's speed, which a loaded machine missed."""
    nemesis = [i for i, op in enumerate(ops) if op["process"] == "nemesis" and op["type"] == "ok"]
    assert len(nemesis) >= 2, "no fault was injected and healed"
    first_heal = nemesis[1]
    acked = [i for i, op in enumerate(ops) if op["f"] == "append" and op["type"] == "ok"]
    assert any(i > first_heal for i in acked), "no append acknowledged after the first heal"


def test_a_run_with_every_fault_kind_finds_no_violation(
    tmp_path: Path, zookeeper_home: Path | None
) -> None:
    """Seed 16627 over 27 s injects each of :data:`ONE_RUN` once: a partitioned bookie,
    ZooKeeper killed, a full disk, the workload's client process killed -9 mid-write, a
    corrupted journal, bits flipped in an entry log (found by the bookie's scrub and copied
    back from the other replicas, which the run checks entry by entry on that bookie), a
    killed bookie and a paused one. One run instead of three (the classic kinds, client-kill
    and corrupt-entry-log each had a run of its own, 18, 14 and 20 s, each paying the
    cluster's start and the settle): issue 41's shortest schedule that injects them all."""
    if os.geteuid() != 0:
        pytest.skip("disk-full mounts a tmpfs per bookie, partition makes namespaces: root")
    out = tmp_path / "out"
    result = verify("--duration", "27", "--seed", "16627", "--nemesis", ",".join(ONE_RUN),
                    "--settle", "120", "--out", str(out))  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "no violation in 1 run(s)" in result.stdout
    assert "skipped" not in result.stderr
    run = out / "seed-16627"
    schedule = make_schedule(16627, ONE_RUN, 27.0, 5)
    assert sorted(f.kind for f in schedule) == sorted(ONE_RUN)
    assert (run / "schedule.txt").read_text() == "".join(f.describe() + "\n" for f in schedule)
    ops = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    injected = [op["f"] for op in ops if op["process"] == "nemesis" and op["type"] == "ok"]
    assert injected == [f"{step} {f.kind}" for f in schedule for step in ("inject", "heal")]
    assert_appends_after_a_heal(ops)
    assert any(op["f"] == "fence" and op["type"] == "ok" for op in ops)
    assert any(op["f"] == "read" and op["type"] == "ok" for op in ops)
    assert (run / "repro.txt").read_text().startswith("bkeeper verify --workload ledger")
    done = [op["value"] for op in ops if op["process"] == "nemesis" and op["type"] == "ok"]
    assert sum("flipped in its entry log" in what for what in done) == 1, done
    # The client process: killed while writing; the one started after it stopped cleanly at
    # the end (every append it began was acknowledged).
    assert done.count("client process killed") == done.count("a new client process started") == 1
    appends: dict[str, dict[str, int]] = {}
    for op in ops:
        if op["f"] == "append" and op["process"].startswith("client-"):
            counts = appends.setdefault(op["process"].split("/")[0], {})
            counts[op["type"]] = counts.get(op["type"], 0) + 1
    assert sorted(appends) == ["client-0", "client-1"], appends
    # Whether an append was still unanswered at the SIGKILL is chance: the child appends one
    # after another and also creates ledgers, so the kill can fall between two appends (it
    # did in a CI run: 13,144 invoked, 13,144 acknowledged). Said, not asserted.
    cut_off = appends["client-0"]["invoke"] - appends["client-0"].get("ok", 0)
    assert appends["client-0"].get("ok", 0) > 0 and cut_off >= 0, appends
    print(f"client-0 killed with {cut_off} append(s) unanswered")
    assert appends["client-1"]["invoke"] == appends["client-1"].get("ok") > 0, appends


def test_partial_partitions_a_slow_disk_and_an_expiry_storm_find_no_violation(
    tmp_path: Path, zookeeper_home: Path | None
) -> None:
    """Seed 15221 over 26 s: a bookie cut from ZooKeeper, one whose fsyncs each wait 433 ms,
    one cut from the clients, and ZooKeeper stopped for 12.3 s (past the 10 s session
    timeout: sessions that did not reconnect in time expire when it continues; which ones
    depends on timing, so the test does not count them)."""
    if os.geteuid() != 0:
        pytest.skip("partitions make network namespaces: root")
    out = tmp_path / "out"
    result = verify("--duration", "26", "--seed", "15221", "--nemesis", ",".join(LATER),
                    "--settle", "120", "--out", str(out))  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "no violation in 1 run(s)" in result.stdout
    assert "skipped" not in result.stderr
    schedule = make_schedule(15221, LATER, 26.0, 5)
    assert [(f.kind, f.target) for f in schedule] == [
        ("partition-zk", 0),
        ("slow-disk", 1),
        ("partition-clients", 0),
        ("zk-pause", None),
    ]
    assert schedule[-1].hold_s > 10.0
    ops = [
        json.loads(line) for line in (out / "seed-15221" / "history.jsonl").read_text().splitlines()
    ]
    done = [op["value"] for op in ops if op["process"] == "nemesis" and op["type"] == "ok"]
    assert done == [
        "bookie 0 cut off from zookeeper", "bookie 0 joined to zookeeper again",
        "bookie 1's fsyncs each held up 433 ms", "bookie 1's fsyncs no longer held up",
        "bookie 0 cut off from clients", "bookie 0 joined to clients again",
        "ZooKeeper stopped (SIGSTOP)", "ZooKeeper continued (SIGCONT)",
    ]  # fmt: skip
    assert_appends_after_a_heal(ops)


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
    result = run_cli("verify", *args)  # in this process: refused before anything starts
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


def _mounts_under(root: str) -> set[str]:
    with open("/proc/mounts") as mounts:
        return {line.split()[1] for line in mounts if line.split()[1].startswith(root + "/")}


def _run_root(pid: int) -> str | None:
    """The temporary directory of the run that ``bkeeper verify`` ``pid`` has up: its bookie
    processes are its children, each given ``--data-dir <root>/bookie-<n>``."""
    children = subprocess.run(["pgrep", "-P", str(pid), "-a"], capture_output=True, text=True,
                              check=False).stdout  # fmt: skip
    for line in children.splitlines():
        args = line.split()
        if "bookie" in args and "--data-dir" in args:
            return str(Path(args[args.index("--data-dir") + 1]).parent)
    return None


def _stacks(pid: int) -> str:
    """Where a process hangs (``py-spy dump``, if installed), for the failure message."""
    if shutil.which("py-spy") is None:
        return "(py-spy not installed)"
    dump = subprocess.run(["py-spy", "dump", "--pid", str(pid)], capture_output=True, text=True,
                          check=False, timeout=60)  # fmt: skip
    return dump.stdout + dump.stderr


def _processes_under(root: str) -> list[str]:
    found = subprocess.run(["pgrep", "-fa", root], capture_output=True, text=True, check=False)
    return found.stdout.splitlines()


@pytest.mark.timeout(480)
def test_sigterm_cleans_up_namespaces_mounts_and_processes(tmp_path: Path) -> None:
    """A campaign stopped with SIGTERM (as a CI runner or systemd stops it) unwinds as Ctrl-C
    does: no network namespace, tmpfs mount or bookie process of its run is left behind."""
    if os.geteuid() != 0:
        pytest.skip("partition and disk-full need root")
    proc = subprocess.Popen(
        [sys.executable, "-m", "bkeeper", "verify", "--nemesis", "partition,disk-full",
         "--duration", "120", "--seed", "3", "--out", str(tmp_path / "out")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    namespace = f"bkv{proc.pid % 100_000}n0"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # up: its bookies run on their own filesystems
            root = _run_root(proc.pid)
            if root is not None and len(_mounts_under(root)) == 5:
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.5)
        else:
            pytest.fail("the run's cluster never came up")
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                                check=False).stdout  # fmt: skip
        assert namespace in listed
        proc.send_signal(signal.SIGTERM)
        try:
            # Bookies stopped mid-start finish starting first, and each may take the
            # sandbox's stop timeout (30 s) before it is killed: slow on a loaded machine.
            _out, err = proc.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running 240 s after SIGTERM; its stacks:\n{_stacks(proc.pid)}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0
    assert "Traceback" not in err
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                            check=False).stdout  # fmt: skip
    assert namespace not in listed
    assert _mounts_under(root) == set(), err
    # A bookie spawned in the very moment the stop landed is not yet known to the sandbox;
    # it is the run's child with PR_SET_PDEATHSIG, so the run's exit sends it SIGTERM: it
    # must be gone shortly after (seen once in CI: still there right at the run's exit).
    deadline = time.monotonic() + 15
    while _processes_under(root) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _processes_under(root) == []
