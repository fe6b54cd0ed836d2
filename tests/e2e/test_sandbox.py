"""``bkeeper sandbox``: the local cluster in one command, up in under 15 s, gone without a trace
on SIGTERM, its data kept across restarts."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import pytest

from bkeeper.common.errors import ConfigError
from bkeeper.meta.cluster import ClusterMetadata
from bkeeper.testing.benchmarks import free_port, free_port_range
from bkeeper.testing.sandbox import Sandbox, SandboxConfig
from tests.e2e.helpers import bkeeper, processes_mentioning

#: Its tests start processes (tests/tiers.py).
pytestmark = pytest.mark.usefixtures("subprocesses")

#: The bookies' wait between garbage collection passes: no pass runs during a test (the first
#: comes 45 min or more after a bookie starts), so each bookie's GC status is known.
GC_WAIT_MS = 3_600_000


def start(
    data_dir: Path, zk_port: int, bookie_port: int, http_port: int
) -> tuple[subprocess.Popen[str], str]:
    """Start a sandbox; once ready, what it printed on stderr is in ``<data_dir>.err``."""
    with open(f"{data_dir}.err", "w") as err:
        proc = _popen(data_dir, zk_port, bookie_port, http_port, err)
    assert proc.stdout is not None
    line = proc.stdout.readline()  # blocks until the sandbox is ready (or dies)
    assert line.startswith("metadata URI: "), f"sandbox did not start: {line!r}"
    return proc, line.removeprefix("metadata URI: ").strip()


def _popen(
    data_dir: Path, zk_port: int, bookie_port: int, http_port: int, err: IO[str]
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable, "-m", "bkeeper", "sandbox", "--bookies", "3",
            "--data-dir", str(data_dir), "--zookeeper-port", str(zk_port),
            "--bookie-port", str(bookie_port), "--http-port", str(http_port),
            "--dashboard-port", str(free_port()), "-o", f"gc_wait_ms={GC_WAIT_MS}",
        ],
        stdout=subprocess.PIPE,
        stderr=err,
        text=True,
    )  # fmt: skip


def stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0


def test_sandbox_starts_stops_clean_and_keeps_data(tmp_path: Path) -> None:
    data_dir = tmp_path / "sandbox-data"
    zk_port, bookie_port, http_port = free_port(), free_port_range(3), free_port_range(3)
    proc, uri = start(data_dir, zk_port, bookie_port, http_port)
    try:
        listing = bkeeper(uri, "shell", "listbookies")
        assert listing.returncode == 0
        assert sum(f"127.0.0.1:{bookie_port + i}" in listing.stdout for i in range(3)) == 3
        for i in range(3):  # each bookie's admin server, found from its registration
            bookie = f"127.0.0.1:{bookie_port + i}"
            status = bkeeper(uri, "shell", "gcstatus", "--bookie", bookie, "--json")
            assert status.returncode == 0, status.stderr
            gc = json.loads(status.stdout)  # from this bookie: the GC settings it was given
            assert (gc["gc_wait_ms"], gc["running"], gc["passes"], gc["last_pass"]) == (
                GC_WAIT_MS,
                False,
                0,
                None,
            ), gc
        printed = Path(f"{data_dir}.err").read_text().splitlines()
        assert [line for line in printed if line.startswith("bookie ")] == [
            f"bookie {i}: 127.0.0.1:{bookie_port + i} (admin http://127.0.0.1:{http_port + i})"
            for i in range(3)
        ]
        wrote = bkeeper(uri, "shell", "simpletest", "--entries", "50", "--keep")
        assert wrote.returncode == 0, wrote.stderr
        # Auto-recovery runs in every bookie by default: one of them is the auditor.
        assert "auto-recovery: in every bookie (one is elected auditor)" in printed
        auditor = wait_auditor(uri)
        assert auditor in {f"127.0.0.1:{bookie_port + i}" for i in range(3)}
    finally:
        stop(proc)
    deadline = time.monotonic() + 10
    while processes_mentioning(str(data_dir)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_mentioning(str(data_dir)) == [], "processes left behind"

    proc, uri = start(data_dir, zk_port, bookie_port, http_port)  # same data dir: same cluster
    try:
        listing = bkeeper(uri, "shell", "listledgers", "--meta")
        rows = [line.split("│")[1:-1] for line in listing.stdout.splitlines() if "│" in line]
        assert [[cell.strip() for cell in row[1:4]] for row in rows] == [
            ["CLOSED", "3/3/2", "49"]
        ], listing.stdout
    finally:
        stop(proc)
    assert processes_mentioning(str(data_dir)) == []


def wait_auditor(uri: str, timeout_s: float = 60.0) -> str:
    """The auditor ``shell whoisauditor`` names, once there is one."""
    deadline = time.monotonic() + timeout_s
    while True:
        who = bkeeper(uri, "shell", "whoisauditor")
        if who.returncode == 0 or time.monotonic() > deadline:
            assert who.returncode == 0, who.stderr
            return who.stdout.strip()
        time.sleep(0.2)


def test_autorecovery_options_need_autorecovery(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bkeeper", "sandbox", "--no-autorecovery", "--data-dir",
         str(tmp_path / "never"), "-o", "ledgers_in_parallel=2"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        "error: ledgers_in_parallel: auto-recovery options, but --no-autorecovery "
        "(see 'bkeeper sandbox --help')"
    ]
    bad = subprocess.run(
        [sys.executable, "-m", "bkeeper", "sandbox", "--data-dir", str(tmp_path / "never"),
         "-o", "ledgers_in_parallel=0"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert bad.returncode == 2, bad.stderr
    assert bad.stderr.splitlines()[0].startswith(
        "error: -o ledgers_in_parallel=0: ledgers_in_parallel: must be a positive integer, got 0"
    )
    assert not (tmp_path / "never").exists()


def test_overlapping_ports_are_refused_naming_them() -> None:
    with pytest.raises(ConfigError) as caught:
        SandboxConfig(Path("/x"), zookeeper_port=2181, bookie_port_base=8079, http_port_base=8080)
    assert str(caught.value) == (
        "the sandbox's ports overlap: ZooKeeper 2181, bookies 8079-8082, admin 8080-8083"
    )
    with pytest.raises(ConfigError, match=r"ZooKeeper 3182, bookies 3181-3184$"):  # 4 bookies
        SandboxConfig(Path("/x"), zookeeper_port=3182)
    SandboxConfig(Path("/x"), bookie_port_base=8076, http_port_base=8080)  # adjacent: fine


def _nice(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rfind(")") + 2 :].split()[16])  # field 19: nice


def test_autorecovery_in_processes_of_its_own_at_a_nice_value(tmp_path: Path) -> None:
    config = SandboxConfig(
        data_dir=tmp_path / "sb",
        bookies=3,
        zookeeper_port=free_port(),
        bookie_port_base=free_port_range(3),
        autorecovery_nice=10,
        bookie_args=("-o", "ledgers_in_parallel=3", "-o", "gc_allowed_on_full_disk=false"),
    )
    with Sandbox(config) as box:
        # each option goes where it is known: auto-recovery's to its processes
        assert box.autorecovery_command(0)[-2:] == ["-o", "ledgers_in_parallel=3"]
        assert box.bookie_command(0)[-2:] == ["-o", "gc_allowed_on_full_disk=false"]
        assert len(box.autorecoveries) == 3
        assert all("--autorecovery" not in box.bookie_command(i) for i in range(3))
        base = os.nice(0)
        assert [_nice(p.pid) for p in box.autorecoveries] == [min(base + 10, 19)] * 3
        assert [_nice(p.pid) for p in box.bookies] == [base] * 3

        async def auditor() -> str | None:
            async with await ClusterMetadata.open(box.metadata_uri) as cluster:
                while (found := await cluster.underreplication.current_auditor()) is None:
                    await asyncio.sleep(0.05)
                return found

        ids = {":".join(map(str, box.bookie_address(i))) for i in range(3)}
        assert asyncio.run(asyncio.wait_for(auditor(), 60)) in ids  # named as its bookie
        box.kill_bookie(2)  # its host died: both go
        assert box.bookies[2].wait(30) == -signal.SIGKILL
        assert box.autorecoveries[2].wait(30) == -signal.SIGKILL
    with pytest.raises(ConfigError, match="autorecovery_nice"):
        SandboxConfig(tmp_path, autorecovery_nice=20)


def test_a_sandbox_stops_at_once_with_its_bookie_and_zookeeper_paused(tmp_path: Path) -> None:
    """A verify campaign told to stop during a pause fault waited out each stop timeout:
    a process stopped with SIGSTOP takes SIGTERM only once continued (a bookie was killed
    after 30 s, ZooKeeper after 10 more). The sandbox continues them first."""
    import threading

    config = SandboxConfig(
        data_dir=tmp_path / "sb",
        bookies=1,
        zookeeper_port=free_port(),
        bookie_port_base=free_port(),
        stop_timeout_s=600.0,  # what the stop would wait for a bookie that takes no SIGTERM
    )
    box = Sandbox(config)
    box.start()
    bookie = box.bookies[0]
    zookeeper = box.zookeeper.pid
    assert zookeeper is not None
    box.kill_bookie(0, signal.SIGSTOP)
    os.kill(zookeeper, signal.SIGSTOP)
    stopping = threading.Thread(target=box.stop)
    stopping.start()
    stopping.join(120)
    assert not stopping.is_alive(), "the sandbox's stop waits on its paused processes"
    assert bookie.returncode != -signal.SIGKILL  # it took the SIGTERM
