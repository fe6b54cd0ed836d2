"""The environment ``bkeeper sandbox --secure`` prints works as printed (issue 37): its
``export`` lines, pasted into a fresh shell that has no ``BKEEPER_*`` variable, make
``bkeeper shell listbookies``, ``bkeeper log create`` and ``append``, and a Spark job (a batch
read given only the log's name, a write of what it read to another log, a stream read of
that) clients of the sandbox: TLS, the token and ZooKeeper's digest identity (on the driver
and the executors) all come from the pasted lines. The data directory has a space in its
path, as a user's may."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bkeeper.testing.benchmarks import free_port, free_port_range

#: Its tests start processes (tests/tiers.py).
pytestmark = pytest.mark.usefixtures("subprocesses")

#: How long the sandbox may take to be ready (ZooKeeper and three bookies, TLS).
READY_TIMEOUT_S = 120.0
LOG = "pasted"
RECORDS = ["first record", "second record", "third, with a comma"]

SPARK_JOB = """\
import sys
from pathlib import Path
from bkeeper.spark.session import local_session, stop_jvm

scratch, log, copy = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
spark = local_session("local[2]", "paste-test", scratch_dir=scratch)
read = spark.read.format("bkeeper").option("log", log).load()
for row in sorted(read.collect(), key=lambda r: (r.ledger, r.entry)):
    print("read:", bytes(row.payload).decode())
read.select("payload").write.format("bkeeper").option("log", copy).mode("append").save()
stream = (
    spark.readStream.format("bkeeper").option("log", copy).option("startingPosition", "earliest")
    .load().writeStream.format("memory").queryName("copied")
    .option("checkpointLocation", str(scratch / "checkpoint")).trigger(availableNow=True).start()
)
stream.awaitTermination(240)
for row in spark.table("copied").collect():
    print("streamed:", bytes(row.payload).decode())
spark.stop()
stop_jvm()
"""


def clean_environment() -> dict[str, str]:
    """This process's environment without any ``BKEEPER_*`` variable, with the ``bkeeper``
    command of this Python first on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BKEEPER_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def wait_ready(proc: subprocess.Popen[bytes], err: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while "sandbox ready" not in err.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"sandbox not ready (exit {proc.poll()}):\n{err.read_text()[-3000:]}")
        time.sleep(0.2)


def pasted(exports: list[str], command: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
    """``command`` in a fresh ``bash`` where the ``export`` lines were pasted first."""
    script = "\n".join([*exports, command])
    return subprocess.run(
        ["bash", "-c", script],
        env=clean_environment(),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def test_the_printed_environment_pasted_into_a_fresh_shell_works(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    data_dir = tmp_path / "sand box"
    out, err = tmp_path / "sandbox.out", tmp_path / "sandbox.err"
    command = [
        sys.executable, "-m", "bkeeper", "sandbox", "--secure", "--bookies", "3",
        "--data-dir", str(data_dir), "--zookeeper-port", str(free_port()),
        "--bookie-port", str(free_port_range(3)), "--http-port", str(free_port_range(3)),
        "--no-dashboard", "--no-autorecovery", "--no-restart",
    ]  # fmt: skip
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        proc = subprocess.Popen(command, stdout=stdout, stderr=stderr, env=clean_environment())
    try:
        wait_ready(proc, err)
        printed = out.read_text().splitlines()
        exports = [line for line in printed if line.startswith("export ")]
        assert [line.split("=", 1)[0] for line in exports] == [
            "export BKEEPER_METADATA",
            "export BKEEPER_TLS_CA",
            "export BKEEPER_AUTH_TOKEN_FILE",
        ], printed
        assert "?digest-file=" in exports[0]
        security = data_dir / "security"
        for secret in ("client.token", "token.secret", "zk.digest", "ca.key", "bookie.key"):
            content = (security / secret).read_text().strip()
            assert content not in out.read_text() + err.read_text(), secret

        listed = pasted(exports, "bkeeper shell listbookies", 60)
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.count("│ writable │") == 3, listed.stdout

        records = " ".join(f"'{record}'" for record in RECORDS)
        appended = pasted(exports, f"bkeeper log create {LOG}\nbkeeper log append {LOG} "
                          f"{records}", 60)  # fmt: skip
        assert appended.returncode == 0, appended.stderr
        assert appended.stdout.splitlines()[1:] == ["0:0", "0:1", "0:2"], appended.stdout

        script = tmp_path / "spark_job.py"
        script.write_text(SPARK_JOB)
        scratch = tmp_path / "spark-scratch"
        job = pasted(exports, f"python '{script}' '{scratch}' {LOG} {LOG}-copy", 400)
        assert job.returncode == 0, job.stderr[-3000:]
        lines = job.stdout.splitlines()
        for kind in ("read", "streamed"):  # a batch read; a write, then a stream read of it
            rows = [line.removeprefix(f"{kind}: ") for line in lines
                    if line.startswith(f"{kind}: ")]  # fmt: skip
            assert sorted(rows) == sorted(RECORDS), job.stdout + job.stderr[-3000:]
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
    assert code == 0, err.read_text()[-3000:]
    assert err.read_text().rstrip().endswith("sandbox stopped"), err.read_text()[-3000:]
