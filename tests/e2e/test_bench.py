"""Smoke runs of every ``bkeeper bench`` command with tiny sizes, so none rots (figures:
docs/benchmarks.md). They check the tables' rows and columns and that rates are positive,
never how fast anything was."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bkeeper.testing.benchmarks.connection_chunks import SHAPES
from bkeeper.testing.benchmarks.cpu_split import command_label
from bkeeper.testing.benchmarks.index_engines import CANDIDATES
from tests.e2e.helpers import bkeeper

#: Its tests start processes (tests/tiers.py).
pytestmark = pytest.mark.usefixtures("subprocesses")

RESULT_COLUMNS = ["workload", "ops", "seconds"]
LATENCY_COLUMNS = ["MB/s", "p50 ms", "p99 ms", "p99.9 ms"]


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bkeeper", "bench", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _tables(stdout: str) -> list[tuple[list[str], list[list[str]]]]:
    """(header, rows) of each rich table printed, in order (a header or a row wrapped over
    several lines joined back, cell by cell: a row's next line has no second cell)."""
    tables: list[tuple[list[str], list[list[str]]]] = []
    in_header = False
    for text in stdout.splitlines():
        line = text.strip()
        if line.startswith("┃"):
            cells = [cell.strip() for cell in line.strip("┃").split("┃")]
            if in_header:
                header = tables[-1][0]
                header[:] = [
                    " ".join(filter(None, pair)) for pair in zip(header, cells, strict=True)
                ]
            else:
                tables.append((cells, []))
            in_header = True
            continue
        in_header = False
        if line.startswith("│"):
            cells = [cell.strip() for cell in line.strip("│").split("│")]
            rows = tables[-1][1]
            if rows and len(cells) > 1 and not cells[1]:  # a wrapped row's next line
                rows[-1] = [
                    " ".join(filter(None, pair)) for pair in zip(rows[-1], cells, strict=True)
                ]
            else:
                rows.append(cells)
    return tables


def _number(cell: str) -> float:
    return float(cell.replace(",", ""))


def test_benchmarks_run(real_cluster) -> None:
    uri = real_cluster.uri
    write = bkeeper(uri, "bench", "write", "--duration", "0.5", "--in-flight", "100")
    assert write.returncode == 0, write.stderr
    assert "client writes E3/Qw3/Qa2" in write.stdout
    read = bkeeper(uri, "bench", "read", "--entries", "200")
    assert read.returncode == 0 and "client reads of ledger" in read.stdout
    log = bkeeper(uri, "bench", "log", "--duration", "0.5", "--rate", "200")
    assert log.returncode == 0, log.stderr
    assert "append -> tailing reader" in log.stdout
    batched = bkeeper(
        uri, "bench", "log", "--duration", "0.5", "--rate", "2000", "--batch",
        "--append-many", "100", "--compression", "lz4", "--tune-gc",
    )  # fmt: skip
    assert batched.returncode == 0, batched.stderr
    assert "log appends, 100 B, batched" in batched.stdout and "lz4" in batched.stdout
    assert "by a subscription, acking each" in batched.stdout


@pytest.mark.slow
def test_bench_spark_and_cpu_split_run(real_cluster, slow_full: bool) -> None:
    """Reduced (CI): ``bench cpu-split`` alone, which fills the log and reads it with Spark
    as ``bench spark`` does. Full (``--slow-full``): ``bench spark`` first, then ``cpu-split``
    on the log it filled (one JVM more: about 25 s)."""
    pytest.importorskip("pyspark")
    uri = real_cluster.uri
    fill = []
    if slow_full:
        spark = bkeeper(uri, "bench", "spark", "--records", "3000", "--runs", "1",
                        "--max-entries-per-split", "1000", "--batch-records", "1")  # fmt: skip
        assert spark.returncode == 0, spark.stderr[-2000:]
        assert "py4j" not in spark.stderr, "Spark's bridge narrates its connections"
        assert "fill log (append)" in spark.stdout
        assert "spark read local[2], 3 partitions, run 1" in spark.stdout
        assert "3,000" in spark.stdout
    else:  # cpu-split fills the log itself
        fill = [["fill log (append)", "3,000"]]
    split = bkeeper(uri, "bench", "cpu-split", "--records", "3000", "--runs", "1",
                    "--batch-records", "1")  # fmt: skip
    assert split.returncode == 0, split.stderr[-2000:]
    assert "py4j" not in split.stderr, "Spark's bridge narrates its connections"
    (results_header, results), (cpu_header, processes) = _tables(split.stdout)
    assert results_header == [*RESULT_COLUMNS, "rows/s", *LATENCY_COLUMNS]
    assert [row[:2] for row in results] == [*fill, ["spark read local[2], 1 run", "3,000"]]
    assert _number(results[-1][3]) > 0
    assert cpu_header == ["pid", "CPU s", "CPU share", "command"]
    assert processes, split.stdout
    assert all(_number(row[1]) >= 0.05 for row in processes)


def test_cpu_split_names_a_jvm_by_its_main_class() -> None:
    java = "/usr/lib/jvm/java-17/bin/java"
    zookeeper = [java, "-cp", "/a/b.jar:/c/d.jar", "-Xmx512m", "-Dzookeeper.x=1",
                 "org.apache.zookeeper.server.quorum.QuorumPeerMain", "/tmp/zoo.cfg", ""]  # fmt: skip
    assert command_label(zookeeper) == (
        "java org.apache.zookeeper.server.quorum.QuorumPeerMain /tmp/zoo.cfg"
    )
    assert command_label(["python", "-m", "bkeeper", "bookie", ""]) == "python -m bkeeper bookie"
    assert command_label([java, "-version"]) == f"{java} -version"
    assert len(command_label(["x" * 50, "y" * 50])) == 90


def test_bench_codec_and_bookie_run(tmp_path: Path) -> None:
    codec = _bench("codec", "--count", "200")
    assert codec.returncode == 0, codec.stderr
    assert codec.stdout.count(" add request (+digest CRC32C) ") == 2, codec.stdout
    bookie = _bench("bookie", "--duration", "0.3", "--in-flight", "50",
                    "--data-dir", str(tmp_path / "bookie"))  # fmt: skip
    assert bookie.returncode == 0, bookie.stderr
    assert "adds/s" in bookie.stdout


def test_bench_storage_runs(tmp_path: Path) -> None:
    result = _bench("storage", "--count", "2000", "--entry-size", "100", "--dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    [(header, rows)] = _tables(result.stdout)
    assert header == [*RESULT_COLUMNS, "adds/s", *LATENCY_COLUMNS, "fsyncs/s", "entries/fsync"]
    [row] = rows
    assert row[:2] == ["storage adds, 100 B, bursts of 64", "2,000"]
    assert _number(row[3]) > 0 and _number(row[8]) > 0 and _number(row[9]) >= 1
    assert list(tmp_path.iterdir()) == []  # its data directory is removed


def test_bench_gc_runs(tmp_path: Path) -> None:
    result = _bench("gc", "--bytes", "4M", "--ledgers", "10", "--entry-size", "4096",
                    "--bookies", "1", "--gc-wait-ms", "300", "--periods", "60", "--target-fraction", "0.8",
                    "--data-dir", str(tmp_path / "sandbox"))  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    [(header, rows)] = _tables(result.stdout)
    assert header == ["measure", "value"]
    values = dict(rows)
    assert values["ledgers deleted"] == "9 of 10"
    assert values["under 80% of the peak after"].endswith("GC periods")
    assert _number(values["peak disk usage (all bookies)"].split()[0]) > 0


def test_bench_connection_runs() -> None:
    result = _bench("connection", "--frames", "300", "--rounds", "2")
    assert result.returncode == 0, result.stderr
    [(header, rows)] = _tables(result.stdout)
    assert header == ["shape", "frames", "rounds", "ns/frame", "frames/s"]
    assert [row[0] for row in rows] == [shape.label for shape in SHAPES]
    assert [row[1:3] for row in rows] == [["301", "2"], ["301", "2"], ["320", "2"]]
    assert all(_number(row[3]) > 0 and _number(row[4]) > 0 for row in rows)


#: ``python -m bkeeper`` with the optional index engines not importable, installed or not:
#: their import fails as it does where they are not installed.
_WITHOUT_OPTIONAL_ENGINES = """
import sys

class NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name in ("lmdb", "rocksdict"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NotInstalled())
from bkeeper.cli.main import main
main()
"""


def test_bench_index_runs() -> None:
    """Every engine of bkeeper's own runs; lmdb and rocksdict, made not importable here
    (they are not among the test extras), are skipped and say why. One outcome per engine,
    whatever this machine has installed."""
    result = subprocess.run(
        [sys.executable, "-c", _WITHOUT_OPTIONAL_ENGINES, "bench", "index",
         "--count", "2000", "--ledgers", "4", "--ids", "striped"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "2,000 locations in 4 ledgers, striped entry ids" in result.stdout
    [(header, rows)] = _tables(result.stdout)
    assert header == ["engine", "puts/s", "gets/s", "disk MB", "memory MB", "note"]
    assert [row[0] for row in rows] == list(CANDIDATES)
    optional = {"lmdb", "rocksdict"}
    assert {row[0].split()[0] for row in rows} >= optional
    for row in rows:
        module = row[0].split()[0]
        if module in optional:
            assert row[1:] == ["-", "-", "-", "-", f"skipped: No module named '{module}'"]
        else:
            assert _number(row[1]) > 0 and _number(row[2]) > 0 and row[5] == "", row


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("index", "--count", "3", "--ledgers", "4"),
         "error: Invalid value for '--count': 3 is fewer than --ledgers 4"),
        (("index", "--ids", "odd"), "error: Invalid value for '--ids': 'odd' is not one of "),
        (("storage", "--count", "0"), "error: Invalid value for '--count': 0 is not in the range x>=1"),
        (("storage", "--dir", "/no/such/dir"), "error: Invalid value for '--dir': Directory '/no/such/dir' does not exist"),
        (("connection", "--rounds", "0"), "error: Invalid value for '--rounds': 0 is not in the range x>=1"),
        (("cpu-split", "--runs", "0"), "error: Invalid value for '--runs': 0 is not in the range x>=1"),
    ],
)  # fmt: skip
def test_bench_bad_options_are_one_error_line(args: tuple[str, ...], message: str) -> None:
    result = _bench(*args)
    assert result.returncode == 2
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith(message), line


def test_bench_recovery_runs() -> None:
    """A sandbox of 5, 12 small ledgers, a kill, the repair, a second kill, the read-back."""
    run = _bench("recovery", "--ledgers", "12", "--ledger-size", "32K", "--entry-size", "4K",
                 "--write-rate", "200", "--baseline-seconds", "0.5", "--second-kill",
                 "--timeout", "120")  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    (header, measures), (results_header, results) = _tables(run.stdout)
    assert header == ["measure", "value", "target"]
    rows = {row[0]: row[1:] for row in measures}
    assert list(rows) == [
        "killed (kill -9)",
        "ledgers on it",
        "gone from the registry after",
        "lost bookie recovery delay",
        "fully replicated, after the delay",
        "ledgers re-replicated per minute",
        "MB/s re-replicated",
        "append p99 during the repair (200/s)",
        "then killed",
        "entries read back identical",
    ]
    assert rows["lost bookie recovery delay"][0] == "0 s"
    assert rows["fully replicated, after the delay"][0].endswith(" s")
    assert _number(rows["ledgers re-replicated per minute"][0]) > 0
    assert rows["entries read back identical"] == ["96 of 96", "all: met"]
    # (the writers' own CPU per entry is a column of theirs: bench_client_writes measures it)
    assert results_header == [
        *RESULT_COLUMNS,
        "ops/s",
        *LATENCY_COLUMNS,
        "client CPU µs/entry",
        "server CPU µs/entry",
    ]
    assert [row[0] for row in results] == [
        "fill: 12 ledgers of 8 x 4,096 B, E3/Qw3/Qa2",
        "writes before the kill",
        "writes during the repair",
        "read back 12 ledgers after the second kill, compared",
    ]
    assert results[3][1] == "96"
