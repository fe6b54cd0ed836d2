"""Durable subscriptions as a user runs them (real bookie processes): a consumer process
killed with kill -9 in the middle of a log, then another: every record is printed by one of
them, none skipped, and the second starts no later than the first record the first had not
printed (at-least-once: at most the acks of the last flush interval are lost).

The consumer killed is a real process; the other commands run in this process
(tests/cli/runner.py). The tests share one cluster (they stop no bookie), each on a log of
its own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from tests.cli.runner import run_cli
from tests.client.conftest import shared_cluster

__all__ = ["shared_cluster"]


def bkeeper(uri: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """``bkeeper ARGS --metadata URI`` in this process."""
    return run_cli(*args, "--metadata", uri, stdin=stdin)


RECORDS = 3_000


def test_a_consumer_killed_with_kill_9_loses_and_skips_nothing(shared_cluster) -> None:
    uri = shared_cluster.uri
    assert bkeeper(uri, "log", "create", "jobs").returncode == 0
    lines = "".join(f"job-{i:05d}\n" for i in range(RECORDS))
    appended = bkeeper(uri, "log", "append", "jobs", stdin=lines)
    assert appended.returncode == 0, appended.stderr
    assert bkeeper(uri, "log", "subscribe", "jobs", "workers").returncode == 0

    env = {**os.environ, "BKEEPER_METADATA": uri}
    first = subprocess.Popen(
        [sys.executable, "-m", "bkeeper", "log", "consume", "jobs", "workers"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    assert first.stdout is not None
    printed_first = []
    for line in first.stdout:
        printed_first.append(line.split("\t")[3].strip())
        if len(printed_first) == RECORDS // 2:
            os.kill(first.pid, signal.SIGKILL)
            break
    first.wait(30)
    assert first.returncode == -signal.SIGKILL

    # The second consumer, until the log's last record: each run stops after 3 s without a
    # record and acknowledges what it printed, so a pause on a loaded machine only makes
    # another run continue where it stopped (a hang ends at the bound).
    expected = [f"job-{i:05d}" for i in range(RECORDS)]
    printed_second: list[str] = []
    for _run in range(100):
        second = bkeeper(uri, "log", "consume", "jobs", "workers", "--wait", "30", "--timeout", "3")
        assert second.returncode == 0, second.stderr
        printed_second += [line.split("\t")[3] for line in second.stdout.splitlines()]
        if printed_second[-1:] == expected[-1:]:
            break
    assert printed_second[-1:] == expected[-1:], "the second consumer never reached the end"
    assert printed_second == expected[expected.index(printed_second[0]) :], "in order, no gap"
    assert expected.index(printed_second[0]) <= len(printed_first), "nothing skipped"
    assert printed_first == expected[: len(printed_first)]

    table = bkeeper(uri, "log", "subscriptions", "jobs", "--json")
    assert table.returncode == 0, table.stderr
    assert '"backlog_entries": 0' in table.stdout


def test_log_list_shows_each_subscriptions_backlog(shared_cluster) -> None:
    uri = shared_cluster.uri
    assert bkeeper(uri, "log", "create", "audit").returncode == 0
    assert bkeeper(uri, "log", "append", "audit", "a", "b", "c").returncode == 0
    assert bkeeper(uri, "log", "subscribe", "audit", "reporting").returncode == 0
    assert bkeeper(uri, "log", "consume", "audit", "reporting", "--max", "1").returncode == 0
    listing = bkeeper(uri, "log", "list")
    assert listing.returncode == 0, listing.stderr
    assert "reporting: 2 entries" in listing.stdout, listing.stdout
