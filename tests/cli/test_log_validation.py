"""``bkeeper log`` refuses what it should (issue 39, "Validation"): an ack of a position that
is not one of the log's records (another log's ledger, past the end, inside a sealed ledger's
end or a batch's), an append to a log that does not exist (with the way to create it, or
``--create``), and names outside the one rule, each in one line ``error: ...`` with exit 1.
The docs' command-line example runs as printed.

The commands run in this process (tests/cli/runner.py) but for the docs' example and the
appends racing to create a log, which run as real processes. The tests share one cluster
(they stop no bookie), each on logs of its own."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from bkeeper.common.errors import ConfigError, PositionNotInLogError
from bkeeper.namedlog.core import check_log_name, check_subscription_name
from tests.cli.runner import run_cli
from tests.client.conftest import RealCluster, shared_cluster

__all__ = ["shared_cluster"]

DOCS = Path(__file__).parents[2] / "docs" / "logs.md"
# Nothing listens there: a command that got as far as connecting would fail differently.
NOWHERE = "zk://127.0.0.1:1/nowhere"
NAME_RULE = (
    "use 1 to 200 ASCII letters (A-Z, a-z), digits, '.', '_' or '-', starting with a letter "
    "or digit"
)


def bkeeper(uri: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``bkeeper ARGS --metadata URI`` in this process."""
    return run_cli(*args, "--metadata", uri)


def process(uri: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m bkeeper ARGS --metadata URI``: a real process."""
    return subprocess.run(
        [sys.executable, "-m", "bkeeper", *args, "--metadata", uri],
        capture_output=True, text=True, timeout=120, check=False, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The one line of a failed command's stderr (warnings about spare bookies aside)."""
    lines = [x for x in result.stderr.splitlines() if not x.startswith("warning: ")]
    assert result.returncode == 1, result.stderr
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def appended(uri: str, name: str, *records: str) -> list[str]:
    result = bkeeper(uri, "log", "append", name, *records)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


# -- log ack ---------------------------------------------------------------------------------
def test_ack_refuses_a_position_that_is_not_one_of_the_logs_records(
    shared_cluster: RealCluster,
) -> None:
    uri = shared_cluster.uri
    assert bkeeper(uri, "log", "create", "ack-other").returncode == 0
    (foreign,) = appended(uri, "ack-other", "x")  # another log's
    assert bkeeper(uri, "log", "create", "ack-orders").returncode == 0
    first = appended(uri, "ack-orders", "a", "b", "c", "d", "e")
    ledger = first[0].split(":")[0]
    assert bkeeper(uri, "log", "subscribe", "ack-orders", "billing").returncode == 0
    held = f"it holds {first[0]} .. {first[-1]}"

    # The case: another log's ledger (it failed with 'wrong password', or passed).
    other = bkeeper(uri, "log", "ack", "ack-orders", "billing", foreign, "--individual")
    assert error_line(other) == (
        f"error: position {foreign} is not in log 'ack-orders': ledger {foreign.split(':')[0]} "
        f"is not one of its ledgers ({held})"
    )
    past = bkeeper(uri, "log", "ack", "ack-orders", "billing", f"{ledger}:5")
    assert error_line(past) == (
        f"error: position {ledger}:5 is past the last record of log 'ack-orders' ({held})"
    )
    batch = bkeeper(uri, "log", "ack", "ack-orders", "billing", f"{ledger}:2:1")
    assert error_line(batch) == (
        f"error: position {ledger}:2:1 is not in log 'ack-orders': entry {ledger}:2 holds 1 record "
        f"({held})"
    )
    # A second session opens a second ledger: the first is sealed at entry 4.
    later = appended(uri, "ack-orders", "f")
    inside = bkeeper(uri, "log", "ack", "ack-orders", "billing", f"{ledger}:7")
    assert error_line(inside) == (
        f"error: position {ledger}:7 is not in log 'ack-orders': ledger {ledger} ends at entry 4 "
        f"(it holds {first[0]} .. {later[0]})"
    )
    subscriptions = bkeeper(uri, "log", "subscriptions", "ack-orders", "--json")
    assert f'"next": "{first[0]}"' in subscriptions.stdout, "nothing refused was acknowledged"

    good = bkeeper(uri, "log", "ack", "ack-orders", "billing", first[3], "--individual")
    assert good.returncode == 0, good.stderr
    consumed = bkeeper(uri, "log", "consume", "ack-orders", "billing", "--max", "5")
    assert [x.split("\t")[3] for x in consumed.stdout.splitlines()] == ["a", "b", "c", "e", "f"]
    drained = bkeeper(uri, "log", "subscriptions", "ack-orders", "--json")
    assert '"backlog_entries": 0' in drained.stdout, "nothing after f"
    truncated = bkeeper(uri, "log", "truncate", "ack-orders", "--before", later[0])
    assert truncated.returncode == 0, truncated.stderr
    gone = bkeeper(uri, "log", "ack", "ack-orders", "billing", first[1])
    assert error_line(gone) == (
        f"error: position {first[1]} was truncated away from log 'ack-orders' "
        f"(it holds {later[0]} .. {later[0]})"
    )


async def test_the_library_refuses_it_too_with_a_typed_error(
    shared_cluster: RealCluster,
) -> None:
    from bkeeper.client import BookKeeper
    from bkeeper.namedlog import NamedLogs, Position

    async with BookKeeper(shared_cluster.uri) as bk:
        logs = NamedLogs(bk)
        other = await logs.create("lib-other")
        async with await other.open_writer() as writer:
            foreign = await writer.append(b"x")
        orders = await logs.create("lib-orders")
        async with await orders.open_writer() as writer:
            mine = await writer.append(b"a")
        async with await orders.subscribe("billing") as consumer:
            with pytest.raises(PositionNotInLogError, match="is not one of its ledgers"):
                await consumer.ack_up_to(foreign)
            with pytest.raises(ConfigError, match="past the last record of log 'lib-orders'"):
                await consumer.ack_up_to(Position(mine.ledger_id, 1))
            await consumer.ack_up_to(mine)
            assert consumer.state.mark == mine


def test_the_docs_command_line_example_runs_as_printed(
    shared_cluster: RealCluster,
    tmp_path: Path,
) -> None:
    uri = shared_cluster.uri
    assert bkeeper(uri, "log", "create", "before").returncode == 0
    appended(uri, "before", "x")  # so that orders' ledger is not ledger 0
    script = re.search(r"## From the command line\n\n```sh\n(.*?)```", DOCS.read_text(), re.S)
    assert script is not None
    bin_dir = str(Path(sys.executable).parent)  # where the bkeeper script is
    env = {**os.environ, "BKEEPER_METADATA": uri, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script.group(1)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "error" not in result.stderr, result.stderr
    payloads = [x.split("\t")[3] for x in result.stdout.splitlines() if x.count("\t") == 3]
    assert payloads == ["a", "b", "c", "e"], result.stdout  # d acknowledged by the operator


# -- log append ------------------------------------------------------------------------------
def test_append_to_a_missing_log_says_how_to_create_it_and_create_does(
    shared_cluster: RealCluster,
) -> None:
    uri = shared_cluster.uri
    missing = bkeeper(uri, "log", "append", "nosuch", "a")
    assert error_line(missing) == (
        "error: log 'nosuch' does not exist (create it with 'bkeeper log create nosuch', "
        "or pass --create)"
    )
    assert missing.stdout == ""
    # Several at once, each with --create: the log is created once, none fails for that. A
    # log has one writer at a time, so a session opening after another fences it: the fenced
    # one fails saying another writer took over; the log holds each record that succeeded, once (a fenced session's
    # record may be in it too: the next writer's recovery kept what reached the bookies).
    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(
            lambda i: process(uri, "log", "append", "nosuch", f"r{i}", "--create"), range(3)
        ))  # fmt: skip
    appended = []
    for i, result in enumerate(results):
        if result.returncode == 0:
            appended.append(f"r{i}")
        else:
            assert "another writer took over" in error_line(result), result.stderr
    assert appended, [r.stderr for r in results]
    read = bkeeper(uri, "log", "read", "nosuch")
    found = sorted(x.split("\t")[3] for x in read.stdout.splitlines())
    assert set(appended) <= set(found) <= {"r0", "r1", "r2"} and len(set(found)) == len(found)


# -- names -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name",
    ["é", "caf\u00e9", "日志", "a/b", "a b", "", "x" * 201, ".", "..", "-a", "_a", ".a", "a\n",
     "a:b", "a,b"],
)  # fmt: skip
def test_a_log_name_outside_the_rule_is_refused_saying_the_rule(name: str) -> None:
    with pytest.raises(ConfigError) as refused:
        check_log_name(name)
    assert str(refused.value) == f"log name {name!r}: {NAME_RULE}"


@pytest.mark.parametrize("name", ["a", "A.b_c-d", "0", "x" * 200, "orders.v2", "a..b"])
def test_a_log_name_inside_the_rule_is_taken(name: str) -> None:
    assert check_log_name(name) == name


@pytest.mark.parametrize("name", ["é", "a/b", "a b", "", "x" * 129, ".", "..", "-a"])
def test_a_subscription_name_outside_the_rule_is_refused_saying_the_rule(name: str) -> None:
    with pytest.raises(ConfigError) as refused:
        check_subscription_name(name)
    assert str(refused.value) == (
        f"subscription name {name!r}: use 1 to 128 ASCII letters (A-Z, a-z), digits, '.', '_' "
        "or '-', starting with a letter or digit"
    )
    assert check_subscription_name("x" * 128) == "x" * 128


@pytest.mark.parametrize(
    "args",
    [("append", "café", "a"), ("ack", "café", "billing", "0:0"),
     ("consume", "café", "billing")],
)  # fmt: skip
def test_the_cli_refuses_a_bad_log_name_before_connecting(args: tuple[str, ...]) -> None:
    result = bkeeper(NOWHERE, "log", *args)
    assert error_line(result) == f"error: log name 'café': {NAME_RULE}"


def test_the_cli_refuses_a_bad_subscription_name_before_connecting() -> None:
    result = bkeeper(NOWHERE, "log", "ack", "orders", "bill ing", "0:0")
    assert error_line(result).startswith("error: subscription name 'bill ing': use 1 to 128 ")
