"""``bkeeper log create`` with settings, ``log config`` (show, change, unset, bad values) and
``log list``'s settings columns (issue 39), on an in-memory cluster; and the issue's done-when
on real ZooKeeper and bookie processes: a log created with ``--retention-consumed --roll-age
2s``, records appended, a subscription that consumed everything, and its old ledgers trimmed
within 30 s with no writer rolling by size."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from bkeeper.cli._units import format_duration, format_size, parse_duration, parse_size
from bkeeper.cli.log import log
from bkeeper.client import BookKeeper
from bkeeper.common.errors import BKeeperError
from bkeeper.meta.cluster import format_cluster
from bkeeper.meta.memory import MemoryNodeStore
from bkeeper.namedlog import NamedLogs
from bkeeper.namedlog.core import LogMetadata, logs_root
from tests.client.conftest import real_cluster
from tests.e2e.helpers import bkeeper

__all__ = ["real_cluster"]

# Nothing listens there: a command that got as far as connecting would fail differently.
NOWHERE = "zk://127.0.0.1:1/nowhere"
_TREES = itertools.count()


@pytest.fixture
def memory_uri() -> str:
    """A formatted in-memory cluster of its own (metadata only: no bookie is needed)."""
    name = f"s3-log-config-{next(_TREES)}-{os.getpid()}"
    asyncio.run(format_cluster(MemoryNodeStore.open(name), "/ledgers"))
    return f"memory://{name}/ledgers"


def run(uri: str, *args: str) -> tuple[int, str, str]:
    """``bkeeper log ARGS --metadata URI`` in this process: exit status, stdout, stderr (a
    library error as ``bkeeper.cli.main.main`` prints it: one line, exit 1)."""
    result = CliRunner().invoke(log, [*args, "--metadata", uri], env={"COLUMNS": "80"})
    if isinstance(result.exception, BKeeperError):
        return 1, result.stdout, f"error: {result.exception}\n"
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
    return result.exit_code, result.stdout, result.stderr


def stored(uri: str, name: str) -> dict:
    tree = MemoryNodeStore.open(uri.split("/")[2])
    data, _version = asyncio.run(tree.get(f"{logs_root('/ledgers')}/{name}"))
    return json.loads(data).get("config", {})


def test_sizes_and_durations_parse_and_show_as_typed() -> None:
    assert parse_size("64MiB") == 64 << 20 == parse_size("64M") == parse_size("64mb")
    assert parse_size("10GiB") == 10 << 30 and parse_size("4096") == 4096
    assert (parse_duration("2s"), parse_duration("1h"), parse_duration("7d")) == (
        2_000,
        3_600_000,
        604_800_000,
    )
    assert parse_duration("0") == 0 and parse_duration("250ms") == 250
    assert (format_size(64 << 20), format_size(10 << 30), format_size(1000)) == (
        "64MiB",
        "10GiB",
        "1000B",
    )
    assert (format_duration(7 * 86_400_000), format_duration(2_000)) == ("7d", "2s")
    assert format_duration(1_500) == "1500ms"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--roll-age", "2x"],
            "error: --roll-age: '2x' is not a duration: use a whole number and a unit ms, s, "
            "m, h, d or w, like 2s, 1h or 7d",
        ),
        (["--retention-age", "7"], "error: --retention-age: '7' is not a duration"),
        (["--roll-size", "lots"], "error: --roll-size: 'lots' is not a size"),
        (["--write-quorum", "0"], "error: --write-quorum: '0' is not a whole number of at least 1"),
        (["--roll-size", "0"], "error: roll_bytes: must be a positive integer, got 0"),
        (
            ["-e", "2", "--write-quorum", "3"],
            "error: ensemble_size/write_quorum/ack_quorum: need ensemble >= write quorum >= "
            "ack quorum, got 2/3/2",
        ),
    ],
)
@pytest.mark.parametrize("command", ["create", "config"])
def test_a_bad_value_is_one_line_and_exit_1_before_connecting(command, args, message) -> None:
    code, out, err = run(NOWHERE, command, "orders", *args)
    assert code == 1, (out, err)
    assert err.startswith(message) and err.count("\n") == 1, err
    assert "Traceback" not in err and out == ""


def test_config_refuses_an_unknown_setting_to_unset() -> None:
    code, out, err = run(NOWHERE, "config", "orders", "--unset", "roll")
    assert (code, out) == (1, "")
    assert err == (
        "error: --unset roll: use one of retention-age, retention-size, retention-consumed, "
        "roll-size, roll-age, replication, all\n"
    )


def test_create_stores_the_settings_given_and_config_shows_them(memory_uri) -> None:
    code, out, err = run(memory_uri, "create", "orders", "--retention-consumed", "--roll-age",
                         "2s", "--roll-size", "64MiB", "-e", "2")  # fmt: skip
    assert code == 0, err
    assert out.splitlines()[0] == "created log orders"
    assert "  retention consumed  on" in out and "  roll age            2s" in out
    assert stored(memory_uri, "orders") == {
        "retention_consumed": True,
        "roll_bytes": 64 << 20,
        "roll_age_ms": 2_000,
        "ensemble_size": 2,
        "write_quorum": 2,
        "ack_quorum": 2,
    }
    code, out, err = run(memory_uri, "config", "orders")
    assert code == 0, err
    assert out.splitlines() == [
        "settings of log orders (-: not set, a writer's own default applies)",
        "  retention age       -  (default off)",
        "  retention size      -  (default off)",
        "  retention consumed  on",
        "  roll size           64MiB",
        "  roll age            2s",
        "  ensemble/quorums    2/2/2",
    ]
    assert run(memory_uri, "create", "plain")[1] == "created log plain\n"
    assert stored(memory_uri, "plain") == {}, "nothing given: no config stored"


def test_config_changes_print_before_and_after_and_unset(memory_uri) -> None:
    assert run(memory_uri, "create", "orders", "--retention-consumed")[0] == 0
    code, out, err = run(memory_uri, "config", "orders", "--retention-age", "7d",
                         "--no-retention-consumed", "--write-quorum", "2")  # fmt: skip
    assert code == 0, err
    assert out.splitlines() == [
        "settings of log orders changed:",
        "  retention age       - -> 7d",
        "  retention consumed  on -> off",
        "  ensemble/quorums    - -> 3/2/2",
    ]
    assert run(memory_uri, "config", "orders", "--retention-age", "7d")[1] == (
        "settings of log orders unchanged\n"
    )
    code, out, err = run(memory_uri, "config", "orders", "--unset", "replication",
                         "--unset", "retention-consumed")  # fmt: skip
    assert code == 0, err
    assert "  ensemble/quorums    3/2/2 -> -" in out and "  retention consumed  off -> -" in out
    assert stored(memory_uri, "orders") == {"retention_age_ms": 7 * 86_400_000}
    assert run(memory_uri, "config", "orders", "--unset", "all")[0] == 0
    assert stored(memory_uri, "orders") == {}
    code, _out, err = run(memory_uri, "config", "missing", "--roll-age", "1h")
    assert (code, err) == (1, "error: no log named 'missing'\n")


def test_a_wrong_stored_setting_is_shown_and_can_be_replaced(memory_uri) -> None:
    assert run(memory_uri, "create", "orders", "--roll-age", "1h")[0] == 0
    tree = MemoryNodeStore.open(memory_uri.split("/")[2])
    path = f"{logs_root('/ledgers')}/orders"
    data, version = asyncio.run(tree.get(path))
    doc = json.loads(data)
    doc["config"]["roll_age_ms"] = "soon"
    asyncio.run(tree.set(path, json.dumps(doc).encode(), version))
    code, _out, err = run(memory_uri, "config", "orders")
    assert code == 1
    assert err == (
        "error: log 'orders': the settings stored with it are wrong: config.roll_age_ms: must "
        "be an integer >= 0, got 'soon' (change or unset it with bkeeper log config orders)\n"
    )
    code, out, _err = run(memory_uri, "list")
    assert code == 0 and "wrong: see" in out, out
    assert run(memory_uri, "config", "orders", "--unset", "all")[0] == 0
    assert LogMetadata.decode(asyncio.run(tree.get(path))[0]).config_text is None


def test_list_shows_each_logs_settings_in_80_columns(memory_uri) -> None:
    run(memory_uri, "create", "orders", "--retention-consumed", "--retention-age", "7d",
        "--retention-size", "10GiB", "--roll-size", "64MiB", "--roll-age", "1h")  # fmt: skip
    run(memory_uri, "create", "audit", "-e", "5", "--write-quorum", "3", "--ack-quorum", "2")
    run(memory_uri, "create", "plain")
    code, out, err = run(memory_uri, "list")
    assert code == 0, err
    lines = out.splitlines()
    assert max(map(len, lines)) <= 80, out
    header = next(line for line in lines if "name" in line)
    for column in ("ledgers", "retention", "roll", "e/w/a", "backlog"):
        assert column in header, header
    rows = {line.split()[1]: line for line in lines if line.startswith("│")}
    assert "consumed, 7d, 10GiB" in rows["orders"] and "64MiB, 1h" in rows["orders"]
    assert "5/3/2" in rows["audit"]
    assert rows["plain"].split("│")[3:6] == [" -         ", " -    ", " -     "] or (
        [cell.strip() for cell in rows["plain"].split("│")[3:6]] == ["-", "-", "-"]
    )


# -- the done-when, on real processes ---------------------------------------------------------


def _ledgers(uri: str, name: str) -> list[int]:
    async def read() -> list[int]:
        async with BookKeeper(uri) as bk:
            meta = await NamedLogs(bk).log(name).metadata()
            return [ledger.ledger_id for ledger in meta.ledgers]

    return asyncio.run(read())


def test_consumed_ledgers_are_trimmed_within_30_s_with_a_small_roll_age(real_cluster) -> None:
    uri = real_cluster.uri
    created = bkeeper(uri, "log", "create", "events", "--retention-consumed", "--roll-age", "2s")
    assert created.returncode == 0, created.stderr
    sessions = []
    for records in (("a", "b", "c"), ("d", "e")):  # a writer session each: a ledger each
        appended = bkeeper(uri, "log", "append", "events", *records)
        assert appended.returncode == 0, appended.stderr
        sessions.append(int(appended.stdout.split(":")[0]))
    empty = bkeeper(uri, "log", "append", "events", stdin="")  # a session with no record
    assert empty.returncode == 0, empty.stderr
    listed = _ledgers(uri, "events")
    assert listed[:2] == sessions and len(listed) == 3, "a ledger for the empty session too"
    sessions.append(listed[2])
    env = {**os.environ, "BKEEPER_METADATA": uri}
    writer = subprocess.Popen(
        [sys.executable, "-m", "bkeeper", "log", "append", "events"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=env,
    )  # fmt: skip
    try:
        assert writer.stdin is not None
        writer.stdin.write("f\n")
        writer.stdin.flush()
        assert bkeeper(uri, "log", "subscribe", "events", "billing").returncode == 0
        deadline = time.monotonic() + 20
        printed: list[str] = []
        while len(printed) < 6 and time.monotonic() < deadline:
            consumed = bkeeper(uri, "log", "consume", "events", "billing", "--timeout", "1")
            assert consumed.returncode == 0, consumed.stderr
            printed += [line.split("\t")[3] for line in consumed.stdout.splitlines()]
        assert printed == ["a", "b", "c", "d", "e", "f"], "consumed everything"
        consumed_at = time.monotonic()
        while set(sessions) & set(_ledgers(uri, "events")):
            assert time.monotonic() - consumed_at < 30, _ledgers(uri, "events")
            time.sleep(0.5)
        left = _ledgers(uri, "events")
        assert all(ledger > max(sessions) for ledger in left), "the empty one went too"
    finally:
        assert writer.stdin is not None
        writer.stdin.close()
        writer.wait(60)
        assert writer.stderr is not None
        err = writer.stderr.read()
    assert writer.returncode == 0, err
    again = bkeeper(uri, "log", "consume", "events", "billing", "--timeout", "1")
    assert (again.returncode, again.stdout) == (0, ""), again.stderr  # nothing reported lost
    reread = bkeeper(uri, "log", "read", "events")
    assert reread.returncode == 0, reread.stderr
    listing = bkeeper(uri, "log", "list")
    assert "consumed" in listing.stdout and "2s" in listing.stdout, listing.stdout
    assert "billing: 0 entries, 0 B" in listing.stdout, listing.stdout
    assert bkeeper(uri, "log", "append", "events", "g").returncode == 0
    assert "billing: 1 entry, " in bkeeper(uri, "log", "list").stdout, "one entry, not entries"
