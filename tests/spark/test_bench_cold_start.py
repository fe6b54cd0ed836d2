"""``bkeeper bench spark --cold-start``'s runs work (new JVMs; figures are in
docs/benchmarks.md, never asserted here), and what a Spark Python worker imports."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.client.conftest import RealCluster

pytest.importorskip("pyspark")

pytestmark = pytest.mark.integration

#: Three new JVMs (every code path of a run: a batch read, the floor's source, a stream and
#: its restart); the full bench runs six.
KINDS = ("floor-batch", "stream", "restart")


@pytest.mark.timeout(900)  # three JVMs one after the other, on a loaded machine
def test_cold_start_runs_each_kind_in_a_new_jvm(
    spark_cluster: RealCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from bkeeper.cli.bench.spark import print_cold_start
    from bkeeper.spark.bench_cold import bench_spark_cold_start

    seen: list[str] = []
    runs = bench_spark_cold_start(
        spark_cluster.uri,
        "unused-by-these-kinds",
        master="local[2]",
        scratch=str(tmp_path),
        kinds=KINDS,
        progress=lambda run: seen.append(run.kind),
    )
    assert [run.kind for run in runs] == list(KINDS) == seen
    for run in runs:
        assert run.process_s > 0
        names = [phase.name for phase in run.phases]
        assert names[:2] == ["import pyspark", "JVM + session"], names
        assert all(phase.seconds >= 0 and phase.cpu_s >= 0 for phase in run.phases)
    batch, stream, restart = runs
    assert [p.name for p in batch.phases][2:] == [
        "load()", "first query", "warm query 1", "warm query 2"
    ]  # fmt: skip
    assert batch.phases[1].cpu_s > 0, "the JVM's CPU is counted (its process tree)"
    assert not batch.first_batch_ms
    for run in (stream, restart):  # a first batch with rows: the restart read new records
        assert [p.name for p in run.phases][2:] == ["start()", "first batch"]
        assert run.first_batch_ms["triggerExecution"] > 0
    print_cold_start(runs, "cold")
    table = capsys.readouterr().out
    assert "floor-batch" in table and "restart" in table and "addBatch" in table


def test_a_worker_importing_the_source_loads_no_metrics_exposition() -> None:
    """Each Python process Spark starts imports the source; prometheus-client (the client's
    metrics exposition, off by default) cost it 40-100 ms of CPU."""
    code = (
        "import sys, bkeeper.spark.source; "
        "print(sorted(m for m in sys.modules if 'prometheus' in m))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
