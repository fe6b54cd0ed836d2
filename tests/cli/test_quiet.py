"""Quiet by default (issue 39, "Noise"): an unreachable ZooKeeper is one line naming the host
and why, from the CLI and from the Python client, with no kazoo chatter; ``bkeeper dice``
prints only its values on stdout and no INFO line or raw status code anywhere; every status
code a person reads is named with what it means.

The command line runs in this process (tests/cli/runner.py) where only its output is
checked; ``--verbose`` and ``bkeeper dice`` run as real processes."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bkeeper.cli._logging import PlainFormatter
from bkeeper.client import BookKeeper
from bkeeper.client.config import ClientConfig
from bkeeper.common.errors import ConnectionLossError, LedgerFencedError, LogFencedError
from bkeeper.meta.store import SessionState, StoreConfig
from bkeeper.meta.zk import ZkNodeStore
from bkeeper.meta.zk_reach import KazooNarration, Reachability, split_hosts
from bkeeper.namedlog import NamedLogs
from bkeeper.testing.benchmarks import free_port
from bkeeper.testing.cluster import MemoryCluster
from bkeeper.testing.zookeeper import ZooKeeperConfig, ZooKeeperServer
from bkeeper.wire.codes import STATUS_MEANINGS, StatusCode, error_for_status, status_text
from tests.cli.runner import run_cli
from tests.client.conftest import RealCluster, real_cluster  # noqa: F401 (a fixture)

FAST = ClientConfig(add_timeout_ms=500, read_timeout_ms=500, long_poll_timeout_ms=200)
REFUSED = "connection refused (tried for 2 s; is ZooKeeper running?)"
UNRESOLVED = "name does not resolve (tried for 2 s; check the host name)"
#: How long a connect waits for a session when nothing says it is hopeless: a command that
#: gives up sooner on a refused or unresolved host knew the cause without waiting for it.
CONNECT_TIMEOUT_S = StoreConfig().connect_timeout_ms / 1000


def run(*args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    """``python -m bkeeper ARGS``: a real process, and how long it took."""
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "bkeeper", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    return result, time.monotonic() - started


# -- the command line with ZooKeeper away ------------------------------------------------
@pytest.mark.parametrize(
    ("hosts", "reason"),
    [("127.0.0.1:{port}", REFUSED), ("nohost.invalid:2181", UNRESOLVED)],
    ids=["refused", "unresolvable"],
)
def test_the_cli_says_which_zookeeper_host_and_why_in_one_line(hosts: str, reason: str) -> None:
    hosts = hosts.format(port=free_port())  # nothing listens there
    started = time.monotonic()
    result = run_cli("log", "list", "--metadata", f"zk://{hosts}/ledgers")
    elapsed_s = time.monotonic() - started
    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines() == [f"error: cannot reach ZooKeeper at {hosts}: {reason}"]
    assert result.stdout == ""
    # In this process (no interpreter start-up counted): sooner than the connect timeout,
    # which a command that did not know the cause would have waited.
    assert elapsed_s < CONNECT_TIMEOUT_S, "the cause was known after 2 s: no need to wait"


@pytest.mark.usefixtures("subprocesses")  # a real process: its logging as configured
def test_verbose_shows_kazoos_narration() -> None:
    port = free_port()
    result, _ = run("--verbose", "log", "list", "--metadata", f"zk://127.0.0.1:{port}/ledgers")
    assert result.returncode == 1
    assert "Connection dropped: socket connection error" in result.stderr  # at DEBUG
    assert f"error: cannot reach ZooKeeper at 127.0.0.1:{port}: {REFUSED}" in result.stderr


# -- the Python client -----------------------------------------------------------------------
class _Everything(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


#: The loggers a client's connect to ZooKeeper logs through.
CONNECT_LOGGERS = ("kazoo", "bkeeper.meta", "bkeeper.client")


@pytest.fixture
def root_records() -> list[logging.LogRecord]:
    """Every record any logger passes to the root, kazoo's included (whatever levels an
    in-process CLI test of the same worker left on kazoo's loggers: reset here)."""
    root, handler = logging.getLogger(), _Everything()
    level = root.level
    kazoo = logging.getLogger("kazoo")
    kazoo_level = kazoo.level
    kazoo.setLevel(logging.NOTSET)
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    yield handler.records  # type: ignore[misc]
    root.removeHandler(handler)
    root.setLevel(level)
    kazoo.setLevel(kazoo_level)


@pytest.mark.parametrize(
    ("hosts", "reason"),
    [("127.0.0.1:{port}", REFUSED), ("nohost.invalid:2181", UNRESOLVED)],
    ids=["refused", "unresolvable"],
)
async def test_the_python_client_raises_that_line_and_logs_no_warnings(
    hosts: str, reason: str, root_records: list[logging.LogRecord]
) -> None:
    hosts = hosts.format(port=free_port())
    started = time.monotonic()
    with pytest.raises(ConnectionLossError) as raised:
        async with BookKeeper(f"zk://{hosts}/ledgers"):
            pass
    assert str(raised.value) == f"cannot reach ZooKeeper at {hosts}: {reason}"
    assert time.monotonic() - started < CONNECT_TIMEOUT_S  # the client's store waits as long
    # Only the connect's loggers: a background task another test of this worker left on
    # the shared loop may log meanwhile.
    loud = [r.getMessage() for r in root_records
            if r.levelno >= logging.WARNING and r.name.startswith(CONNECT_LOGGERS)]  # fmt: skip
    assert len(loud) <= 1, loud
    assert any("Connection dropped" in r.getMessage() or "Cannot resolve" in r.getMessage()
               for r in root_records), "kazoo's lines are kept, at DEBUG"  # fmt: skip


# -- a session's outage, told once per change ------------------------------------------------
@pytest.mark.usefixtures("subprocesses")  # a ZooKeeper of its own, which it stops
async def test_an_outage_is_a_few_lines_from_bkeeper_meta_not_kazoos_chatter(
    tmp_path: Path, root_records: list[logging.LogRecord]
) -> None:
    server = ZooKeeperServer(ZooKeeperConfig(data_dir=tmp_path / "zk", port=0, tick_time_ms=500))
    server.start()
    try:
        config = StoreConfig(session_timeout_ms=2000)
        store = await ZkNodeStore.connect(server.connect_string, config)
        try:
            session = store.session_events()
            server.stop()
            while (await asyncio.wait_for(session.get(), 30)).state is not SessionState.SUSPENDED:
                pass
            await asyncio.sleep(4)  # kazoo tries again and again meanwhile
            session.close()
        finally:
            await asyncio.wait_for(store.aclose(), 30)
    finally:
        server.stop()
    ours = [(r.levelname, r.getMessage()) for r in root_records if r.name == "bkeeper.meta.zk"]
    hosts = server.connect_string
    assert ours[0][0] == "INFO" and ours[0][1].startswith(f"ZooKeeper {hosts}: connection lost")
    assert ours[1] == (
        "WARNING",
        f"ZooKeeper {hosts}: no connection for 2 s (connection refused): its session expires "
        "on the servers; still trying",
    )
    assert len(ours) == 2, ours
    loud = [r for r in root_records
            if r.levelno >= logging.WARNING and r.name.startswith(CONNECT_LOGGERS)]  # fmt: skip
    assert len(loud) == 1, [r.getMessage() for r in loud]  # before: kazoo's, every attempt


# -- what the zk driver makes of kazoo's lines -------------------------------------------------
def test_hosts_are_read_as_kazoo_reads_them() -> None:
    assert split_hosts("a:1, b:2,[::1]:3,c") == [("a", 1), ("b", 2), ("::1", 3), ("c", 2181)]


def test_a_connect_explained_host_by_host() -> None:
    reach = Reachability("a:1,b:2,c:3")
    assert not reach.hopeless()
    assert reach.explain("a:1,b:2,c:3", 10) == (
        "cannot reach ZooKeeper at a:1,b:2,c:3: no answer within 10 s"
    )
    reach.attempted("a", 1, ConnectionRefusedError(111, "Connection refused"))
    reach.unresolved("b", socket.gaierror(socket.EAI_NONAME, "Name or service not known"))
    assert not reach.hopeless()  # c has not failed yet
    reach.attempted("c", 3, OSError(113, "No route to host"))
    assert reach.hopeless()
    assert reach.explain("a:1,b:2,c:3", 2) == (
        "cannot reach ZooKeeper at a:1 (connection refused), b:2 (name does not resolve), "
        "c:3 (no route to host) (tried for 2 s)"
    )
    reach.attempted("c", 3, TimeoutError("timed out"))
    assert not reach.hopeless()  # a slow host may yet answer


def test_a_server_that_takes_tcp_and_gives_no_session_says_so() -> None:
    reach = Reachability("h:1")
    reach.attempted("h", 1, None)
    assert not reach.hopeless()
    assert reach.explain("h:1", 10) == (
        "ZooKeeper at h:1: connected, but no session within 10 s "
        "(is the server overloaded, paused, or not ZooKeeper?)"
    )


def test_kazoos_lines_go_to_debug_and_tell_the_reachability(
    root_records: list[logging.LogRecord],
) -> None:
    reach = Reachability("nohost.invalid:2181")
    narration = KazooNarration(logging.getLogger("kazoo.client"), reach)
    dns = socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    narration.warning("Cannot resolve %s: %s", "nohost.invalid", dns)
    narration.warn("Received unknown event %r", 7)
    narration.info("Connecting to %s(%s):%s, use_ssl: %r", "h", "1.2.3.4", 1, False)
    try:
        raise ValueError("a bug")
    except ValueError:
        narration.exception("Unhandled exception in connection loop")
    levels = [(r.name, r.levelno) for r in root_records if r.name.startswith("kazoo")]
    assert levels == [("kazoo.client", logging.DEBUG)] * 3 + [("kazoo.client", logging.ERROR)]
    assert reach.outcome("nohost.invalid", 2181) == "name does not resolve"


# -- the command line's log lines --------------------------------------------------------------
def test_a_log_line_reads_plainly() -> None:
    record = logging.LogRecord(
        "bkeeper.meta.zk", logging.WARNING, __file__, 1, "a %s", ("b",), None
    )
    assert PlainFormatter().format(record) == "warning: a b"
    try:
        raise ValueError("why\nit broke")
    except ValueError:
        record.exc_info = sys.exc_info()
    assert PlainFormatter().format(record) == "warning: a b (ValueError: why it broke)"


# -- codes named -------------------------------------------------------------------------------
def test_every_status_reads_as_its_name_and_meaning() -> None:
    assert (
        status_text(StatusCode.EFENCED) == "EFENCED (the ledger was fenced by a recovering reader)"
    )
    assert status_text(504) == status_text(StatusCode.EFENCED)
    assert status_text(999) == "status 999 (unknown to this client)"
    assert set(STATUS_MEANINGS) == set(StatusCode)
    error = error_for_status(StatusCode.EFENCED, "ledger 3 entry 7 on 10.0.0.1:3181")
    assert isinstance(error, LedgerFencedError)
    assert str(error) == (
        "ledger 3 entry 7 on 10.0.0.1:3181: EFENCED (the ledger was fenced by a recovering reader)"
    )


# -- a fence is told as a fence ---------------------------------------------------------------
async def test_a_fenced_writer_that_cannot_ask_the_metadata_why_says_it_was_fenced() -> None:
    """Before: 'this writer was fenced: another writer took over, or the log was deleted
    (ConnectionLoss (at /bkeeper/logs/dice))', the metadata's failure given as the fence's
    cause (a paused dice leader, its session gone)."""
    async with MemoryCluster(3) as cluster:
        logs = NamedLogs(await cluster.client(FAST))
        writer = await (await logs.create("paused")).open_writer()
        await writer.append(b"x")
        newer = await NamedLogs(await cluster.client(FAST)).log("paused").open_writer()

        async def read(name: str) -> object:
            raise ConnectionLossError("ZooKeeper 127.0.0.1:2181: disconnected (reconnecting)")

        logs.store.read = read  # type: ignore[method-assign]
        with pytest.raises(LogFencedError) as caught:
            await writer.append(b"y")
        message = str(caught.value)
        assert message.startswith("log 'paused': this writer was fenced")
        fence, _, unexplained = message.partition("; the metadata could not say which")
        assert "fenced" in fence.partition("(")[2]  # the cause named is the fence
        assert "disconnected" not in fence
        assert "disconnected (reconnecting)" in unexplained
        await newer.close()


# -- bkeeper dice: values on stdout, nothing noisy anywhere -----------------------------------
class _Dice:
    def __init__(self, uri: str, directory: Path, name: str) -> None:
        self.out, self.err = directory / f"{name}.out", directory / f"{name}.err"
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.proc = subprocess.Popen(
                [
                    sys.executable, "-m", "bkeeper", "dice", "--metadata", uri,
                    "--log", "quiet-dice", "--period", "0.2", "--session-timeout-ms", "2000",
                ],
                stdout=out, stderr=err, stdin=subprocess.DEVNULL,
            )  # fmt: skip

    def lines(self) -> tuple[list[str], list[str]]:
        return self.out.read_text().splitlines(), self.err.read_text().splitlines()

    def leading(self) -> int:
        return sum(line.endswith(", leading") for line in self.lines()[0])

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _wait(condition: object, what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.1)


def test_dice_prints_values_on_stdout_and_nothing_noisy(
    real_cluster: RealCluster,  # noqa: F811
    tmp_path: Path,
) -> None:
    """A leader paused past its session is fenced by the next one: before, its terminal got
    ``INFO ... failed add 18: 504`` per bookie and a fence 'caused' by ConnectionLoss."""
    first = _Dice(real_cluster.uri, tmp_path, "first")
    second = None
    try:
        _wait(lambda: first.leading() >= 3, "the first process leading")
        second = _Dice(real_cluster.uri, tmp_path, "second")
        _wait(lambda: len(second.lines()[0]) >= 3, "the second process following")
        os.kill(first.proc.pid, signal.SIGSTOP)
        _wait(lambda: second.leading() >= 3, "the second process leading")
        os.kill(first.proc.pid, signal.SIGCONT)
        _wait(lambda: first.lines()[0][-1:] != [] and "following" in first.lines()[0][-1],
              "the first process following")  # fmt: skip
        time.sleep(1)
    finally:
        first.stop()
        if second is not None:
            second.stop()
    for dice in (first, second):
        assert dice is not None
        out, err = dice.lines()
        assert out and all(line.startswith("Value = ") for line in out), out
        assert all(line.startswith(("warning: ", "error: ")) for line in err), err
        assert not [line for line in err if "INFO" in line or "504" in line or "kazoo" in line]
