"""Benchmark workloads behind ``bkeeper bench``, one module per workload.

Each workload returns its figures (mostly a :class:`BenchResult`: rates and latency
percentiles) that the CLI prints as a table and docs/benchmarks.md records with the command
that produced it:

- ``codec``: encode+decode rates (``bench codec``);
- ``bookie``: adds against one bookie (``bench bookie``);
- ``client``: one ledger client writing and reading a ledger (``bench write``, ``bench read``),
  or holding open ledgers it does not write to (``bench idle``);
- ``named_log``: appends to a named log while it is tailed (``bench log``);
- ``storage_adds``: the storage engine alone (``bench storage``);
- ``connection_chunks``: a bookie connection's cost per v2 ADD frame (``bench connection``);
- ``index_engines``: candidate location-index engines (``bench index``);
- ``cpu_split``: CPU seconds per process during a workload (``bench cpu-split``);
- ``results``: :class:`BenchResult`; ``processes``: free ports and a local bookie process.

The Spark read workload (``bench spark``) lives in ``bkeeper.spark.bench``: only ``spark``
imports pyspark.
"""

from __future__ import annotations

from bkeeper.testing.benchmarks.bookie import bench_bookie_adds
from bkeeper.testing.benchmarks.client import (
    bench_client_reads,
    bench_client_writes,
    bench_idle_writers,
    delete_ledger,
)
from bkeeper.testing.benchmarks.codec import bench_codec
from bkeeper.testing.benchmarks.named_log import bench_log
from bkeeper.testing.benchmarks.processes import _wait_port as _wait_port
from bkeeper.testing.benchmarks.processes import (
    free_port,
    free_port_range,
    local_bookie,
    local_bookie_process,
)
from bkeeper.testing.benchmarks.results import PACING_SLEEP_S, BenchResult, percentiles

__all__ = [
    "PACING_SLEEP_S",
    "BenchResult",
    "bench_bookie_adds",
    "bench_client_reads",
    "bench_client_writes",
    "bench_idle_writers",
    "bench_codec",
    "bench_log",
    "delete_ledger",
    "free_port",
    "free_port_range",
    "local_bookie",
    "local_bookie_process",
    "percentiles",
]
