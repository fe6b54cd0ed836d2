"""Ctrl-C on a command that writes reports what it did (issue 39, "Interrupted work"):
``bkeeper log append`` fed by a slow pipe says exactly which records went in (those, and only
those, are in the log), ``log consume --follow`` says how far it acknowledged (and nothing it
printed comes again); each exits 130 with that one line, no traceback, no asyncio noise."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from tests.client.conftest import RealCluster, real_cluster  # noqa: F401 (a fixture)

#: Its tests start processes (tests/tiers.py).
pytestmark = pytest.mark.usefixtures("subprocesses")

NOISE = ("Traceback", "never retrieved", "Task was destroyed", "aborted", "Error", "error")


def bkeeper(uri: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bkeeper", *args, "--metadata", uri],
        capture_output=True, text=True, timeout=120, check=False, stdin=subprocess.DEVNULL,
    )  # fmt: skip


#: How long the pipe test feeds records waiting for the first progress line.
PROGRESS_WAIT_S = 60.0


def started(uri: str, *args: str, stdin: int | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "bkeeper", *args, "--metadata", uri],
        stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def payloads(uri: str, name: str) -> list[tuple[str, str]]:
    read = bkeeper(uri, "log", "read", name)
    assert read.returncode == 0, read.stderr
    return [(x.split("\t")[0], x.split("\t")[3]) for x in read.stdout.splitlines()]


def quiet(stderr: str) -> list[str]:
    """stderr's lines, the client's warning about spare bookies aside; none is noise."""
    lines = [x for x in stderr.splitlines() if not x.startswith("warning: ")]
    assert not any(word in line for line in lines for word in NOISE), stderr
    return lines


def test_ctrl_c_mid_append_from_a_slow_pipe_says_which_records_went_in(
    real_cluster: RealCluster,  # noqa: F811
) -> None:
    uri = real_cluster.uri
    assert bkeeper(uri, "log", "create", "orders").returncode == 0
    proc = started(uri, "log", "append", "orders", stdin=subprocess.PIPE)
    assert proc.stdin is not None
    stop = threading.Event()
    pipe = proc.stdin

    def slowly() -> None:  # a record every 0.1 s until told to stop
        for i in range(10_000):
            if stop.wait(0.1):
                return
            try:
                pipe.write(f"record-{i}\n")
                pipe.flush()
            except (BrokenPipeError, ValueError):
                return

    writing = threading.Thread(target=slowly, daemon=True)
    writing.start()
    try:
        deadline = time.monotonic() + 60
        while len(payloads(uri, "orders")) < 6:  # some acknowledged, more to come
            assert time.monotonic() < deadline, "records did not go in"
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
    finally:
        stop.set()
        writing.join(5)
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, stderr
    lines = quiet(stderr)
    written = payloads(uri, "orders")
    count = len(written)
    assert [p for _, p in written] == [f"record-{i}" for i in range(count)]
    assert lines[-1] == (
        f"interrupted: appended {count} of the records read ({written[0][0]} .. "
        f"{written[-1][0]}); the rest were not written"
    ), stderr
    assert all(line.startswith("appending to orders: ") for line in lines[:-1]), stderr


def test_consume_follow_stopped_by_ctrl_c_says_how_far_it_acknowledged(
    real_cluster: RealCluster,  # noqa: F811
) -> None:
    uri = real_cluster.uri
    assert bkeeper(uri, "log", "create", "events").returncode == 0
    assert bkeeper(uri, "log", "append", "events", "a", "b", "c").returncode == 0
    assert bkeeper(uri, "log", "subscribe", "events", "audit").returncode == 0
    proc = started(uri, "log", "consume", "events", "audit", "--follow")
    assert proc.stdout is not None
    try:
        lines = [proc.stdout.readline() for _ in range(3)]
        later = bkeeper(uri, "log", "append", "events", "d", "e")  # tailed as it comes
        assert later.returncode == 0, later.stderr
        lines += [proc.stdout.readline() for _ in range(2)]
        proc.send_signal(signal.SIGINT)
        rest, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, stderr
    assert rest == ""
    assert [x.split("\t")[3].strip() for x in lines] == ["a", "b", "c", "d", "e"]
    last = lines[-1].split("\t")[0]
    assert quiet(stderr) == [f"stopped after 5 records (acknowledged up to {last})"]
    again = bkeeper(uri, "log", "consume", "events", "audit", "--timeout", "1")
    assert again.returncode == 0 and again.stdout == "", "nothing printed is delivered again"
    assert re.search(r'"backlog_entries": 0', bkeeper(uri, "log", "subscriptions", "events",
                                                     "--json").stdout)  # fmt: skip


def test_ctrl_c_on_a_kv_put_that_keeps_trying_says_its_outcome_is_unknown() -> None:
    """The member at ``--url`` takes the connection and never answers: once it has the
    put's connection (the put is past its imports and trying), Ctrl-C."""
    with socket.create_server(("127.0.0.1", 0)) as member:
        member.settimeout(60)  # a hang guard
        port = member.getsockname()[1]
        proc = started("zk://127.0.0.1:1/nowhere", "kv", "put", "--name", "s",
                       "--url", f"http://127.0.0.1:{port}", "k", "v")  # fmt: skip
        try:
            connection, _ = member.accept()
        except TimeoutError:
            proc.kill()
            pytest.fail(f"the put never connected: {proc.communicate()}")
        with connection:
            proc.send_signal(signal.SIGINT)
            out, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    assert out == ""
    assert quiet(stderr) == [
        "interrupted: the put of 'k' was not confirmed; it may or may not be applied "
        "(see: bkeeper kv get --name s k)"
    ]


def test_a_long_append_from_a_pipe_shows_its_progress_on_stderr(
    real_cluster: RealCluster,  # noqa: F811
) -> None:
    uri = real_cluster.uri
    assert bkeeper(uri, "log", "create", "slow").returncode == 0
    proc = started(uri, "log", "append", "slow", stdin=subprocess.PIPE)
    assert proc.stdin is not None and proc.stderr is not None
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr or ()), daemon=True)
    reader.start()
    # A record every 0.25 s until the command said how far it got (at least 20 records):
    # on a loaded machine its start alone may take the first seconds, and records that
    # arrive all at once are appended before any progress line is due.
    sent = 0
    deadline = time.monotonic() + PROGRESS_WAIT_S
    while sent < 20 or not any(x.startswith("appending to slow:") for x in list(lines)):
        assert time.monotonic() < deadline, f"no progress line after {sent} records: {lines}"
        proc.stdin.write(f"r{sent}\n")
        proc.stdin.flush()
        sent += 1
        time.sleep(0.25)
    proc.stdin.close()
    assert proc.wait(timeout=60) == 0, lines
    reader.join(timeout=10)
    out = proc.stdout.read() if proc.stdout is not None else ""
    assert out == "", "progress never goes to stdout"
    stderr = "".join(lines)
    *progress, summary = quiet(stderr)
    assert summary.startswith(f"appended {sent} records to slow ("), stderr
    assert progress, "a line at least every 2 s after the first 2 s"
    assert all(re.fullmatch(r"appending to slow: \d+ records? appended( \(last \d+:\d+\))?, "
                            r"\d+ in flight", line) for line in progress), progress  # fmt: skip
