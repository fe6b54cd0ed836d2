"""The sandbox's supervision, pure: what it does when a child exits, and what it prints."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from bkeeper.common.errors import ConfigError
from bkeeper.namedlog import LogConfig
from bkeeper.spark.options import sink_options
from bkeeper.testing.sandbox import DEFAULT_BOOKIES, SandboxConfig
from bkeeper.testing.supervision import (
    LOG_TAIL_BYTES_MAX,
    NO_PROCESS,
    Child,
    ChildKind,
    ChildState,
    RestartPolicy,
    Supervision,
    Verdict,
    describe_exit,
    exit_report,
    last_lines,
    verdict_line,
)

ZOOKEEPER = Child(ChildKind.ZOOKEEPER)
BOOKIE_0 = Child(ChildKind.BOOKIE, 0)
BOOKIE_1 = Child(ChildKind.BOOKIE, 1)


def supervision(policy: RestartPolicy | None = None) -> Supervision:
    return Supervision(policy or RestartPolicy(), [ZOOKEEPER, BOOKIE_0, BOOKIE_1])


def test_a_child_that_exits_is_restarted_and_runs_again_once_ready() -> None:
    machine = supervision()
    assert machine.on_exit(BOOKIE_1, now_s=10.0) is Verdict.RESTART
    assert machine.state(BOOKIE_1) is ChildState.STARTING
    assert machine.state(BOOKIE_0) is ChildState.RUNNING  # the others untouched
    machine.on_ready(BOOKIE_1)
    assert machine.state(BOOKIE_1) is ChildState.RUNNING
    assert machine.restarts_in_window(BOOKIE_1, 10.0) == 1


def test_restarts_are_bounded_per_child_and_window() -> None:
    machine = supervision(RestartPolicy(restarts_max=3, window_s=60.0))
    verdicts = [machine.on_exit(BOOKIE_0, now_s=t) for t in (0.0, 1.0, 2.0)]
    assert verdicts == [Verdict.RESTART] * 3
    assert machine.on_exit(BOOKIE_1, now_s=3.0) is Verdict.RESTART  # its own count
    assert machine.on_exit(BOOKIE_0, now_s=59.0) is Verdict.LIMIT  # a 4th within 60 s
    assert machine.state(BOOKIE_0) is ChildState.DOWN
    assert machine.on_exit(BOOKIE_0, now_s=500.0) is Verdict.LIMIT  # down stays down


def test_restarts_older_than_the_window_no_longer_count() -> None:
    machine = supervision(RestartPolicy(restarts_max=2, window_s=60.0))
    assert [machine.on_exit(ZOOKEEPER, now_s=t) for t in (0.0, 30.0)] == [Verdict.RESTART] * 2
    assert machine.restarts_in_window(ZOOKEEPER, 60.5) == 1  # the one at 0 s is out
    assert machine.on_exit(ZOOKEEPER, now_s=60.5) is Verdict.RESTART
    assert machine.on_exit(ZOOKEEPER, now_s=61.0) is Verdict.LIMIT  # 30.0 and 60.5 count


def test_a_failed_start_counts_as_a_restart() -> None:
    machine = supervision(RestartPolicy(restarts_max=2))
    assert machine.on_exit(BOOKIE_0, now_s=0.0) is Verdict.RESTART
    assert machine.on_exit(BOOKIE_0, now_s=0.1) is Verdict.RESTART  # exited while starting
    assert machine.on_exit(BOOKIE_0, now_s=0.2) is Verdict.LIMIT


def test_no_restart_leaves_it_down() -> None:
    machine = supervision(RestartPolicy(restart=False))
    assert machine.on_exit(BOOKIE_0, now_s=0.0) is Verdict.RESTARTS_OFF
    assert machine.state(BOOKIE_0) is ChildState.DOWN
    assert machine.restarts_in_window(BOOKIE_0, 0.0) == 0


def test_exits_while_the_sandbox_stops_are_no_failures() -> None:
    machine = supervision()
    machine.on_exit(BOOKIE_0, now_s=0.0)
    machine.on_stopping()
    assert {machine.on_exit(c, now_s=1.0) for c in (ZOOKEEPER, BOOKIE_0, BOOKIE_1)} == {
        Verdict.IGNORED
    }
    machine.on_ready(BOOKIE_0)  # a late ready line changes nothing
    assert machine.state(BOOKIE_0) is ChildState.STOPPING


def test_the_policy_is_validated() -> None:
    with pytest.raises(ConfigError, match=r"^restarts_max: 0 is not a positive integer$"):
        RestartPolicy(restarts_max=0)
    with pytest.raises(ConfigError, match=r"^window_s: 0.0 is not a positive number"):
        RestartPolicy(window_s=0.0)


def test_how_a_child_ended_is_named() -> None:
    assert describe_exit(-signal.SIGKILL) == "killed by SIGKILL"
    assert describe_exit(-signal.SIGSEGV) == "killed by SIGSEGV"
    assert describe_exit(1) == "exited with code 1"
    assert describe_exit(0) == "exited with code 0"
    assert describe_exit(-200) == "killed by signal 200"
    assert describe_exit(NO_PROCESS) == "has no process"  # ZooKeeper after a failed start


def test_the_report_names_the_child_how_its_log_and_its_last_lines() -> None:
    output = b"".join(b"line %d\n" % i for i in range(10)) + b"\n\n"
    lines = last_lines(output, 5)
    assert lines == ["line 5", "line 6", "line 7", "line 8", "line 9"]
    log = Path("/data/bookie-1.log")
    assert exit_report(BOOKIE_1, "killed by SIGKILL", log, lines) == [
        "bookie 1 killed by SIGKILL; its log /data/bookie-1.log ends:",
        "  | line 5", "  | line 6", "  | line 7", "  | line 8", "  | line 9",
    ]  # fmt: skip
    assert exit_report(ZOOKEEPER, "exited with code 3", log, []) == [
        "ZooKeeper exited with code 3; its log /data/bookie-1.log is empty"
    ]
    assert exit_report(BOOKIE_0, "exited with code 1", log, None) == [
        "bookie 0 exited with code 1; its log /data/bookie-1.log is missing"
    ]


def test_a_line_cut_by_the_bounded_read_is_not_shown() -> None:
    read = b"x" * LOG_TAIL_BYTES_MAX + b"\nlast\n"
    assert last_lines(read, 5) == ["last"]
    assert last_lines(b"only\n", 5) == ["only"]  # a short log is read whole


def test_the_verdict_lines() -> None:
    policy = RestartPolicy(restarts_max=3, window_s=60.0)
    assert verdict_line(BOOKIE_1, Verdict.RESTART, policy, 1) == (
        "bookie 1: starting it again (restart 1, at most 3 per 60 s)"
    )
    assert verdict_line(BOOKIE_1, Verdict.RESTARTS_OFF, policy, 0) == (
        "bookie 1: left down (--no-restart)"
    )
    assert verdict_line(ZOOKEEPER, Verdict.LIMIT, policy, 3) == (
        "ZooKeeper: left down: restarted 3 times in 60 s (at most 3 per 60 s)"
    )
    assert str(Child(ChildKind.AUTORECOVERY, 2)) == "auto-recovery 2"
    assert str(Child(ChildKind.DASHBOARD)) == "dashboard"


def test_the_sandbox_has_a_spare_bookie_beyond_the_default_ensembles() -> None:
    """A cluster heals the loss of a bookie only with E+1 writable bookies: the sandbox's
    default must stay one above every default ensemble (logs, kv and Dice: ``LogConfig``;
    the Spark sink's ``ensembleSize``)."""
    sink = sink_options({"metadata": "zk://127.0.0.1:2181/ledgers", "log": "x"}).log_config
    ensembles = (LogConfig().ensemble_size, sink.ensemble_size)
    assert max(ensembles) + 1 == DEFAULT_BOOKIES
    assert SandboxConfig(Path("/x")).bookies == DEFAULT_BOOKIES


def test_the_sandbox_command_starts_the_default_bookies() -> None:
    from bkeeper.cli.sandbox import sandbox

    bookies = next(p for p in sandbox.params if p.name == "bookies")
    assert bookies.default == DEFAULT_BOOKIES
