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
#: How long the job may take to reach the held commit (its JVM's start included).
STALL_S = 300.0
#: The batch whose commit the job holds until it is killed (kill_hook/sitecustomize.py).
HOLD_FROM = 4
#: The hook, first on the job's PYTHONPATH.
HOOK = Path(__file__).with_name("kill_hook")


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
def job(
    uri: str, checkpoint: Path, mode: str, log_file: Path, hold: Path | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """The copy job in a process group of its own, killed whole (driver, JVM, workers) on
    the way out if it still runs. With ``hold``, its sink's commit of batch ``HOLD_FROM``
    writes that file and waits to be killed (``kill_hook``). A SIGKILLed JVM cannot clean up: its scratch files stay in the job's own
    temp dir (under the test's tmp_path), and it keeps no perf data file in /tmp."""
    temp = log_file.parent / "job-tmp"
    temp.mkdir(exist_ok=True)
    java_options = os.environ.get("JAVA_TOOL_OPTIONS", "")
    root = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [*([str(HOOK)] if hold else []), str(root / "src"), os.environ.get("PYTHONPATH", "")]
        ),
        "TMPDIR": str(temp),
        "JAVA_TOOL_OPTIONS": f"{java_options} -Djava.io.tmpdir={temp} -XX:-UsePerfData".strip(),
    }
    if hold is not None:  # kill_hook/sitecustomize.py holds a commit (see there)
        env |= {"BKEEPER_TEST_HOLD_COMMIT": str(hold), "BKEEPER_TEST_HOLD_FROM": str(HOLD_FROM)}
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


def wait_held(tail: subprocess.Popen[bytes], log_file: Path, hold: Path) -> int:
    """Until the job holds a batch's commit (its task ledgers made, none committed); that
    batch's id. Fails when the job exits first, or holds none in ``STALL_S``."""
    deadline = time.monotonic() + STALL_S
    while not (hold.exists() and hold.read_text()):
        assert tail.poll() is None, log_file.read_text()[-3000:]
        assert time.monotonic() < deadline, f"no commit held in {STALL_S:g} s"
        time.sleep(0.1)
    return int(hold.read_text())


@pytest.mark.timeout(900)  # a job's JVM and a search for a batch, on a loaded machine
def test_sigkill_mid_stream_then_restart_copies_each_record_once(spark, spark_cluster, tmp_path):
    from tests.spark.copy_job import copy_query

    uri = spark_cluster.uri
    payloads = [b"kill-%05d" % i for i in range(RECORDS)]
    append(uri, "kill-src", payloads)
    checkpoint, log_file = tmp_path / "ck", tmp_path / "job.log"
    hold = tmp_path / "held"
    with job(uri, checkpoint, "tail", log_file, hold) as tail:
        held = wait_held(tail, log_file, hold)
    # Leaving the block killed the job with SIGKILL: inside batch ``held``, whose task
    # ledgers no log holds.
    assert held == HOLD_FROM
    assert committed_batches(uri, "kill-dst") == HOLD_FROM - 1
    killed_batch = uncommitted_ledgers(uri)
    assert killed_batch, "the held batch has task ledgers"
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
