"""``bkeeper bench spark --cold-start``'s runs work (new JVMs; figures are in
docs/benchmarks.md, never asserted here), and what a Spark Python worker imports.

The bench run is in the ``slow`` tier (tests/tiers.py): by default its reduced form, two new
JVMs (a batch read with one warm query, a stream) that still give and check every field a
run reports; ``--slow-full`` runs three (a stream's restart from its checkpoint too) with
two warm queries."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.client.conftest import RealCluster

pytest.importorskip("pyspark")

#: New JVMs, one a run (every code path of a run: a batch read, the floor's source, a stream
#: and, in the full form, its restart); the full bench runs six kinds.
KINDS = ("floor-batch", "stream")
FULL_KINDS = (*KINDS, "restart")


@pytest.mark.slow
@pytest.mark.timeout(900)  # up to three JVMs one after the other, on a loaded machine
def test_cold_start_runs_each_kind_in_a_new_jvm(
    spark_cluster: RealCluster,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    slow_full: bool,
) -> None:
    from bkeeper.cli.bench.spark import print_cold_start
    from bkeeper.spark.bench_cold import bench_spark_cold_start

    kinds, warm_runs = (FULL_KINDS, 2) if slow_full else (KINDS, 1)
    seen: list[str] = []
    runs = bench_spark_cold_start(
        spark_cluster.uri,
        "unused-by-these-kinds",
        master="local[2]",
        scratch=str(tmp_path),
        kinds=kinds,
        warm_runs=warm_runs,
        progress=lambda run: seen.append(run.kind),
    )
    assert [run.kind for run in runs] == list(kinds) == seen
    for run in runs:
        assert run.process_s > 0
        names = [phase.name for phase in run.phases]
        assert names[:2] == ["import pyspark", "JVM + session"], names
        assert all(phase.seconds >= 0 and phase.cpu_s >= 0 for phase in run.phases)
    batch, *streams = runs
    warm = [f"warm query {run + 1}" for run in range(warm_runs)]
    assert [p.name for p in batch.phases][2:] == ["load()", "first query", *warm]
    assert batch.phases[1].cpu_s > 0, "the JVM's CPU is counted (its process tree)"
    assert not batch.first_batch_ms
    for run in streams:  # a first batch with rows (the restart's: records added after it)
        assert [p.name for p in run.phases][2:] == ["start()", "first batch"]
        assert run.first_batch_ms["triggerExecution"] > 0
    print_cold_start(runs, "cold")
    table = capsys.readouterr().out
    assert all(kind in table for kind in kinds) and "addBatch" in table


def test_a_worker_importing_the_source_loads_no_metrics_exposition(subprocesses: None) -> None:
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
