"""What a verification run is doing, for a progress display, and what a stopped one cleaned
up, for its last line.

The run (:func:`~bkeeper.verify.run.run_once`) writes a :class:`RunStatus` as it goes; the
command's progress thread only reads it (a phase name, a length: no lock needed in CPython).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from bkeeper.verify.history import History

__all__ = ["Cleanup", "RunStatus"]


@dataclass
class Cleanup:
    """What an interrupted run stopped or removed."""

    processes: int = 0
    namespaces: int = 0
    #: The pids killed (a process killed twice, by the signal handler and again on the way
    #: out before it was reaped, is counted once).
    killed: set[int] = field(default_factory=set)
    mounts: int = 0
    temp_dirs: int = 0

    def describe(self) -> str:
        """``5 processes, 7 namespaces, 5 tmpfs mounts, 1 temporary directory``."""
        parts = [_count(self.processes, "process", "processes")]
        parts.append(_count(self.namespaces, "namespace", "namespaces"))
        if self.mounts:
            parts.append(_count(self.mounts, "tmpfs mount", "tmpfs mounts"))
        if self.temp_dirs:
            parts.append(_count(self.temp_dirs, "temporary directory", "temporary directories"))
        return ", ".join(parts)


@dataclass
class RunStatus:
    """One run's phase (with its planned length, if it has one) and its history so far."""

    phase: str = "preparing"
    phase_started: float = field(default_factory=time.monotonic)
    phase_s: float | None = None
    history: History | None = None
    cleanup: Cleanup = field(default_factory=Cleanup)

    def enter(self, phase: str, planned_s: float | None = None) -> None:
        self.phase, self.phase_s, self.phase_started = phase, planned_s, time.monotonic()

    def operations(self) -> int:
        return 0 if self.history is None else len(self.history)

    def describe(self) -> str:
        """``workload with faults 12 of 30 s, 4,210 ops``."""
        text = self.phase
        if self.phase_s is not None:
            spent = min(time.monotonic() - self.phase_started, self.phase_s)
            text += f" {spent:.0f} of {self.phase_s:g} s"
        ops = self.operations()
        return f"{text}, {ops:,} ops" if ops else text


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"
