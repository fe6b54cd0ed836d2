"""The process side of the sandbox's supervision: look at every child, and do what
:class:`~bkeeper.testing.supervision.Supervision` decides (report, start again, leave down).

:meth:`SandboxSupervisor.poll` is called from the thread that started the sandbox (its
children get their parent-death signal from that thread), every ``POLL_S`` by
``bkeeper sandbox``; it never blocks except to start ZooKeeper again (up to ZooKeeper's start
timeout). Every line meant for the user goes to ``say``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from bkeeper.common.clock import Clock
from bkeeper.common.errors import BKeeperError
from bkeeper.testing.supervision import (
    LOG_TAIL_BYTES_MAX,
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

__all__ = ["SandboxSupervisor", "SupervisedSandbox"]

#: Lines of its log shown for a child that exited.
TAIL_LINES = 5


class SupervisedSandbox(Protocol):
    """What the supervisor needs of a :class:`~bkeeper.testing.sandbox.Sandbox` (whose
    methods document them)."""

    def children(self) -> list[Child]: ...
    def child_log(self, child: Child) -> Path: ...
    def child_exit_status(self, child: Child) -> int | None: ...
    def respawn_child(self, child: Child) -> None: ...
    def child_ready(self, child: Child) -> bool: ...
    def bookie_address(self, index: int) -> tuple[str, int]: ...


class SandboxSupervisor:
    """Watches the children of a started sandbox. ``start_timeout_s``: how long a child
    started again may take to say it is ready before that is reported."""

    #: How often ``bkeeper sandbox`` calls :meth:`poll`.
    POLL_S = 0.2

    def __init__(
        self,
        box: SupervisedSandbox,
        policy: RestartPolicy,
        say: Callable[[str], None],
        clock: Clock,
        start_timeout_s: float,
    ) -> None:
        self._box = box
        self._start_timeout_s = start_timeout_s
        self._say = say
        self._clock = clock
        self.machine = Supervision(policy, box.children())
        #: When each child being started again was started (for its ready timeout).
        self._started_s: dict[Child, float] = {}

    def poll(self) -> None:
        """One look at every child: report and handle each exit, report each restarted child
        that is ready (or, after the sandbox's start timeout, not yet)."""
        for child in self._box.children():
            state = self.machine.state(child)
            if state not in (ChildState.RUNNING, ChildState.STARTING):
                continue
            status = self._box.child_exit_status(child)
            if status is not None:
                self._exited(child, describe_exit(status))
            elif state is ChildState.STARTING:
                self._check_ready(child)

    def stopping(self) -> None:
        """The sandbox stops its children now: their exits are no failures."""
        self.machine.on_stopping()

    def _exited(self, child: Child, how: str) -> None:
        log_path = self._box.child_log(child)
        for line in exit_report(child, how, log_path, _tail(log_path)):
            self._say(line)
        while True:  # bounded: each pass decides one more restart, up to restarts_max
            now = self._clock.monotonic()
            verdict = self.machine.on_exit(child, now)
            restarts = self.machine.restarts_in_window(child, now)
            self._say(verdict_line(child, verdict, self.machine.policy, restarts))
            if verdict is not Verdict.RESTART:
                return
            try:
                self._box.respawn_child(child)
            except (BKeeperError, OSError) as exc:
                self._say(f"{child}: could not be started again: {exc}")
                continue
            self._started_s[child] = self._clock.monotonic()
            return

    def _check_ready(self, child: Child) -> None:
        if self._box.child_ready(child):
            self.machine.on_ready(child)
            self._say(f"{child}: running again{self._where(child)}")
            return
        waited = self._clock.monotonic() - self._started_s.get(child, 0.0)
        if waited > self._start_timeout_s:
            self.machine.on_ready(child)  # still running: watched for its exit as before
            self._say(
                f"{child}: started again but not ready after {waited:.0f} s; "
                f"see {self._box.child_log(child)}"
            )

    def _where(self, child: Child) -> str:
        if child.kind is ChildKind.BOOKIE:
            host, port = self._box.bookie_address(child.index)
            return f" (ready on {host}:{port})"
        return ""


def _tail(log_path: Path) -> list[str] | None:
    """The last lines of a log, read from its last ``LOG_TAIL_BYTES_MAX`` bytes; None if
    there is no such file (removed under the sandbox)."""
    if not log_path.exists():
        return None
    with log_path.open("rb") as file:
        size = file.seek(0, 2)
        file.seek(max(0, size - LOG_TAIL_BYTES_MAX))
        return last_lines(file.read(), TAIL_LINES)
