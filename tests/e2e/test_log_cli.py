"""``bkeeper log ...`` against a real cluster, as a user runs it."""

from __future__ import annotations

import pytest

from tests.e2e.helpers import bkeeper

pytestmark = pytest.mark.integration


def test_log_commands(real_cluster) -> None:
    uri = real_cluster.uri
    assert bkeeper(uri, "log", "create", "events").returncode == 0
    again = bkeeper(uri, "log", "create", "events")
    assert again.returncode == 1 and again.stderr.strip().splitlines()[-1].startswith("error:")
    appended = bkeeper(uri, "log", "append", "events", "one", "two")
    assert appended.returncode == 0, appended.stderr
    positions = appended.stdout.split()
    assert len(positions) == 2 and positions[0].endswith(":0")
    assert (
        bkeeper(uri, "log", "append", "events", "--key", "k", stdin="three\nfour\n").returncode == 0
    )
    read = bkeeper(uri, "log", "read", "events")
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
    missing = bkeeper(uri, "log", "read", "events")
    assert missing.returncode == 1 and "no log named 'events'" in missing.stderr
