"""What a verification run writes under ``out_dir/seed-<seed>/``: its schedule, its log, its
history, the command that repeats it, its verdict, the cluster's logs when it found a
violation, and its line in ``out_dir/summary.jsonl``."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path

from bkeeper.verify.check import Verdict
from bkeeper.verify.history import History
from bkeeper.verify.run_config import RunResult, VerifyConfig, repro_command
from bkeeper.verify.schedule import Fault, make_schedule
from bkeeper.verify.workload import WorkloadConfig

__all__ = [
    "KEPT_LOG_BYTES_MAX",
    "SUMMARY_NAME",
    "finish_run",
    "keep_logs",
    "logs_to",
    "plan_run",
    "summarize",
    "unknown_writes",
]

#: The file in the output directory that gets one JSON line per finished run.
SUMMARY_NAME = "summary.jsonl"


#: Bytes of each process's log kept from a run that found a violation (the end of it).
KEPT_LOG_BYTES_MAX = 20 * 1024 * 1024


def plan_run(
    config: VerifyConfig, seed: int, out: Path, nemeses: list[str], skipped: dict[str, str]
) -> tuple[WorkloadConfig, tuple[Fault, ...]]:
    """The workload's configuration (its client process logging to ``out``, for
    ``client-kill``; a workload without one skips that nemesis, noted in ``skipped``) and
    the run's schedule, written to ``schedule.txt``."""
    workload_config = config.workload_config
    if "client-kill" in nemeses:
        if config.workload == "ledger":
            workload_config = dataclasses.replace(
                workload_config, client_process_log=str(out / "client-process.log")
            )
        else:
            skipped["client-kill"] = f"the {config.workload} workload has no client process"
            nemeses.remove("client-kill")
    schedule = make_schedule(seed, nemeses, config.duration_s, config.bookies)
    (out / "schedule.txt").write_text("".join(f.describe() + "\n" for f in schedule))
    return workload_config, schedule


def finish_run(
    config: VerifyConfig,
    seed: int,
    out: Path,
    history: History,
    faults: list[tuple[Fault, str]],
    verdict: Verdict,
    skipped: dict[str, str],
    started: float,
) -> RunResult:
    """Write the run's history, repro, verdict and summary line; its result."""
    history_path = out / "history.jsonl"
    history.write(history_path)
    repro = repro_command(config, seed)
    (out / "repro.txt").write_text(repro + "\n")
    (out / "verdict.txt").write_text(
        "".join(f"{f.describe()}: {what}\n" for f, what in faults)
        + f"acknowledged {verdict.acknowledged}, reads {verdict.reads}, "
        f"ledgers {verdict.ledgers}, violations {verdict.count}\n"
        + "".join(line + "\n" for line in verdict.violations)
    )
    result = RunResult(
        seed,
        faults,
        skipped,
        verdict,
        len(history),
        verdict.acknowledged if config.workload == "kv" else history.count("append", "ok"),
        unknown_writes(history) if config.workload == "kv" else history.count("append", "info"),
        history_path,
        repro,
        time.monotonic() - started,
    )
    (out / "result.json").write_text(summarize(config, result.summary()))
    return result


def summarize(config: VerifyConfig, fields: dict[str, object]) -> str:
    """Append one run's line to ``summary.jsonl`` (a long campaign stopped midway keeps
    every verdict); returns the line."""
    line = json.dumps(fields, separators=(",", ":")) + "\n"
    with (config.out_dir / SUMMARY_NAME).open("a", encoding="utf-8") as summary:
        summary.write(line)
    return line


def keep_logs(data_dir: Path, into: Path, bytes_max: int = KEPT_LOG_BYTES_MAX) -> None:
    """Copy the cluster's logs (bookies, auto-recovery, ZooKeeper) out of its temporary
    directory, at most ``bytes_max`` of each (its end)."""
    into.mkdir(parents=True, exist_ok=True)
    for path in [*data_dir.glob("*.log"), *data_dir.glob("zookeeper/*.log")]:
        with path.open("rb") as f:
            f.seek(max(0, path.stat().st_size - bytes_max))
            (into / path.name).write_bytes(f.read())


@contextlib.contextmanager
def logs_to(path: Path) -> Iterator[None]:
    """During a run, the log goes to ``path`` (faults make clients warn a lot: expected);
    what the console's handlers show is only errors."""
    root = logging.getLogger()
    quieted = [(h, h.level) for h in root.handlers]
    for handler, _level in quieted:
        handler.setLevel(max(handler.level, logging.ERROR))
    to_file = logging.FileHandler(path, encoding="utf-8")
    to_file.setLevel(logging.INFO)
    to_file.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(to_file)
    try:
        yield
    finally:
        root.removeHandler(to_file)
        to_file.close()
        for handler, level in quieted:
            handler.setLevel(level)


def unknown_writes(history: History) -> int:
    return sum(1 for op in history if op.type == "info" and op.f in ("put", "delete", "cas"))
