"""Exactly-once streaming writes under a real crash: a streaming copy between two logs is
killed with SIGKILL (driver, JVM and Python workers at once) while it commits batches, then
restarted from its checkpoint (in this process's Spark session: a JVM other than the killed
one, as a new job's would be); the target must hold every source record exactly once and no
orphan ledger."""

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

JOB = Path(__file__).with_name("copy_job.py")
#: Records the job copies, in batches of 100 (``copy_job``'s tail mode).
RECORDS = 2500
BATCHES = RECORDS // 100
#: How long the job may go without committing a batch (the first: its JVM's start).
STALL_S = 180.0


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
    look and the stop, the job goes on and the search with it. Fails when the job commits
    no batch for ``STALL_S`` (its JVM's start included), or copied everything first."""
    committed, stalled_at = -1, time.monotonic() + STALL_S
    while True:
        assert tail.poll() is None, log_file.read_text()[-3000:]
        now = committed_batches(uri, "kill-dst")
        if now > committed:
            committed, stalled_at = now, time.monotonic() + STALL_S
        assert time.monotonic() < stalled_at, f"the job committed no batch in {STALL_S:g} s"
        assert committed < BATCHES - 1, "no batch caught between its writes and commit"
        if committed < 4 or not uncommitted_ledgers(uri):
            time.sleep(0.05)  # the poll's pace, as before: the job needs the CPU
            continue
        os.killpg(tail.pid, signal.SIGSTOP)
        if uncommitted_ledgers(uri):
            return
        os.killpg(tail.pid, signal.SIGCONT)


@pytest.mark.timeout(900)  # a job's JVM and a search for a batch, on a loaded machine
def test_sigkill_mid_stream_then_restart_copies_each_record_once(spark, spark_cluster, tmp_path):
    from tests.spark.copy_job import copy_query

    uri = spark_cluster.uri
    payloads = [b"kill-%05d" % i for i in range(RECORDS)]
    append(uri, "kill-src", payloads)
    checkpoint, log_file = tmp_path / "ck", tmp_path / "job.log"
    with job(uri, checkpoint, "tail", log_file) as tail:
        stop_inside_a_batch(uri, tail, log_file)
    # Leaving the block killed the stopped job with SIGKILL: inside a batch, whose task
    # ledgers no log holds.
    killed_batch = uncommitted_ledgers(uri)
    assert killed_batch, "the kill landed between batches"
    assert len(read_log(uri, "kill-dst")) < len(payloads), "killed before the end"
    drain = copy_query(spark, uri, "kill-src", "kill-dst", str(checkpoint), "drain")
    try:
        assert drain.awaitTermination(240), "the restarted copy drained the source"
    finally:
        drain.stop()
    assert drain.exception() is None, drain.exception()
    copied = read_log(uri, "kill-dst")
    assert len(copied) == len(payloads) and sorted(copied) == payloads, "no duplicate, no gap"

    # Every ledger left is in one of the two logs: the killed batch's were deleted.
    ledgers = list_ledgers(uri)
    assert not ledgers & killed_batch, f"the killed batch's ledgers {ledgers & killed_batch} stay"
    assert ledgers == ledgers_in_logs(uri)
