"""The supervisor's process side against a fake sandbox (children are plain records, time a
fake clock): what it prints and what it starts again."""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from pathlib import Path

from bkeeper.common.errors import ConfigError
from bkeeper.testing.clock import FakeClock
from bkeeper.testing.sandbox_supervisor import SandboxSupervisor
from bkeeper.testing.supervision import Child, ChildKind, ChildState, RestartPolicy

ZOOKEEPER = Child(ChildKind.ZOOKEEPER)
BOOKIE_0 = Child(ChildKind.BOOKIE, 0)


@dataclass
class FakeSandbox:
    """Children whose exit status, readiness and start failures the test sets."""

    logs: Path
    status: dict[Child, int | None] = field(default_factory=dict)
    ready: dict[Child, bool] = field(default_factory=dict)
    #: Starts of each child that fail, in a row, before one succeeds.
    failing_starts: dict[Child, int] = field(default_factory=dict)
    starts: list[Child] = field(default_factory=list)

    def children(self) -> list[Child]:
        return [ZOOKEEPER, BOOKIE_0]

    def child_log(self, child: Child) -> Path:
        return self.logs / f"{child}.log"

    def child_exit_status(self, child: Child) -> int | None:
        return self.status.get(child)

    def respawn_child(self, child: Child) -> None:
        self.starts.append(child)
        if self.failing_starts.get(child, 0):
            self.failing_starts[child] -= 1
            raise ConfigError(f"{child} exited at start")
        self.status[child] = None
        self.ready[child] = False

    def child_ready(self, child: Child) -> bool:
        return self.ready.get(child, True)

    def bookie_address(self, index: int) -> tuple[str, int]:
        return "127.0.0.1", 3181 + index


def supervise(
    tmp_path: Path, policy: RestartPolicy | None = None
) -> tuple[FakeSandbox, SandboxSupervisor, list[str], FakeClock]:
    box = FakeSandbox(tmp_path)
    said: list[str] = []
    clock = FakeClock()
    supervisor = SandboxSupervisor(
        box, policy or RestartPolicy(), said.append, clock, start_timeout_s=30.0
    )
    return box, supervisor, said, clock


def test_an_exit_is_reported_started_again_and_reported_back(tmp_path: Path) -> None:
    box, supervisor, said, _clock = supervise(tmp_path)
    (tmp_path / "bookie 0.log").write_text("".join(f"line {i}\n" for i in range(8)))
    supervisor.poll()
    assert said == [] and box.starts == []  # all running: nothing to say
    box.status[BOOKIE_0] = -signal.SIGKILL
    supervisor.poll()
    assert said == [
        f"bookie 0 killed by SIGKILL; its log {tmp_path / 'bookie 0.log'} ends:",
        "  | line 3", "  | line 4", "  | line 5", "  | line 6", "  | line 7",
        "bookie 0: starting it again (restart 1, at most 3 per 60 s)",
    ]  # fmt: skip
    assert box.starts == [BOOKIE_0]
    said.clear()
    supervisor.poll()
    assert said == []  # not ready yet
    box.ready[BOOKIE_0] = True
    supervisor.poll()
    assert said == ["bookie 0: running again (ready on 127.0.0.1:3181)"]
    assert supervisor.machine.state(BOOKIE_0) is ChildState.RUNNING


def test_a_start_that_fails_is_tried_again_within_the_limit(tmp_path: Path) -> None:
    box, supervisor, said, _clock = supervise(tmp_path, RestartPolicy(restarts_max=3))
    box.status[ZOOKEEPER] = 1
    box.failing_starts[ZOOKEEPER] = 5  # it will not start
    supervisor.poll()
    log = tmp_path / "ZooKeeper.log"
    assert said == [
        f"ZooKeeper exited with code 1; its log {log} is missing",
        "ZooKeeper: starting it again (restart 1, at most 3 per 60 s)",
        "ZooKeeper: could not be started again: ZooKeeper exited at start",
        "ZooKeeper: starting it again (restart 2, at most 3 per 60 s)",
        "ZooKeeper: could not be started again: ZooKeeper exited at start",
        "ZooKeeper: starting it again (restart 3, at most 3 per 60 s)",
        "ZooKeeper: could not be started again: ZooKeeper exited at start",
        "ZooKeeper: left down: restarted 3 times in 60 s (at most 3 per 60 s)",
    ]
    assert box.starts == [ZOOKEEPER] * 3
    said.clear()
    supervisor.poll()
    assert said == []  # down: not looked at again


def test_a_child_slow_to_be_ready_is_reported_once_and_watched(tmp_path: Path) -> None:
    box, supervisor, said, clock = supervise(tmp_path)
    box.status[BOOKIE_0] = 0
    supervisor.poll()
    said.clear()
    clock.advance(31.0)
    supervisor.poll()
    assert said == [
        f"bookie 0: started again but not ready after 31 s; see {tmp_path / 'bookie 0.log'}"
    ]
    said.clear()
    supervisor.poll()
    assert said == []
    box.status[BOOKIE_0] = 2  # it exits later: reported, started again (restart 2)
    supervisor.poll()
    assert said[-1] == "bookie 0: starting it again (restart 2, at most 3 per 60 s)"


def test_nothing_is_reported_once_the_sandbox_stops(tmp_path: Path) -> None:
    box, supervisor, said, _clock = supervise(tmp_path)
    supervisor.stopping()
    box.status[BOOKIE_0] = -signal.SIGTERM
    box.status[ZOOKEEPER] = 143
    supervisor.poll()
    assert said == [] and box.starts == []
