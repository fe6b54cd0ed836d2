"""Java BookKeeper and bkeeper side by side, in one run (docs/benchmarks.md, "Java interop"):
Java's ``BenchThroughputLatency`` and ``bkeeper bench write`` (1 KiB, E3/Qw3/Qa2), each against
3 bkeeper bookies and against 3 Java bookies, on this machine.

    python -m tests.interop.bench_side_by_side --seconds 15 --rounds 2

from the repository root (``PYTHONPATH=src``). ZooKeeper and the bookies listen on
``--port-base`` and the next ports (ZooKeeper, then bookies +20..+22 and +120..+122).
Java's benchmark uses the cluster under ``/ledgers``, so each kind of bookie gets a
ZooKeeper of its own. Rounds alternate the two clients, so machine noise shows as a range.

Besides entries/s and latency, each line gives CPU per entry written, which other processes
on the machine disturb far less: the three bookies' CPU time (``/proc/PID/stat``) over the
entries they took (Java's benchmark first writes ``WARMUP`` entries to a ledger of its own),
and the client process's, start-up included (JVM start and JIT for Java's; interpreter start
for ours), over the entries it wrote.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from bkeeper.meta.cluster import ClusterMetadata
from bkeeper.testing.bookie_process import wait_ready
from bkeeper.testing.zookeeper import ZooKeeperConfig, ZooKeeperServer
from tests.interop.conftest import wait_registered
from tests.interop.javabk import JavaBookKeeper, find_javabk

_BENCH = "org.apache.bookkeeper.benchmark.BenchThroughputLatency"
_JAVA_RATE = re.compile(r"(\d+) completions in (\d+) milliseconds: (\d+) ops/sec")
_JAVA_PCT = re.compile(r"(95|99)th percentile latency: ([\d.]+)")
#: ``BenchThroughputLatency``'s ``-warmupMessages`` default: written before the timed run.
WARMUP = 10_000


@contextmanager
def zookeeper(data_dir: Path, port: int) -> Iterator[ZooKeeperServer]:
    data_dir.mkdir(parents=True)
    with ZooKeeperServer(ZooKeeperConfig(data_dir=data_dir, port=port)) as server:
        yield server


@contextmanager
def bkeeper_bookies(uri: str, data_dir: Path, ports: list[int]) -> Iterator[list[int]]:
    asyncio.run(_format(uri))
    procs = []
    try:
        for i, port in enumerate(ports):
            log_path = data_dir / f"bookie-{i}.log"
            cmd = [
                sys.executable, "-m", "bkeeper", "bookie", "--data-dir",
                str(data_dir / f"bookie-{i}"), "--port", str(port), "--metadata", uri,
            ]  # fmt: skip
            with log_path.open("ab") as log:
                procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT))
            wait_ready(procs[-1], log_path, 0)
        yield [proc.pid for proc in procs]
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(30)


async def _format(uri: str) -> None:
    async with await ClusterMetadata.open(uri) as metadata:
        await metadata.format()


@contextmanager
def java_bookies(
    javabk: JavaBookKeeper, uri: str, data_dir: Path, ports: list[int]
) -> Iterator[list[int]]:
    run = javabk.shell(uri, data_dir, "initnewcluster")
    if run.returncode != 0:
        raise SystemExit(f"initnewcluster failed:\n{run.output}")
    bookies = [
        javabk.bookie(uri, data_dir / f"java-bookie-{i}", port=port) for i, port in enumerate(ports)
    ]
    try:
        asyncio.run(wait_registered(uri, {b.bookie_id for b in bookies}, bookies))
        yield [bookie.proc.pid for bookie in bookies]
    finally:
        for bookie in bookies:
            bookie.stop(signal.SIGTERM)


def _timed(cmd: list[str], cwd: Path | None) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run ``cmd``; its output, and the CPU seconds it (and its children) used."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return done, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def cpu_s(pids: list[int]) -> float:
    """CPU seconds (user + system) the processes ``pids`` used so far."""
    total = 0
    for pid in pids:
        stat = Path(f"/proc/{pid}/stat").read_text()
        fields = stat[stat.rindex(")") + 2 :].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def java_bench(
    javabk: JavaBookKeeper, zk: str, seconds: int, throttle: int, v2: bool, work: Path
) -> tuple[str, int, float]:
    cmd = [
        *javabk.command(("-Xms512m", "-Xmx512m"), "log4j2.cli.xml", work), _BENCH,
        "-zookeeper", zk, "-time", str(seconds), "-entrysize", "1024", "-ensemble", "3",
        "-quorum", "3", "-ackQuorum", "2", "-sockettimeout", "60", "-throttle", str(throttle),
        *(["-useV2"] if v2 else []),
    ]  # fmt: skip
    done, client_s = _timed(cmd, work)
    rate = _JAVA_RATE.search(done.stdout)
    pcts = dict(_JAVA_PCT.findall(done.stdout))
    if done.returncode != 0 or rate is None:
        raise SystemExit(
            f"BenchThroughputLatency failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
        )
    entries = int(rate[1]) + WARMUP
    return (
        (
            f"{int(rate[3]):,} entries/s ({rate[1]} in {int(rate[2]) / 1000:.1f} s), "
            f"p95 {pcts.get('95', '?')} ms, p99 {pcts.get('99', '?')} ms"
        ),
        entries,
        client_s,
    )


def our_bench(uri: str, seconds: int, protocol: str) -> tuple[str, int, float]:
    cmd = [
        sys.executable, "-m", "bkeeper", "bench", "write", "--metadata", uri,
        "--duration", str(seconds), "--protocol", protocol,
    ]  # fmt: skip
    done, client_s = _timed(cmd, None)
    if done.returncode != 0:
        raise SystemExit(f"bkeeper bench write failed:\n{done.stdout}{done.stderr}")
    rows = [line for line in done.stdout.splitlines() if "client writes" in line]
    if len(rows) != 1:
        raise SystemExit(f"bkeeper bench write printed no result row:\n{done.stdout}")
    cells = [cell.strip() for cell in rows[0].strip("│ ").split("│")]
    _workload, ops, secs, rate, _mb, p50, p99, _p999 = cells[:8]  # then client CPU µs/entry
    text = f"{rate} entries/s ({ops} in {secs} s), p50 {p50} ms, p99 {p99} ms"
    return text, int(ops.replace(",", "")), client_s


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--throttles", default="10000,40000",
        help="Java's -throttle values (both its rate limit and its in-flight limit)",
    )  # fmt: skip
    parser.add_argument("--port-base", type=int, default=44181)
    parser.add_argument("--protocols", default="v2,v3")
    args = parser.parse_args()
    # SIGTERM unwinds like Ctrl-C, so the bookies and ZooKeeper started here are stopped.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    javabk, why = find_javabk()
    if javabk is None:
        raise SystemExit(why)
    base = args.port_base
    protocols = args.protocols.split(",")
    with tempfile.TemporaryDirectory(prefix="bkeeper-bench-interop-") as tmp:
        root = Path(tmp)
        ours_ports = [base + 20 + i for i in range(3)]
        java_ports = [base + 120 + i for i in range(3)]

        def ours_started(uri: str, data_dir: Path) -> AbstractContextManager[list[int]]:
            return bkeeper_bookies(uri, data_dir, ours_ports)

        def java_started(uri: str, data_dir: Path) -> AbstractContextManager[list[int]]:
            return java_bookies(javabk, uri, data_dir, java_ports)

        kinds = [("bkeeper bookies", ours_started), ("Java bookies", java_started)]
        for kind, start in kinds:
            print(f"## {kind} (load before: {load()})", flush=True)
            with zookeeper(root / kind.split()[0] / "zk", base) as zk:
                uri = zk.uri("/ledgers")
                with start(uri, root / kind.split()[0]) as pids:

                    def report(what: str, run: Callable[[], tuple[str, int, float]]) -> None:
                        bookies_before = cpu_s(pids)
                        text, entries, client_s = run()
                        bookies_us = (cpu_s(pids) - bookies_before) / entries * 1e6
                        print(
                            f"{what}: {text}; CPU per entry: bookies {bookies_us:.0f} µs, "
                            f"client {client_s / entries * 1e6:.0f} µs [load {load()}]",
                            flush=True,
                        )

                    for round_ in range(1, args.rounds + 1):
                        for protocol in protocols:
                            for throttle in args.throttles.split(","):
                                report(
                                    f"round {round_} {protocol} Java BenchThroughputLatency "
                                    f"-throttle {throttle}",
                                    functools.partial(
                                        java_bench, javabk, zk.connect_string, args.seconds,
                                        int(throttle), protocol == "v2", root,
                                    ),
                                )  # fmt: skip
                            report(
                                f"round {round_} {protocol} bkeeper bench write",
                                functools.partial(our_bench, uri, args.seconds, protocol),
                            )


if __name__ == "__main__":
    main()
