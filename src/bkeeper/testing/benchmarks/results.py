"""What every ``bkeeper bench`` workload returns: :class:`BenchResult` (counts, rates and
latency percentiles), which the CLI prints as a table and docs/benchmarks.md records with the
command that produced it; and the open-loop senders' pacing."""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

__all__ = ["PACING_SLEEP_S", "BenchResult", "percentiles"]


#: How long an open-loop sender sleeps between checks for due work. uvloop's timers have
#: millisecond resolution: a shorter sleep returns at once and the sender spins a whole core,
#: which on two cores starves the bookies it measures (p99 at 20,000/s: 17-69 ms with 0.5 ms,
#: 8.6 ms with 1 ms).
PACING_SLEEP_S = 0.001


@dataclass
class BenchResult:
    """One workload's measurement. ``extra``: further figures by column name, already
    formatted (``fsyncs/s``: ``575``); the CLI adds a column for each name."""

    name: str
    operations: int
    seconds: float
    bytes: int = 0
    #: not in the repr: a task's repr (asyncio formats the finished main task) would format
    #: every sample, a fifth of a second of CPU for 200,000 of them
    latencies_s: array[float] = field(default_factory=lambda: array("d"), repr=False)
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.operations / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.bytes / self.seconds / 1e6 if self.seconds > 0 else 0.0

    def latency_ms(self) -> dict[str, float]:
        return {k: v * 1000.0 for k, v in percentiles(self.latencies_s).items()}


def percentiles(samples: array[float]) -> dict[str, float]:
    if not samples:
        return {}
    ordered = sorted(samples)
    n = len(ordered)

    def at(q: float) -> float:
        return ordered[min(n - 1, int(q * n))]

    return {"p50": at(0.50), "p99": at(0.99), "p99.9": at(0.999), "max": ordered[-1]}
