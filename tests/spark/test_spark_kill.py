"""Exactly-once streaming writes under a real crash: a streaming copy between two logs is
killed with SIGKILL (driver, JVM and Python workers at once) while it commits batches, then
restarted; the target must hold every source record exactly once and no orphan ledger."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.spark.test_spark import append, ledgers_in_logs, list_ledgers, read_log, run

pytestmark = pytest.mark.integration

JOB = Path(__file__).with_name("copy_job.py")


def committed_batches(uri: str, log: str) -> int:
    from bkeeper.client import BookKeeper
    from bkeeper.common.errors import LogNotFoundError
    from bkeeper.namedlog import NamedLogs

    async def go() -> int:
        async with BookKeeper(uri) as bk:
            try:
                meta = await NamedLogs(bk).log(log).metadata()
            except LogNotFoundError:
                return -1
            return max((c.batch_id for c in meta.commits), default=-1)

    return run(go)


@contextlib.contextmanager
def job(uri: str, checkpoint: Path, mode: str, log_file: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The copy job in a process group of its own, killed whole (driver, JVM, workers) on
    the way out if it still runs. A SIGKILLed JVM cannot clean up: its scratch files stay in the job's own
    temp dir (under the test's tmp_path), and it keeps no perf data file in /tmp."""
    temp = log_file.parent / "job-tmp"
    temp.mkdir(exist_ok=True)
    java_options = os.environ.get("JAVA_TOOL_OPTIONS", "")
    root = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root / "src"), os.environ.get("PYTHONPATH", "")]),
        "TMPDIR": str(temp),
        "JAVA_TOOL_OPTIONS": f"{java_options} -Djava.io.tmpdir={temp} -XX:-UsePerfData".strip(),
    }
    with open(log_file, "ab") as out:
        process = subprocess.Popen(
            [sys.executable, str(JOB), uri, "kill-src", "kill-dst", str(checkpoint), mode],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env,
        )  # fmt: skip
    failed = True
    try:
        yield process
        failed = False
    finally:
        if failed or process.poll() is None:  # a job that exited by itself must leave nothing
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def uncommitted_ledgers(uri: str) -> set[int]:
    """Ledgers that no log holds: a batch's task ledgers until its commit appends them."""
    return list_ledgers(uri) - ledgers_in_logs(uri)


def stop_inside_a_batch(uri: str, tail: subprocess.Popen[bytes], log_file: Path) -> None:
    """Once 4 batches are committed, stop the job (SIGSTOP to its process group) at a moment
    when a batch's task ledgers are made and not yet committed (no log holds them). Seen with
    the job stopped, that holds until the kill; when the batch committed between the first
    look and the stop, the job goes on and the search with it."""
    deadline = time.monotonic() + 120
    while True:
        assert tail.poll() is None, log_file.read_text()[-3000:]
        assert time.monotonic() < deadline, "no batch caught between its writes and commit"
        if committed_batches(uri, "kill-dst") < 4 or not uncommitted_ledgers(uri):
            time.sleep(0.05)  # the poll's pace, as before: the job needs the CPU
            continue
        os.killpg(tail.pid, signal.SIGSTOP)
        if uncommitted_ledgers(uri):
            return
        os.killpg(tail.pid, signal.SIGCONT)


def test_sigkill_mid_stream_then_restart_copies_each_record_once(spark_cluster, tmp_path):
    pytest.importorskip("pyspark")
    uri = spark_cluster.uri
    payloads = [b"kill-%05d" % i for i in range(2500)]
    append(uri, "kill-src", payloads)
    checkpoint, log_file = tmp_path / "ck", tmp_path / "job.log"
    with job(uri, checkpoint, "tail", log_file) as tail:
        stop_inside_a_batch(uri, tail, log_file)
    # Leaving the block killed the stopped job with SIGKILL: inside a batch, whose task
    # ledgers no log holds.
    killed_batch = uncommitted_ledgers(uri)
    assert killed_batch, "the kill landed between batches"
    assert len(read_log(uri, "kill-dst")) < len(payloads), "killed before the end"
    with job(uri, checkpoint, "drain", log_file) as drain:
        assert drain.wait(240) == 0, log_file.read_text()[-3000:]
    copied = read_log(uri, "kill-dst")
    assert len(copied) == len(payloads) and sorted(copied) == payloads, "no duplicate, no gap"

    # Every ledger left is in one of the two logs: the killed batch's were deleted.
    ledgers = list_ledgers(uri)
    assert not ledgers & killed_batch, f"the killed batch's ledgers {ledgers & killed_batch} stay"
    assert ledgers == ledgers_in_logs(uri)
