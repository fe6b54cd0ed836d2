"""Commands that used to mislead (issue 11, items 9-11), run as a user runs them: each fails
with exactly one ``error:`` line and the right exit status, or does what it says.

The commands run in this process (tests/cli/runner.py) but for the real processes this is
about (bookies starting, and refusing to, SIGTERM) and one sandbox refusing a taken port, so
that start-up and the exit statuses of the real process stay tested. Tests that stop no
bookie share one cluster."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bkeeper.client.placement import replace_bookie
from bkeeper.common.errors import NotEnoughBookiesError
from bkeeper.testing.benchmarks import free_port, free_port_range
from tests.cli.runner import run_cli
from tests.client.conftest import shared_cluster

__all__ = ["shared_cluster"]


def cli(
    *args: str, env: dict[str, str] | None = None, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    """``bkeeper ARGS`` in this process."""
    return run_cli(*args, env=env, stdin=stdin)


def run(
    *args: str, env: dict[str, str] | None = None, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    """``python -m bkeeper ARGS``: a real process."""
    return subprocess.run(
        [sys.executable, "-m", "bkeeper", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **(env or {})},
    )


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), result.stderr
    return lines[0]


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.mark.usefixtures("subprocesses")  # a real process: start-up and exit status
def test_sandbox_on_a_taken_zookeeper_port_names_it(taken_port: int, tmp_path: Path) -> None:
    result = run(
        "sandbox", "--data-dir", str(tmp_path / "sb"), "--zookeeper-port", str(taken_port),
        "--bookie-port", str(free_port_range(3)), "--http-port", str(free_port_range(3)),
        "--dashboard-port", str(free_port()),
    )  # fmt: skip
    assert result.returncode == 1
    assert one_error_line(result).startswith(f"error: port {taken_port} (ZooKeeper) is in use")
    assert "sandbox ready" not in result.stdout + result.stderr
    assert not (tmp_path / "sb").exists()


def test_sandbox_on_a_taken_bookie_port_names_it(taken_port: int, tmp_path: Path) -> None:
    result = cli(
        "sandbox", "--bookies", "1", "--data-dir", str(tmp_path / "sb"),
        "--zookeeper-port", str(free_port()), "--bookie-port", str(taken_port),
        "--http-port", str(free_port()), "--dashboard-port", str(free_port()),
    )  # fmt: skip
    assert result.returncode == 1
    assert one_error_line(result).startswith(f"error: port {taken_port} (bookie 0) is in use")


def test_sandbox_on_a_taken_admin_port_names_it(taken_port: int, tmp_path: Path) -> None:
    result = cli(
        "sandbox", "--bookies", "1", "--data-dir", str(tmp_path / "sb"),
        "--zookeeper-port", str(free_port()), "--bookie-port", str(free_port()),
        "--http-port", str(taken_port), "--dashboard-port", str(free_port()),
    )  # fmt: skip
    assert result.returncode == 1
    assert one_error_line(result) == (
        f"error: port {taken_port} (bookie 0 admin) is in use by another process; choose "
        "free ports with --zookeeper-port, --bookie-port, --http-port and --dashboard-port"
    )
    assert not (tmp_path / "sb").exists()


@pytest.mark.parametrize(
    "command",
    [
        ("log", "list"),
        ("log", "create", "x"),
        ("log", "append", "x", "a"),
        ("shell", "listledgers"),
        ("shell", "listbookies"),
        ("bench", "write", "--duration", "0.2"),
    ],
)
def test_a_root_without_a_cluster_is_one_error_line(zookeeper, command: tuple[str, ...]) -> None:
    uri = zookeeper.uri("/no-cluster-here")
    result = cli(*command, "--metadata", uri)
    assert result.returncode == 1
    assert one_error_line(result).startswith(f"error: no cluster at {uri} ")
    assert f"bkeeper meta format --metadata {uri}" in result.stderr


def test_a_bookie_refuses_a_root_without_a_cluster(zookeeper, tmp_path: Path) -> None:
    uri = zookeeper.uri("/no-cluster-here")
    result = run("bookie", "--data-dir", str(tmp_path / "b"), "--port", "0", "--metadata", uri)
    assert result.returncode == 1
    assert one_error_line(result).startswith(f"error: no cluster at {uri} ")


def test_meta_and_bench_follow_bkeeper_metadata(shared_cluster) -> None:
    env = {"BKEEPER_METADATA": shared_cluster.uri}
    shown = cli("meta", "show", "LAYOUT", env=env)
    assert shown.returncode == 0, shown.stderr
    assert "HierarchicalLedgerManagerFactory" in shown.stdout
    bench = cli("bench", "write", "--duration", "0.3", "--in-flight", "10", env=env)
    assert bench.returncode == 0, bench.stderr
    assert "client writes E3/Qw3/Qa2" in bench.stdout
    listing = cli("shell", "listledgers", env=env)
    assert listing.returncode == 0 and listing.stderr.strip() == "no ledgers", listing


@pytest.mark.parametrize(
    ("command", "what"),
    [(("log", "delete", "some-log"), "log"), (("shell", "deleteledger", "7"), "ledger")],
)
def test_deleting_without_a_terminal_needs_force(shared_cluster, command, what) -> None:
    result = cli(*command, "--metadata", shared_cluster.uri, stdin="y\n")
    assert result.returncode == 2
    line = one_error_line(result)
    assert "standard input is not a terminal; pass --force" in line, what


def test_no_replacement_says_how_many_bookies_there_are() -> None:
    ensemble = ("a:1", "b:1", "c:1")
    with pytest.raises(NotEnoughBookiesError) as caught:
        replace_bookie(ensemble, 1, ["a:1", "b:1", "c:1"], 3, exclude={"a:1", "b:1", "c:1"})
    assert str(caught.value) == (
        "no bookie can replace b:1: 3 bookies registered as writable, 3 of them in the "
        "ensemble already and 3 failed to answer this writer"
    )


def test_a_bookie_on_a_taken_port_names_it(taken_port: int, shared_cluster, tmp_path: Path) -> None:
    result = run(
        "bookie", "--data-dir", str(tmp_path / "b"), "--port", str(taken_port),
        "--metadata", shared_cluster.uri,
    )  # fmt: skip
    assert result.returncode == 1
    assert one_error_line(result) == (
        f"error: cannot listen on 127.0.0.1:{taken_port}: the port is in use by another process"
    )


@pytest.mark.parametrize("real_cluster", [1], indirect=True)
def test_a_bookie_refuses_a_data_dir_of_another_bookie(real_cluster) -> None:
    data_dir = real_cluster.data_dir / "bookie-0"  # bookie 0's, stamped with its port
    real_cluster.stop_all()
    result = run(
        "bookie", "--data-dir", str(data_dir), "--port", str(free_port()),
        "--metadata", real_cluster.uri,
    )  # fmt: skip
    assert result.returncode == 1
    assert "cookie" in one_error_line(result).lower()


@pytest.mark.parametrize(
    ("command", "status", "message"),
    [
        (("log", "tail", "missing"), 1, "error: no log named 'missing'"),
        (
            ("log", "append", "missing", "x"),
            1,
            "error: log 'missing' does not exist (create it with 'bkeeper log create missing', or "
            "pass --create)",
        ),
        (("log", "read", "x", "--from", "nonsense"), 2, "error: Invalid value for --from"),
        (("shell", "readledger", "abc"), 2, "error: Invalid value for 'LEDGER_ID'"),
    ],
)
def test_usage_and_missing_things_are_one_line(shared_cluster, command, status, message) -> None:
    result = cli(*command, "--metadata", shared_cluster.uri)
    assert result.returncode == status, result.stderr
    assert one_error_line(result).startswith(message), result.stderr


# An unreachable metadata service: tests/cli/test_quiet.py's
# test_the_cli_says_which_zookeeper_host_and_why_in_one_line[refused] runs the same command
# and asserts the whole of its one line, its exit status 1 and an empty stdout.


@pytest.mark.parametrize("real_cluster", [1], indirect=True)
def test_sigterm_while_a_bookie_starts_stops_it_cleanly(real_cluster) -> None:
    """A restarted bookie waits for its predecessor's registration to expire; SIGTERM then
    used to kill it (-15, no checkpoint): the signal handlers came after start."""
    real_cluster.signal(0, signal.SIGKILL)
    real_cluster.procs[0].wait()
    command = [
        sys.executable, "-m", "bkeeper", "bookie",
        "--data-dir", str(real_cluster.data_dir / "bookie-0"),
        "--port", str(real_cluster.ports[0]), "--metadata", real_cluster.uri,
    ]  # fmt: skip
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    lines = []
    while "is held by an earlier session" not in (line := proc.stderr.readline()):
        assert line, "".join(lines)
        lines.append(line)
    proc.send_signal(signal.SIGTERM)
    rest = proc.stderr.read()
    assert proc.wait(60) == 0, rest
    assert "stopping: asked to during start" in rest
    assert "Traceback" not in rest


@pytest.fixture
def logging_restored() -> Iterator[None]:
    """``main`` in this process configures logging as a command does (a root handler, kazoo's
    loggers at CRITICAL): put it back, or later tests of this worker lose kazoo's records."""
    import logging

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    levels = {name: logging.getLogger(name).level for name in ("kazoo", "py4j")}
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, before in levels.items():
        logging.getLogger(name).setLevel(before)


def test_an_unexpected_exception_is_one_line_and_verbose_shows_it(
    capsys: pytest.CaptureFixture[str], logging_restored: None
) -> None:
    """A bug still ends in one ``error:`` line (exit 1); ``--verbose`` adds the traceback."""
    import click

    from bkeeper.cli.main import cli, main

    @cli.command("explode-for-test")
    def explode() -> None:
        raise ValueError("an internal inconsistency")

    try:
        for argv, traceback_shown in ((["explode-for-test"], False),
                                      (["-v", "explode-for-test"], True)):  # fmt: skip
            with pytest.raises(SystemExit) as exited:
                main(argv)
            assert exited.value.code == 1
            err = capsys.readouterr().err
            assert err.strip().splitlines()[-1] == (
                "error: unexpected ValueError: an internal inconsistency (--verbose shows where)"
            )
            assert ("Traceback (most recent call last)" in err) is traceback_shown
    finally:
        cli.commands.pop("explode-for-test", None)
        assert isinstance(cli, click.Group)


def test_an_error_without_a_message_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    from bkeeper.cli.main import _fail

    with pytest.raises(SystemExit) as caught:
        _fail(TimeoutError(), False, str(TimeoutError()))
    assert caught.value.code == 1
    assert capsys.readouterr().err == "error: TimeoutError (--verbose shows where)\n"
