"""``bkeeper meta format|show`` and ``bkeeper zookeeper``."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from bkeeper.cli.meta import meta
from bkeeper.meta import BookieServiceInfo, ClusterMetadata, DigestType, LedgerMetadata
from bkeeper.meta.memory import drop_memory_tree


@pytest.fixture
def memory_uri() -> Iterator[str]:
    name = uuid.uuid4().hex[:12]
    yield f"memory://{name}/ledgers"
    drop_memory_tree(name)


def test_format_then_refuse_then_force(memory_uri: str) -> None:
    runner = CliRunner()
    first = runner.invoke(meta, ["format", "--metadata", memory_uri])
    assert first.exit_code == 0, first.output
    assert "instance id" in first.output
    again = runner.invoke(meta, ["format", "--metadata", memory_uri])
    assert again.exit_code != 0 and "force" in str(again.exception)
    forced = runner.invoke(meta, ["format", "--metadata", memory_uri, "--force"])
    assert forced.exit_code == 0, forced.output


def test_show_decodes_nodes(memory_uri: str) -> None:
    asyncio.run(_populate(memory_uri))
    runner = CliRunner()
    shown = runner.invoke(meta, ["show", "--metadata", memory_uri, "--ledger", "1"])
    assert shown.exit_code == 0, shown.output
    assert "/ledgers/00/0000/L0001" in shown.output and "CLOSED" in shown.output
    assert "b1:3181, b2:3181" in shown.output and "pw" not in shown.output
    bookie = runner.invoke(meta, ["show", "--metadata", memory_uri, "available/b1:3181"])
    assert "bookie-rpc://10.0.0.1:3181" in bookie.output, bookie.output
    layout = runner.invoke(meta, ["show", "--metadata", memory_uri, "/ledgers/LAYOUT"])
    assert "HierarchicalLedgerManagerFactory:1" in layout.output
    root = runner.invoke(meta, ["show", "--metadata", memory_uri, "/ledgers"])
    assert "INSTANCEID" in root.output and "available" in root.output
    missing = runner.invoke(meta, ["show", "--metadata", memory_uri, "nothing/here"])
    assert missing.exit_code != 0 and "no such node" in missing.output


async def _populate(uri: str) -> None:
    async with await ClusterMetadata.open(uri) as metadata:
        await metadata.format()
        new = LedgerMetadata.new(("b1:3181", "b2:3181"), 2, 2, DigestType.CRC32, b"pw")
        await metadata.ledgers.create(new.closed(9, 900), ledger_id=1)
        info = BookieServiceInfo.for_bookie("10.0.0.1", 3181).encode()
        await metadata.store.create("/ledgers/available/b1:3181", info)


@pytest.mark.usefixtures("zookeeper_home")
def test_zookeeper_command_runs_and_stops(tmp_path: Path) -> None:
    """The command starts a server, says where, and stops it (no java left) on SIGTERM."""
    command = [sys.executable, "-c", "from bkeeper.cli.zookeeper import zookeeper; zookeeper()"]
    process = subprocess.Popen(
        [*command, "--data-dir", str(tmp_path / "zk"), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    java_pid = None
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert "ZooKeeper is up on 127.0.0.1:" in line, line
        java_pid = int(line.split("(pid ")[1].split(")")[0])
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0
        assert not _running(java_pid), "the wrapper stopped its java before it exited"
    finally:
        # On a failure, end both: the wrapper, then its java (a grandchild, which the
        # kernel signals when the wrapper dies, but which nobody here waits for).
        if process.poll() is None:
            process.kill()
            process.wait()
        if java_pid is not None:
            _end(java_pid)


def _running(pid: int) -> bool:
    """True while ``pid`` runs (a zombie, exited but not yet reaped, does not count)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def _end(pid: int, timeout_s: float = 15.0) -> None:
    """Wait for ``pid`` to exit; kill it if it is still there after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _running(pid):
        os.kill(pid, signal.SIGKILL)
