"""What the sandbox does when one of its child processes exits: a pure state machine (no
processes, no clock reads; the caller passes the time) and the console lines it prints.

One :class:`Supervision` follows every child (ZooKeeper, each bookie, each auto-recovery
process, the dashboard). Its rules, one row per state and event::

    state      event           next       what the caller does
    ---------  --------------  ---------  ---------------------------------------------------
    running    exited          starting   report the exit; start the child again (RESTART)
    running    exited          down       report the exit; leave it down (RESTARTS_OFF, or
                                          LIMIT: ``restarts_max`` restarts already in the
                                          last ``window_s``)
    starting   ready           running    report it is back
    starting   exited          as "running, exited" (a failed start counts as a restart)
    starting   not ready       running    report it is not ready yet; keep watching it
    down       (any)           down       nothing: it stays down until the sandbox stops
    (any)      stopping        stopping   nothing more: the sandbox stops its children itself,
                                          and an exit then is no failure (IGNORED)

A restart is counted when it is decided; each child keeps the times of at most
``restarts_max`` of them (the named bound of its history).
"""

from __future__ import annotations

import signal
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from bkeeper.common.errors import ConfigError

__all__ = [
    "LOG_TAIL_BYTES_MAX",
    "NO_PROCESS",
    "Child",
    "ChildKind",
    "ChildState",
    "RestartPolicy",
    "Supervision",
    "Verdict",
    "describe_exit",
    "exit_report",
    "last_lines",
    "verdict_line",
]

#: The most of a child's log read to show its last lines.
LOG_TAIL_BYTES_MAX = 64 * 1024
#: The status of a child that has no process at all (never started, or its start failed):
#: no ``Popen.returncode`` (0..255, or minus a signal) is this.
NO_PROCESS = 256


class ChildKind(Enum):
    ZOOKEEPER = "ZooKeeper"
    BOOKIE = "bookie"
    AUTORECOVERY = "auto-recovery"
    DASHBOARD = "dashboard"


@dataclass(frozen=True)
class Child:
    """One child process of the sandbox: ``bookie 2``, ``ZooKeeper``, ..."""

    kind: ChildKind
    #: Which bookie (for a bookie and the auto-recovery process beside it); 0 otherwise.
    index: int = 0

    def __str__(self) -> str:
        if self.kind in (ChildKind.BOOKIE, ChildKind.AUTORECOVERY):
            return f"{self.kind.value} {self.index}"
        return str(self.kind.value)


class ChildState(Enum):
    RUNNING = "running"
    STARTING = "starting"
    DOWN = "down"
    STOPPING = "stopping"


class Verdict(Enum):
    """What to do about a child that exited."""

    RESTART = "restart"
    RESTARTS_OFF = "restarts off"
    LIMIT = "restart limit reached"
    IGNORED = "the sandbox is stopping"


@dataclass(frozen=True)
class RestartPolicy:
    """``restart``: start a child that exited again, at most ``restarts_max`` times in any
    ``window_s`` seconds; past that it stays down."""

    restart: bool = True
    restarts_max: int = 3
    window_s: float = 60.0

    def __post_init__(self) -> None:
        if self.restarts_max < 1:
            raise ConfigError(f"restarts_max: {self.restarts_max} is not a positive integer")
        if not self.window_s > 0:
            raise ConfigError(f"window_s: {self.window_s} is not a positive number of seconds")


class Supervision:
    """The state of every child and the decisions of the table above."""

    def __init__(self, policy: RestartPolicy, children: Iterable[Child]) -> None:
        self.policy = policy
        self._states = {child: ChildState.RUNNING for child in children}
        self._restarts = {child: deque[float](maxlen=policy.restarts_max) for child in self._states}

    def state(self, child: Child) -> ChildState:
        return self._states[child]

    def restarts_in_window(self, child: Child, now_s: float) -> int:
        """How many restarts of ``child`` were decided in the last ``window_s`` before
        ``now_s``."""
        return sum(now_s - at < self.policy.window_s for at in self._restarts[child])

    def on_exit(self, child: Child, now_s: float) -> Verdict:
        """``child`` exited (or could not be started again) at ``now_s``."""
        state = self._states[child]
        if state is ChildState.STOPPING:
            return Verdict.IGNORED
        if state is ChildState.DOWN:
            return Verdict.LIMIT if self.policy.restart else Verdict.RESTARTS_OFF
        if not self.policy.restart:
            self._states[child] = ChildState.DOWN
            return Verdict.RESTARTS_OFF
        if self.restarts_in_window(child, now_s) >= self.policy.restarts_max:
            self._states[child] = ChildState.DOWN
            return Verdict.LIMIT
        self._restarts[child].append(now_s)
        self._states[child] = ChildState.STARTING
        return Verdict.RESTART

    def on_ready(self, child: Child) -> None:
        """``child``, started again, is ready (or was given up waiting for: still running)."""
        if self._states[child] is ChildState.STARTING:
            self._states[child] = ChildState.RUNNING

    def on_stopping(self) -> None:
        """The sandbox stops: no exit from now on is a failure."""
        for child in self._states:
            self._states[child] = ChildState.STOPPING


def describe_exit(returncode: int) -> str:
    """How a process ended, from its ``Popen.returncode``: ``killed by SIGKILL``,
    ``exited with code 1``; ``has no process`` for :data:`NO_PROCESS`."""
    if returncode == NO_PROCESS:
        return "has no process"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"killed by {name}"
    return f"exited with code {returncode}"


def last_lines(output: bytes, count: int) -> list[str]:
    """The last ``count`` non-blank lines of ``output`` (the end of a log; a first line cut
    by the caller's read is dropped when the output is as long as the read's bound)."""
    lines = output.decode(errors="replace").splitlines()
    if len(output) >= LOG_TAIL_BYTES_MAX and lines:
        lines = lines[1:]
    return [line.rstrip() for line in lines if line.strip()][-count:]


def exit_report(child: Child, how: str, log_path: Path, lines: list[str] | None) -> list[str]:
    """The console lines for a child that exited: which, how, its log and its last lines
    (None: the log file is gone)."""
    head = f"{child} {how}; its log {log_path}"
    if lines is None:
        return [f"{head} is missing"]
    if not lines:
        return [f"{head} is empty"]
    return [f"{head} ends:", *(f"  | {line}" for line in lines)]


def verdict_line(child: Child, verdict: Verdict, policy: RestartPolicy, restarts: int) -> str:
    """The console line for what is done about ``child`` (``restarts``: the restarts decided
    in the window, this one included)."""
    limit = f"at most {policy.restarts_max} per {policy.window_s:g} s"
    if verdict is Verdict.RESTART:
        return f"{child}: starting it again (restart {restarts}, {limit})"
    if verdict is Verdict.RESTARTS_OFF:
        return f"{child}: left down (--no-restart)"
    if verdict is Verdict.LIMIT:
        return f"{child}: left down: restarted {restarts} times in {policy.window_s:g} s ({limit})"
    return f"{child}: stopped with the sandbox"
