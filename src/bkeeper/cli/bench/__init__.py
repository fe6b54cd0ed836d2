"""``bkeeper bench ...``: benchmarks, printed as tables (record them in docs/benchmarks.md).

The workloads live in ``bkeeper.testing.benchmarks`` (and the Spark read in
``bkeeper.spark.bench``); these modules parse options, run them and print:

- ``client``: ``codec``, ``bookie``, ``write``, ``read``, ``idle``, ``log``;
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

from bkeeper.cli._lazy import LazyCommand, LazyGroup

__all__ = ["COMMANDS", "bench"]


def _row(name: str, target: str, short_help: str) -> LazyCommand:
    return LazyCommand(name, f"bkeeper.cli.bench.{target}", short_help)


#: Each bench's module is imported only when it runs (``bkeeper bench --help`` loads none of
#: them: Spark's, the server's and the client's imports stay out). Each row: name,
#: module:attribute, the listing's short help (the command's first help sentence;
#: tests/cli/test_startup.py checks they agree).
COMMANDS = (
    _row(
        "codec",
        "client:codec",
        "Encode+decode rate of ADD_ENTRY requests (with digest) and responses, v2 and v3.",
    ),
    _row(
        "bookie",
        "client:bookie_bench",
        "Acknowledged (fsynced) adds/s, MB/s and latency against one bookie.",
    ),
    _row(
        "write",
        "client:write_bench",
        "Acknowledged entries/s, MB/s and latency of one client writing one ledger.",
    ),
    _row(
        "read",
        "client:read_bench",
        "Entries/s and MB/s of one client reading a whole ledger (opened with recovery).",
    ),
    _row(
        "idle",
        "client:idle_bench",
        "CPU a second of one client holding open ledgers it does not write to.",
    ),
    _row(
        "log",
        "client:log_bench",
        "Named-log append rate and tail latency (append to visible at a tailing reader); then "
        "the log read back by a reader, and by a subscription acknowledging every record.",
    ),
    _row(
        "spark",
        "spark:spark_bench",
        "Rows/s of a Spark batch read of a named log (filled first to --records records), or "
        "with --latency the latency of a stream from one log to another, or with --cold-start "
        "the first queries of new JVMs.",
    ),
    _row(
        "fuzz",
        "fuzz:fuzz_bench",
        "Random, truncated, oversized and garbage frames of every opcode at a bookie, which "
        "must keep serving with flat memory; exits 1 if it did not.",
    ),
    _row(
        "storage",
        "engine:storage_bench",
        "Acknowledged (fsynced) adds/s and journal fsyncs/s of the storage engine alone, one "
        "ledger, on the real filesystem.",
    ),
    _row(
        "connection",
        "engine:connection_bench",
        "Nanoseconds per 1 KiB v2 ADD frame through a bookie connection's frame handling (no "
        "storage, no socket), for frames arriving whole, split and 64 to a chunk.",
    ),
    _row(
        "index",
        "engine:index_bench",
        "Puts/s, gets/s, bytes on disk and memory of candidate location-index engines (lmdb "
        "and rocksdict are skipped when not installed).",
    ),
    _row(
        "cpu-split",
        "spark:cpu_split_bench",
        "CPU seconds per process on this machine while Spark reads a named log --runs times "
        "(after one read to warm up): the Python workers, the JVM, the bookies.",
    ),
    _row(
        "gc",
        "gc:gc_bench",
        "Write, delete most ledgers, and time the bookies' disk usage going back down.",
    ),
    _row(
        "recovery",
        "recovery:recovery_bench",
        "Fill a sandbox, kill -9 a bookie, time auto-recovery rebuilding its replicas.",
    ),
    _row(
        "restart",
        "restart:restart_bench",
        "Fill a bookie, then time its restarts after SIGTERM and after kill -9.",
    ),
    _row(
        "kv",
        "kv:kv_bench",
        "The replicated key-value store: latency, throughput, fail-over, restart.",
    ),
    _row(
        "tail",
        "tail:tail_bench",
        "A writer appending --rate entries/s, a reader of another client tailing the ledger "
        "(long poll, then read): latency from each append to the reader having the entry.",
    ),
)


@click.group(cls=LazyGroup, lazy_commands=COMMANDS)
def bench() -> None:
    """Benchmarks."""
