"""``bkeeper bench ...``: benchmarks, printed as tables (record them in docs/benchmarks.md).

The workloads live in ``bkeeper.testing.benchmarks`` (and the Spark read in
``bkeeper.spark.bench``); these modules parse options, run them and print:

- ``client``: ``codec``, ``bookie``, ``write``, ``read``, ``log``;
- ``engine``: ``storage``, ``connection``, ``index``;
- ``spark``: ``spark``, ``cpu-split``;
- ``fuzz``: ``fuzz``;
- ``gc``: ``gc`` (space given back after deletions);
- ``recovery``: ``recovery`` (auto-recovery rebuilding a killed bookie's replicas);
- ``restart``: ``restart`` (a bookie full of data ready again after SIGTERM and kill -9);
- ``kv``: ``kv`` (the replicated key-value store);
- ``tail``: ``tail`` (how soon a ledger's tailing reader sees an append).
"""

from __future__ import annotations

import click

from bkeeper.cli.bench.client import bookie_bench, codec, log_bench, read_bench, write_bench
from bkeeper.cli.bench.engine import connection_bench, index_bench, storage_bench
from bkeeper.cli.bench.fuzz import fuzz_bench
from bkeeper.cli.bench.gc import gc_bench
from bkeeper.cli.bench.kv import kv_bench
from bkeeper.cli.bench.recovery import recovery_bench
from bkeeper.cli.bench.restart import restart_bench
from bkeeper.cli.bench.spark import cpu_split_bench, spark_bench
from bkeeper.cli.bench.tail import tail_bench

__all__ = ["bench"]


@click.group()
def bench() -> None:
    """Benchmarks."""


for _command in (
    codec,
    bookie_bench,
    write_bench,
    read_bench,
    log_bench,
    spark_bench,
    fuzz_bench,
    storage_bench,
    connection_bench,
    index_bench,
    cpu_split_bench,
    gc_bench,
    recovery_bench,
    restart_bench,
    kv_bench,
    tail_bench,
):
    bench.add_command(_command)
