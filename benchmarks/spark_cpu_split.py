"""CPU seconds per process while Spark reads a named log: which of the Python workers, the
JVM and the bookies the time goes to (docs/benchmarks.md, Spark).

    python benchmarks/spark_cpu_split.py --metadata zk://127.0.0.1:2181/ledgers --log bench-spark

Reads the whole log once to warm up, then ``--runs`` times, and prints rows/s and the CPU
time each process on the machine used meanwhile (from /proc; Linux only).
"""

from __future__ import annotations

import argparse
import os
import time


def cpu_by_process() -> dict[int, tuple[int, str]]:
    """pid -> (user + system clock ticks, command line)."""
    found = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as stat_file:
                fields = stat_file.read().rpartition(")")[2].split()
            with open(f"/proc/{pid}/cmdline") as cmd_file:
                command = cmd_file.read().replace("\0", " ")[:90]
        except OSError:
            continue
        found[int(pid)] = (int(fields[11]) + int(fields[12]), command)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--metadata", default="zk://127.0.0.1:2181/ledgers")
    parser.add_argument("--log", default="bench-spark")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    from bkeeper.spark.session import local_session

    spark = local_session("local[2]", "cpu-split")

    def read() -> int:
        df = spark.read.format("bkeeper").option("metadata", args.metadata)
        row = (
            df.option("log", args.log)
            .load()
            .selectExpr("count(*) AS n", "sum(length(payload)) AS b")
            .first()
        )
        return int(row.n)

    read()
    before, started = cpu_by_process(), time.perf_counter()
    rows = sum(read() for _ in range(args.runs))
    wall, after = time.perf_counter() - started, cpu_by_process()
    ticks = os.sysconf("SC_CLK_TCK")
    print(f"{rows:,} rows in {wall:.2f} s: {rows / wall:,.0f} rows/s")
    used = [
        ((t - before.get(pid, (0, ""))[0]) / ticks, pid, command)
        for pid, (t, command) in after.items()
    ]
    for seconds, pid, command in sorted(used, reverse=True):
        if seconds >= 0.05:
            print(f"{seconds:7.2f} s  {pid:>7}  {command}")
    spark.stop()


if __name__ == "__main__":
    main()
