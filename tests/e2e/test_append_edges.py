"""``bkeeper log append`` fed as a user feeds it: slowly, and with every bookie gone (issue 11,
item 1). Before the fix, a pause longer than the add timeout lost every record while the
command printed ``appended 2 records`` and exited 0.

The appending command is a real process fed through a pipe; creating and reading the logs
runs in this process (tests/cli/runner.py). The slow producer's test stops no bookie: it
runs on the module's shared cluster."""

from __future__ import annotations

import time

from bkeeper.client import BookKeeper
from bkeeper.client.config import ClientConfig
from bkeeper.namedlog import NamedLogs, Position
from tests.cli.runner import run_cli_async
from tests.client.conftest import shared_cluster
from tests.e2e.helpers import append_process

__all__ = ["shared_cluster"]

#: The client's default add timeout; the producer pauses longer than that.
ADD_TIMEOUT_S = ClientConfig().add_timeout_ms / 1000


async def _wait_last_position(uri: str, name: str) -> Position:
    async with BookKeeper(uri) as bk:
        named = NamedLogs(bk).log(name)
        deadline = time.monotonic() + 60
        while (last := await named.last_position()) is None:
            assert time.monotonic() < deadline, "the first record never became durable"
            time.sleep(0.05)
        return last


async def test_a_slow_producer_loses_nothing(shared_cluster) -> None:
    uri = shared_cluster.uri
    assert (await run_cli_async("log", "create", "slow", "--metadata", uri)).returncode == 0
    with append_process(uri, "slow") as proc:
        assert proc.stdin is not None
        proc.stdin.write(b"one\n")
        proc.stdin.flush()
        first = await _wait_last_position(uri, "slow")
        time.sleep(ADD_TIMEOUT_S + 1.5)  # the producer is idle longer than the add timeout
        _out, err = proc.communicate(b"two\n", timeout=120)
    assert proc.returncode == 0, err.decode()
    assert err.decode().splitlines()[-1] == (
        f"appended 2 records to slow ({first} to {first.ledger_id}:{first.entry_id + 1})"
    )
    read = await run_cli_async("log", "read", "slow", "--metadata", uri)
    assert [line.split("\t")[3] for line in read.stdout.splitlines()] == ["one", "two"]
    assert "Traceback" not in err.decode()


async def test_append_says_what_failed_when_every_bookie_is_gone(real_cluster) -> None:
    uri = real_cluster.uri
    assert (await run_cli_async("log", "create", "doomed", "--metadata", uri)).returncode == 0
    with append_process(uri, "doomed") as proc:
        assert proc.stdin is not None
        proc.stdin.write(b"kept\n")
        proc.stdin.flush()
        first = await _wait_last_position(uri, "doomed")
        real_cluster.stop_all()
        _out, err = proc.communicate(b"lost-1\nlost-2\n", timeout=120)
    text = err.decode()
    assert proc.returncode == 1, text
    last_line = text.strip().splitlines()[-1]
    assert last_line.startswith(
        f"error: appended 1 record to doomed ({first} to {first}); the next append failed: "
    ), text
    assert "Traceback" not in text and "never retrieved" not in text
