"""A few seconds of ``bkeeper bench fuzz`` against a real bookie process (the CI sample)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from bkeeper.testing.benchmarks import local_bookie_process
from bkeeper.testing.fuzz import FuzzConfig, run_fuzz
from bkeeper.testing.fuzz_frames import FrameFactory

#: Its tests start processes (tests/tiers.py).
pytestmark = pytest.mark.usefixtures("subprocesses")


def test_fuzz_sample_leaves_the_bookie_serving(tmp_path: Path) -> None:
    log_path = tmp_path / "bookie.log"
    start = time.monotonic()
    with local_bookie_process(str(tmp_path / "data"), log_path=str(log_path)) as started:
        host, port, proc = started
        config = FuzzConfig(
            host, port, duration_s=3.0, seed=11, pid=proc.pid, streams=2, closers=16,
            partial_connections=8, idle_connections=50,
        )  # fmt: skip
        report = asyncio.run(run_fuzz(config))
        assert proc.poll() is None
    elapsed = time.monotonic() - start
    assert report.failures == []
    assert report.served_after
    kinds = report.kinds
    families = FrameFactory(0, [1]).families
    assert all(kinds[k] > 0 for k in families["v2"] + families["v3"]), kinds
    assert sum(kinds[k] for k in families["fatal"]) > 0 and report.closed_after_fatal > 0
    assert kinds["truncated v2 frame"] + kinds["truncated v3 frame"] > 0
    # every kind above is what the sample must reach; how many frames 3 s make is the
    # machine's speed (about 10,000 and more here), which `bkeeper bench fuzz` reports
    assert report.frames == sum(kinds.values())
    log = log_path.read_text(errors="replace")
    assert "Traceback" not in log
    # Two budgets (connections, bad requests) of bursts of 20 and 10 lines a second, and the
    # few lines of start and stop.
    assert len(log.splitlines()) <= 2 * (20 + 10 * elapsed) + 10
