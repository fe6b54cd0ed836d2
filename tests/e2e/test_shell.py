"""``bkeeper shell`` ledger commands and the client benchmarks against a real cluster."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.helpers import bkeeper

pytestmark = pytest.mark.integration


def test_shell_ledger_commands(real_cluster) -> None:
    uri = real_cluster.uri
    ok = bkeeper(uri, "shell", "simpletest", "--entries", "300", "--keep")
    assert ok.returncode == 0, ok.stderr
    ledger = int(re.search(r"ledger (\d+)", ok.stdout).group(1))
    assert "300 entries" in ok.stdout and "read back" in ok.stdout

    listing = bkeeper(uri, "shell", "listledgers", "--meta")
    row = next(line for line in listing.stdout.splitlines() if re.match(rf"│\s+{ledger}\s+│", line))
    assert "CLOSED" in row and "3/3/2" in row and "299" in row

    meta = bkeeper(uri, "shell", "ledgermetadata", str(ledger))
    assert meta.returncode == 0 and "segment from entry 0" in meta.stdout
    assert meta.stdout.count("127.0.0.1:") == 3

    read = bkeeper(
        uri,
        "shell",
        "readledger",
        str(ledger),
        "--password",
        "simpletest",
        "--from",
        "5",
        "--to",
        "7",
    )
    assert read.returncode == 0, read.stderr
    assert [line.split("\t")[0] for line in read.stdout.splitlines()] == ["5", "6", "7"]
    wrong = bkeeper(uri, "shell", "readledger", str(ledger), "--password", "nope")
    assert wrong.returncode == 1 and wrong.stderr.strip().startswith("error:")

    assert bkeeper(uri, "shell", "deleteledger", str(ledger), "--force").returncode == 0
    gone = bkeeper(uri, "shell", "ledgermetadata", str(ledger))
    assert gone.returncode == 1 and "no metadata" in gone.stderr
    bad = bkeeper(uri, "shell", "simpletest", "--ensemble", "2", "--write-quorum", "3")
    assert bad.returncode == 2 and "--ensemble >= --write-quorum" in bad.stderr


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


def test_bench_spark_runs(real_cluster) -> None:
    pytest.importorskip("pyspark")
    uri = real_cluster.uri
    spark = bkeeper(uri, "bench", "spark", "--records", "3000", "--runs", "1",
                    "--max-entries-per-split", "1000")  # fmt: skip
    assert spark.returncode == 0, spark.stderr[-2000:]
    assert "fill log (append)" in spark.stdout
    assert "spark read local[2], 3 partitions, run 1" in spark.stdout
    assert "3,000" in spark.stdout
    split = _script("spark_cpu_split.py", "--metadata", uri, "--log", "bench-spark", "--runs", "1")
    assert split.returncode == 0, split.stderr[-2000:]
    assert split.stdout.startswith("3,000 rows in "), split.stdout


BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _script(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCHMARKS / name), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bkeeper", "bench", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_bench_codec_and_bookie_run(tmp_path: Path) -> None:
    """Smoke runs with tiny sizes, so no benchmark command rots (figures: docs/benchmarks.md)."""
    codec = _bench("codec", "--count", "200")
    assert codec.returncode == 0, codec.stderr
    assert codec.stdout.count(" add request (+digest CRC32C) ") == 2, codec.stdout
    bookie = _bench("bookie", "--duration", "0.3", "--in-flight", "50",
                    "--data-dir", str(tmp_path / "bookie"))  # fmt: skip
    assert bookie.returncode == 0, bookie.stderr
    assert "adds/s" in bookie.stdout


def test_benchmark_scripts_run(tmp_path: Path) -> None:
    index = _script("index_engines.py", "--count", "2000", "--ledgers", "4")
    assert index.returncode == 0, index.stderr
    assert index.stdout.splitlines()[0] == "2,000 locations in 4 ledgers, dense entry ids"
    adds = _script("storage_adds.py", "--count", "2000", "--dir", str(tmp_path))
    assert adds.returncode == 0, adds.stderr
    assert adds.stdout.startswith("2,000 adds of 1024 B in "), adds.stdout
