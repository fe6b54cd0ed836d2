"""``bkeeper verify --metadata URI`` as a user runs it against a cluster that is not its
own (three real bookie processes on the session's ZooKeeper): the ledger workload with its
client process killed on schedule and the log workload, each history checked, and nothing of
the run's left in the cluster afterwards; and what such a run cannot do, refused."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bkeeper.client import BookKeeper
from bkeeper.meta.cluster import ClusterMetadata
from bkeeper.namedlog import LogConfig, NamedLogs
from bkeeper.testing.zookeeper import ZooKeeperServer
from tests.client.conftest import RealCluster, _started

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
async def given(
    zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[RealCluster]:
    async with _started(zookeeper, tmp_path_factory.mktemp("given"), 3) as cluster:
        yield cluster


def verify(*args: str, timeout_s: float = 300.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bkeeper", "verify", *args],
        capture_output=True, text=True, timeout=timeout_s, check=False,
    )  # fmt: skip


async def ledgers_of(uri: str) -> list[int]:
    async with await ClusterMetadata.open(uri) as cluster:
        return [int(x) async for x in cluster.ledgers.ledger_ids()]


async def test_the_ledger_workload_on_a_given_cluster_leaves_nothing_behind(
    given: RealCluster, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    result = verify("--metadata", given.uri, "--duration", "8", "--seed", "11",
                    "--out", str(out))  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "no violation in 1 run(s)" in result.stdout
    ops = [json.loads(line) for line in (out / "seed-11" / "history.jsonl").open()]
    injected = [op["f"] for op in ops if op["process"] == "nemesis" and op["type"] == "ok"]
    assert injected and set(injected) == {"inject client-kill", "heal client-kill"}
    assert sum(op["f"] == "append" and op["type"] == "ok" for op in ops) > 100
    assert any(op["f"] == "fence" and op["type"] == "ok" for op in ops)
    repro = (out / "seed-11" / "repro.txt").read_text()
    assert f"--metadata {given.uri}" in repro and "--bookies" not in repro
    assert await ledgers_of(given.uri) == []


async def test_the_log_workload_on_a_given_cluster_leaves_nothing_behind(
    given: RealCluster, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    result = verify("--metadata", given.uri, "--workload", "log", "--nemesis", "none",
                    "--duration", "6", "--seed", "12", "--out", str(out))  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    ops = [json.loads(line) for line in (out / "seed-12" / "history.jsonl").open()]
    assert sum(op["f"] == "append" and op["type"] == "ok" for op in ops) > 100
    async with await BookKeeper(given.uri).start() as bk:
        assert await NamedLogs(bk, LogConfig()).names() == []
    assert await ledgers_of(given.uri) == []


def test_what_a_run_on_a_given_cluster_cannot_do_is_refused(given: RealCluster) -> None:
    for args, why in [
        (("--nemesis", "client-kill,kill"), "'kill' works on the cluster's own processes"),
        (("--workload", "kv"), "with --metadata: ledger, log"),
    ]:
        result = verify("--metadata", given.uri, *args)
        assert result.returncode == 2, result.stderr
        assert why in result.stderr
    result = verify("--metadata", "memory://one-process")
    assert result.returncode == 2 and "need a cluster they can reach" in result.stderr
    unreachable = given.uri.replace(given.uri.split("/")[2], "127.0.0.1:1")
    result = verify("--metadata", unreachable, "--duration", "2")
    assert result.returncode == 1
    assert "127.0.0.1:1: no session within" in result.stderr
