"""What a verification run is asked to do (:class:`VerifyConfig`) and what it found
(:class:`RunResult`), with the command that repeats it."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

from bkeeper.common.errors import ConfigError
from bkeeper.verify.check import Verdict
from bkeeper.verify.schedule import EXTERNAL_NEMESES, Fault
from bkeeper.verify.workload import WorkloadConfig

__all__ = ["EXTERNAL_WORKLOADS", "RunResult", "VerifyConfig", "WORKLOADS", "repro_command"]

#: The workloads, by name.
WORKLOADS = ("ledger", "log", "kv")


#: The workloads that can run on a cluster given with ``--metadata``.
EXTERNAL_WORKLOADS = ("ledger", "log")


@dataclass(frozen=True)
class VerifyConfig:
    workload: str = "ledger"
    nemeses: tuple[str, ...] = ()
    duration_s: float = 30.0
    bookies: int = 5
    settle_s: float = 120.0
    out_dir: Path = Path("verify-out")
    workload_config: WorkloadConfig = field(default_factory=WorkloadConfig)
    #: A cluster to run on instead of one of verify's own (``--metadata``): no fault of its
    #: processes, only :data:`~bkeeper.verify.schedule.EXTERNAL_NEMESES`.
    metadata: str | None = None

    def __post_init__(self) -> None:
        if self.workload not in WORKLOADS:
            raise ConfigError(f"workload: {self.workload!r} is not one of {', '.join(WORKLOADS)}")
        if self.metadata is not None:
            if self.workload not in EXTERNAL_WORKLOADS:
                raise ConfigError(
                    f"workload: {self.workload!r} starts its store's members on a cluster of "
                    f"verify's own; with --metadata: {', '.join(EXTERNAL_WORKLOADS)}"
                )
            outside = [n for n in self.nemeses if n not in EXTERNAL_NEMESES]
            if outside:
                raise ConfigError(
                    f"nemesis: {', '.join(outside)} need a cluster of verify's own (no --metadata)"
                )
        if not 5 <= self.bookies <= 16:
            raise ConfigError(f"bookies: {self.bookies} is not between 5 and 16")
        if not 1.0 <= self.duration_s <= 86_400.0:
            raise ConfigError(f"duration: {self.duration_s} s is not between 1 and 86400")


@dataclass
class RunResult:
    seed: int
    faults: list[tuple[Fault, str]]
    skipped: dict[str, str]
    verdict: Verdict
    operations: int
    appends_ok: int
    appends_unknown: int
    history_path: Path
    repro: str
    seconds: float

    def summary(self) -> dict[str, object]:
        """The run in one JSON-able line (``summary.jsonl``)."""
        kinds: dict[str, int] = {}
        for fault, _ in self.faults:
            kinds[fault.kind] = kinds.get(fault.kind, 0) + 1
        return {
            "seed": self.seed,
            "faults": kinds,
            "skipped": self.skipped,
            "violations": self.verdict.count,
            "violations_shown": self.verdict.violations,
            "operations": self.operations,
            "appends_ok": self.appends_ok,
            "appends_unknown": self.appends_unknown,
            "ledgers": self.verdict.ledgers,
            "reads": self.verdict.reads,
            "seconds": round(self.seconds, 1),
            "repro": self.repro,
        }


def repro_command(config: VerifyConfig, seed: int) -> str:
    return shlex.join(
        [
            "bkeeper",
            "verify",
            "--workload",
            config.workload,
            "--nemesis",
            ",".join(config.nemeses) or "none",
            "--duration",
            f"{config.duration_s:g}",
            "--seed",
            str(seed),
            *(
                ("--metadata", config.metadata)
                if config.metadata
                else ("--bookies", str(config.bookies))
            ),
        ]
    )
