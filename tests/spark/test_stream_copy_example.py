"""``examples/stream_copy.py`` run as a user runs it: it shows progress while it copies and
stops cleanly on Ctrl-C (issue 11, item 11). Before the fix it printed nothing while it ran
and about 126 lines of py4j tracebacks on Ctrl-C."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from bkeeper.client import BookKeeper
from bkeeper.namedlog import NamedLogs

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "stream_copy.py"


async def _fill(uri: str, name: str, count: int) -> None:
    async with BookKeeper(uri) as bk:
        writer = await (await NamedLogs(bk).create(name)).open_writer()
        for i in range(count):
            await writer.append(b"%d" % i)
        await writer.close()


def test_stream_copy_shows_progress_and_stops_cleanly_on_ctrl_c(spark_cluster, tmp_path):
    pytest.importorskip("pyspark")
    uri = spark_cluster.uri
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, _fill(uri, "events", 50)).result()
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    command = [
        sys.executable, str(EXAMPLE), "--metadata", uri, "--source", "events",
        "--target", "events-copy", "--parquet", str(tmp_path / "parquet"),
        "--checkpoints", str(tmp_path / "ck"), "--progress-every", "0.5",
    ]  # fmt: skip
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True,
        start_new_session=True,  # with its JVM and workers: killed as one if the test fails
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        lines: list[str] = []
        deadline = time.monotonic() + 180
        while not any(": batch " in line and " 50 rows " in line for line in lines):
            assert time.monotonic() < deadline and proc.poll() is None, lines
            lines.append(proc.stdout.readline())
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    assert proc.returncode == 0, err
    assert out.splitlines()[-1] == "stopped"
    assert "Traceback" not in err and "py4j" not in err, err
