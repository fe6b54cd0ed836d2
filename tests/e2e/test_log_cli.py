"""``bkeeper log ...`` against a real cluster, as a user runs it: in this process
(tests/cli/runner.py), but for a few runs of ``python -m bkeeper`` (an append fed on standard
input, a read, a failure) that keep the real process's start-up and exit statuses tested.
The tests share one cluster (they stop no bookie), each on logs of its own."""

from __future__ import annotations

import subprocess

from tests.cli.runner import run_cli
from tests.client.conftest import shared_cluster
from tests.e2e.helpers import bkeeper as process

__all__ = ["shared_cluster"]


def bkeeper(uri: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """``bkeeper ARGS --metadata URI`` in this process."""
    return run_cli(*args, "--metadata", uri, stdin=stdin)


def test_log_commands(shared_cluster) -> None:
    uri = shared_cluster.uri
    assert bkeeper(uri, "log", "create", "events").returncode == 0
    again = bkeeper(uri, "log", "create", "events")
    assert again.returncode == 1 and again.stderr.strip().splitlines()[-1].startswith("error:")
    appended = bkeeper(uri, "log", "append", "events", "one", "two")
    assert appended.returncode == 0, appended.stderr
    positions = appended.stdout.split()
    assert len(positions) == 2 and positions[0].endswith(":0")
    fed = process(uri, "log", "append", "events", "--key", "k", stdin="three\nfour\n")
    assert fed.returncode == 0, fed.stderr  # a real process reading its standard input
    read = process(uri, "log", "read", "events")
    assert read.returncode == 0, read.stderr
    lines = read.stdout.splitlines()
    assert [line.split("\t")[3] for line in lines] == ["one", "two", "three", "four"]
    assert lines[2].split("\t")[2] == "k"
    from_second = bkeeper(uri, "log", "read", "events", "--from", positions[1])
    assert [line.split("\t")[3] for line in from_second.stdout.splitlines()] == [
        "two",
        "three",
        "four",
    ]
    listing = bkeeper(uri, "log", "list")
    assert "events" in listing.stdout and listing.returncode == 0
    bad = bkeeper(uri, "log", "read", "events", "--from", "nonsense")
    assert bad.returncode != 0 and "--from" in bad.stderr
    third = lines[2].split("\t")[0]
    truncated = bkeeper(uri, "log", "truncate", "events", "--before", third)
    assert truncated.returncode == 0 and truncated.stdout.strip() == "deleted 1 ledger of events"
    after = bkeeper(uri, "log", "read", "events")
    assert [line.split("\t")[3] for line in after.stdout.splitlines()] == ["three", "four"]
    assert bkeeper(uri, "log", "delete", "events", "--force").returncode == 0
    missing = process(uri, "log", "read", "events")
    assert missing.returncode == 1 and "no log named 'events'" in missing.stderr


def test_log_commands_with_record_batches(shared_cluster) -> None:
    uri = shared_cluster.uri
    assert bkeeper(uri, "log", "create", "batched").returncode == 0
    old = bkeeper(uri, "log", "append", "batched", "old")  # format 1, as before batching
    assert old.returncode == 0, old.stderr
    lines = "".join(f"line-{i}\n" for i in range(25))
    appended = bkeeper(
        uri, "log", "append", "batched", "--batch", "--batch-max-records", "10",
        "--linger-ms", "50", "--compression", "zstd", stdin=lines,
    )  # fmt: skip
    assert appended.returncode == 0, appended.stderr
    # The summary is the last line; before it, on this cluster of 3 bookies (no spare for an
    # ensemble of 3), the client's one warning, and nothing else.
    *before, summary = appended.stderr.strip().splitlines()
    assert summary.startswith("appended 25 records to batched"), appended.stderr
    assert len(before) <= 1 and all("no spare" in line for line in before), appended.stderr
    read = bkeeper(uri, "log", "read", "batched")
    assert read.returncode == 0, read.stderr
    rows = [line.split("\t") for line in read.stdout.splitlines()]
    assert [row[3] for row in rows] == ["old"] + [f"line-{i}" for i in range(25)]
    positions = [row[0] for row in rows[1:]]
    assert positions[1].count(":") == 2, "records inside a batch print LEDGER:ENTRY:INDEX"
    assert len({p.rsplit(":", 1)[0] for p in positions if p.count(":") == 2}) >= 3
    from_inside = bkeeper(uri, "log", "read", "batched", "--from", positions[12])
    assert [line.split("\t")[3] for line in from_inside.stdout.splitlines()] == [
        f"line-{i}" for i in range(12, 25)
    ]
    assert bkeeper(uri, "log", "subscribe", "batched", "audit").returncode == 0
    consumed = bkeeper(uri, "log", "consume", "batched", "audit", "--max", "6")
    assert consumed.returncode == 0, consumed.stderr
    shown = bkeeper(uri, "log", "subscriptions", "batched", "--json")
    assert f'"next": "{positions[5]}"' in shown.stdout, shown.stdout
    acked = bkeeper(uri, "log", "ack", "batched", "audit", positions[14])
    assert acked.returncode == 0, acked.stderr
    assert acked.stdout.strip() == f"subscription audit: next record at {positions[15]}"
    rest = bkeeper(uri, "log", "consume", "batched", "audit", "--max", "10")
    assert [line.split("\t")[3] for line in rest.stdout.splitlines()] == [
        f"line-{i}" for i in range(15, 25)
    ]
    drained = bkeeper(uri, "log", "subscriptions", "batched", "--json")
    assert '"backlog_entries": 0' in drained.stdout, "nothing after line-24"
    bad = bkeeper(uri, "log", "append", "batched", "--batch-max-bytes", "99999999", "x")
    assert bad.returncode == 1 and "batch_max_bytes" in bad.stderr
