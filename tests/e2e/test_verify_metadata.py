"""``bkeeper verify --metadata URI`` as a user runs it against a cluster that is not its
own (three real bookie processes on the session's ZooKeeper): the ledger workload with its
client process killed on schedule and the log workload, each history checked, and nothing of
the run's left in the cluster afterwards; and what such a run cannot do, refused."""

from __future__ import annotations

import json
from pathlib import Path

from bkeeper.client import BookKeeper
from bkeeper.meta.cluster import ClusterMetadata
from bkeeper.namedlog import LogConfig, NamedLogs
from bkeeper.verify.history import History
from bkeeper.verify.workload import LedgerWorkload, WorkloadConfig
from tests.client.conftest import RealCluster, shared_cluster
from tests.e2e.test_verify import verify

__all__ = ["shared_cluster"]  # the module's cluster (its fixture)


async def ledgers_of(uri: str) -> list[int]:
    async with await ClusterMetadata.open(uri) as cluster:
        return [int(x) async for x in cluster.ledgers.ledger_ids()]


async def test_the_ledger_workload_on_a_given_cluster_leaves_nothing_behind(
    shared_cluster: RealCluster, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    result = verify("--metadata", shared_cluster.uri, "--duration", "8", "--seed", "11",
                    "--out", str(out))  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "no violation in 1 run(s)" in result.stdout
    ops = [json.loads(line) for line in (out / "seed-11" / "history.jsonl").open()]
    injected = [op["f"] for op in ops if op["process"] == "nemesis" and op["type"] == "ok"]
    assert injected and set(injected) == {"inject client-kill", "heal client-kill"}
    # The client process started after the last kill wrote (not a count of appends: that
    # measured the machine's speed).
    last_heal = max(i for i, op in enumerate(ops) if op["f"] == "heal client-kill")
    restarted = [op for op in ops[last_heal + 1 :] if op["process"].startswith("client-")]
    assert any(op["f"] == "append" and op["type"] == "ok" for op in restarted), (
        "no append of a client process acknowledged after the last one was started"
    )
    assert any(op["f"] == "fence" and op["type"] == "ok" for op in ops)
    repro = (out / "seed-11" / "repro.txt").read_text()
    assert f"--metadata {shared_cluster.uri}" in repro and "--bookies" not in repro
    assert await ledgers_of(shared_cluster.uri) == []


async def test_the_log_workload_on_a_given_cluster_leaves_nothing_behind(
    shared_cluster: RealCluster, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    result = verify("--metadata", shared_cluster.uri, "--workload", "log", "--nemesis", "none",
                    "--duration", "6", "--seed", "12", "--out", str(out))  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    ops = [json.loads(line) for line in (out / "seed-12" / "history.jsonl").open()]
    assert {"append", "tail", "consume", "ack"} <= {op["f"] for op in ops if op["type"] == "ok"}
    async with await BookKeeper(shared_cluster.uri).start() as bk:
        assert await NamedLogs(bk, LogConfig()).names() == []
    assert await ledgers_of(shared_cluster.uri) == []


async def test_a_client_process_killed_as_it_starts_writing_leaves_no_unknown_ledger(
    shared_cluster: RealCluster, tmp_path: Path
) -> None:
    """A scheduled kill waits for the client process to be writing: it lands as the first
    append is sent, while the other writer's create is in flight (the usual case when the
    process took longer to start than the kill's time, on a loaded machine). Each ledger id
    a create was sent for is known, so the run deletes that ledger too (before, 7 of 8 such
    kills left one nobody had heard of)."""
    uri = shared_cluster.uri
    config = WorkloadConfig(client_process_log=str(tmp_path / "client.log"))
    for seed in range(3):
        workload = LedgerWorkload(uri, History(), seed, config)
        await workload.restart_client_process()
        await workload.kill_client_process()
        left = await ledgers_of(uri)
        assert set(left) <= {*workload.created, *workload.create_sent}, (left, workload.created)
        async with await BookKeeper(uri).start() as bk:
            for ledger_id in left:
                await bk.delete_ledger(ledger_id, fence=False)
    assert await ledgers_of(uri) == []


def test_what_a_run_on_a_given_cluster_cannot_do_is_refused(shared_cluster: RealCluster) -> None:
    for args, why in [
        (("--nemesis", "client-kill,kill"), "'kill' works on the cluster's own processes"),
        (("--workload", "kv"), "with --metadata: ledger, log"),
    ]:
        result = verify("--metadata", shared_cluster.uri, *args)
        assert result.returncode == 2, result.stderr
        assert why in result.stderr
    result = verify("--metadata", "memory://one-process")
    assert result.returncode == 2 and "need a cluster they can reach" in result.stderr
    unreachable = shared_cluster.uri.replace(shared_cluster.uri.split("/")[2], "127.0.0.1:1")
    result = verify("--metadata", unreachable, "--duration", "2")
    assert result.returncode == 1
    assert "cannot reach ZooKeeper at 127.0.0.1:1: connection refused" in result.stderr
