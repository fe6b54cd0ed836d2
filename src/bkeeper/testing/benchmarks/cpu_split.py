"""``bkeeper bench cpu-split``: CPU seconds per process on this machine while a workload runs,
to see which processes the time goes to (for a Spark read: the Python workers, the JVM or the
bookies; docs/benchmarks.md, Spark).

Reads ``/proc`` (Linux only) before and after ``runs`` calls of a workload that returns a row
count; the caller warms the workload up first. The workload is passed in, so this module
needs nothing of Spark (``bkeeper.spark`` sits beside ``testing``, not below it).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from bkeeper.common.errors import BKeeperError

__all__ = [
    "CpuSplit",
    "ProcessCpu",
    "command_label",
    "cpu_by_process",
    "cpu_ticks",
    "measure_cpu_split",
]

#: Characters of a process's command line kept for the table.
COMMAND_CHARS_MAX = 90
#: ``java`` options followed by a value.
_JAVA_OPTIONS_WITH_VALUE = frozenset({"-cp", "-classpath", "--class-path", "-p", "--module-path"})
#: Processes that used less CPU than this during the runs are left out.
CPU_SECONDS_MIN = 0.05


@dataclass(frozen=True)
class ProcessCpu:
    pid: int
    command: str
    cpu_s: float


@dataclass(frozen=True)
class CpuSplit:
    rows: int
    seconds: float
    processes: tuple[ProcessCpu, ...]  # most CPU first

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0


def cpu_by_process() -> dict[int, tuple[int, str]]:
    """pid -> (user + system clock ticks, command line) of every process readable now."""
    if not os.path.isdir("/proc"):
        raise BKeeperError("no /proc here: the CPU split needs Linux")
    found = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        ticks = cpu_ticks(int(pid))
        try:
            with open(f"/proc/{pid}/cmdline") as cmd_file:
                command = command_label(cmd_file.read().split("\0"))
        except OSError:  # the process ended while we looked
            continue
        if ticks is not None:
            found[int(pid)] = (ticks, command)
    return found


def cpu_ticks(pid: int) -> int | None:
    """User + system clock ticks of process ``pid`` (every thread's), from
    ``/proc/<pid>/stat``; None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat_file:
            fields = stat_file.read().rpartition(")")[2].split()
    except OSError:
        return None
    return int(fields[11]) + int(fields[12])  # fields 14 and 15 of the whole line


def command_label(argv: list[str]) -> str:
    """A process's command line in at most :data:`COMMAND_CHARS_MAX` characters; a JVM's
    starts at its main class (ZooKeeper and Spark are both ``java -cp <long path> ...``)."""
    words = [word for word in argv if word]
    if words and os.path.basename(words[0]) == "java":
        index = 1
        while index < len(words) and words[index].startswith("-"):
            index += 2 if words[index] in _JAVA_OPTIONS_WITH_VALUE else 1
        if index < len(words):
            words = ["java", *words[index:]]
    return " ".join(words)[:COMMAND_CHARS_MAX]


def measure_cpu_split(
    workload: Callable[[], int], runs: int, progress: Callable[[int], None] | None = None
) -> CpuSplit:
    """Call ``workload`` ``runs`` times; the rows it returned, the wall time and the CPU each
    process used meanwhile (at least :data:`CPU_SECONDS_MIN`). ``progress`` is told each run
    done."""
    before, started = cpu_by_process(), time.perf_counter()
    rows = 0
    for run in range(runs):
        rows += workload()
        if progress is not None:
            progress(run + 1)
    wall, after = time.perf_counter() - started, cpu_by_process()
    ticks_per_s = os.sysconf("SC_CLK_TCK")
    used = [
        ProcessCpu(pid, command, (ticks - before.get(pid, (0, ""))[0]) / ticks_per_s)
        for pid, (ticks, command) in after.items()
    ]
    kept = sorted((p for p in used if p.cpu_s >= CPU_SECONDS_MIN), key=lambda p: -p.cpu_s)
    return CpuSplit(rows, wall, tuple(kept))
