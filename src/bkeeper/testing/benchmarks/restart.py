"""``bkeeper bench restart``: how soon a bookie holding a lot of data is ready again after a
SIGTERM, and after a kill -9.

One ``bkeeper bookie`` process on its own data directory is filled with ``data_bytes`` of
raw v2 adds (``entry_bytes`` each; a new ledger every ``fill_step_s``; with a metadata URI
each ledger gets metadata first, so the bookie's garbage collector keeps it). Then, ``runs``
times: SIGTERM it, start it again; and ``runs`` times: add for ``load_s`` (the journal then
holds records past the last checkpoint), kill -9 it, start it again. Each restart is timed:
the stop (signal to exit), the start (process start to its ready line: listening and, with
metadata, registered; :mod:`bkeeper.testing.bookie_process`) and the storage open its log
reports (``storage open in S s: ...``, :mod:`bkeeper.storage.storage`), with what the open
did (clean stop, or records replayed). After a kill -9 with metadata, the start also waits
for ZooKeeper to expire the dead process's session (its registration) before registering.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bkeeper.common.errors import BKeeperError, ConfigError
from bkeeper.common.validate import check_positive_ints
from bkeeper.meta.cluster import ClusterMetadata
from bkeeper.meta.ledger_metadata import LedgerMetadata
from bkeeper.testing.benchmarks.bookie_v2 import bench_bookie_adds_v2
from bkeeper.testing.bookie_process import wait_ready
from bkeeper.wire.digest import DigestType

__all__ = ["RestartBenchPlan", "RestartRun", "bench_restart", "data_bytes_of"]

PASSWORD = b"bench"  # the raw v2 load's (bkeeper.testing.benchmarks.bookie_v2)
#: What the bookie's log says once its storage is open.
_OPEN_LINE = re.compile(rb"storage open in ([0-9.]+) s: ([^;\n]*);")
#: Adds in flight while filling and loading.
IN_FLIGHT = 2000
#: A stopped bookie must exit within this long.
STOP_TIMEOUT_S = 120.0

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class RestartBenchPlan:
    data_bytes: int = 1 << 30
    entry_bytes: int = 1024
    runs: int = 3
    load_s: float = 5.0
    fill_step_s: float = 2.0
    ready_timeout_s: float = 300.0

    def __post_init__(self) -> None:
        check_positive_ints(self, "data_bytes", "entry_bytes", "runs")
        if self.load_s < 0 or self.fill_step_s <= 0 or self.ready_timeout_s <= 0:
            raise ConfigError("load_s >= 0, fill_step_s > 0 and ready_timeout_s > 0 required")


@dataclass(frozen=True)
class RestartRun:
    """One restart: ``signal`` (``SIGTERM`` or ``SIGKILL``), seconds from the signal to the
    exit, from the new process's start to its ready line, the storage open its log reported,
    and what that open did."""

    signal: str
    stop_s: float
    ready_s: float
    storage_open_s: float | None
    open_said: str

    @property
    def total_s(self) -> float:
        return self.stop_s + self.ready_s


@dataclass
class RestartBenchOutcome:
    data_bytes: int = 0
    entries: int = 0
    fill_s: float = 0.0
    runs: list[RestartRun] = field(default_factory=list)


@dataclass
class _Bookie:
    data_dir: Path
    port: int
    log_path: Path
    metadata_uri: str | None
    extra_args: tuple[str, ...]
    process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float) -> tuple[float, int]:
        """Start it; the seconds until its ready line, and the log offset it started at."""
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        command = [sys.executable, "-m", "bkeeper", "bookie", "--data-dir", str(self.data_dir)]
        command += ["--port", str(self.port)]
        if self.metadata_uri:
            command += ["--metadata", self.metadata_uri]
        started = time.monotonic()
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [*command, *self.extra_args], stdout=log, stderr=subprocess.STDOUT
            )
        wait_ready(self.process, self.log_path, offset, timeout_s)
        return time.monotonic() - started, offset

    def stop(self, how: signal.Signals) -> float:
        assert self.process is not None
        started = time.monotonic()
        self.process.send_signal(how)
        try:
            self.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired as exc:
            self.process.kill()
            self.process.wait()
            raise BKeeperError(
                f"bookie did not exit within {STOP_TIMEOUT_S:g} s of {how.name}"
            ) from exc
        return time.monotonic() - started

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def open_line(self, offset: int) -> tuple[float | None, str]:
        with self.log_path.open("rb") as log:
            log.seek(offset)
            found = _OPEN_LINE.search(log.read())
        if found is None:
            return None, "?"
        return float(found.group(1)), found.group(2).decode()


def data_bytes_of(data_dir: Path) -> int:
    """Bytes of the entry logs under ``data_dir``."""
    total = 0
    for directory, _, names in os.walk(data_dir):
        total += sum(
            os.path.getsize(os.path.join(directory, n)) for n in names if n.endswith(".log")
        )
    return total


async def bench_restart(
    data_dir: Path,
    port: int,
    plan: RestartBenchPlan,
    metadata_uri: str | None = None,
    extra_args: tuple[str, ...] = (),
    progress: Progress | None = None,
) -> RestartBenchOutcome:
    """Fill a bookie, then restart it after SIGTERMs and kill -9s (module doc)."""
    bookie = _Bookie(data_dir, port, data_dir.with_suffix(".log"), metadata_uri, extra_args)
    outcome = RestartBenchOutcome()
    # Ledger ids of this run: none of an earlier run's, in a cluster used before.
    first_ledger_id = int(time.time() * 1000) % (1 << 40)
    try:
        await asyncio.to_thread(bookie.start, plan.ready_timeout_s)
        await _fill(bookie, plan, outcome, progress, first_ledger_id)
        for run in range(plan.runs):
            outcome.runs.append(await _restart(bookie, plan, signal.SIGTERM))
            _report(progress, "restarts", run + 1, 2 * plan.runs)
        for run in range(plan.runs):
            await _load(bookie, plan, plan.load_s, first_ledger_id - 1 - run)
            outcome.runs.append(await _restart(bookie, plan, signal.SIGKILL))
            _report(progress, "restarts", plan.runs + run + 1, 2 * plan.runs)
        await asyncio.to_thread(bookie.stop, signal.SIGTERM)
    finally:
        bookie.kill()
    return outcome


async def _fill(
    bookie: _Bookie,
    plan: RestartBenchPlan,
    outcome: RestartBenchOutcome,
    progress: Progress | None,
    ledger_id: int,
) -> None:
    started = time.monotonic()
    while (written := data_bytes_of(bookie.data_dir)) < plan.data_bytes:
        _report(progress, "fill", min(written, plan.data_bytes), plan.data_bytes)
        outcome.entries += await _load(bookie, plan, plan.fill_step_s, ledger_id)
        ledger_id += 1
    _report(progress, "fill", plan.data_bytes, plan.data_bytes)
    outcome.fill_s = time.monotonic() - started
    outcome.data_bytes = data_bytes_of(bookie.data_dir)


async def _load(bookie: _Bookie, plan: RestartBenchPlan, seconds: float, ledger_id: int) -> int:
    """Adds to one new ledger for ``seconds``; how many were acknowledged."""
    if seconds <= 0:
        return 0
    if bookie.metadata_uri:
        await _create_metadata(bookie.metadata_uri, f"127.0.0.1:{bookie.port}", ledger_id)
    result = await bench_bookie_adds_v2(
        "127.0.0.1",
        bookie.port,
        entry_bytes=plan.entry_bytes,
        duration_s=seconds,
        in_flight=IN_FLIGHT,
        ledger_id=ledger_id,
    )
    return result.operations


async def _create_metadata(uri: str, bookie_id: str, ledger_id: int) -> None:
    meta = LedgerMetadata.new([bookie_id], 1, 1, DigestType.CRC32C, PASSWORD, ctime_ms=0)
    async with await ClusterMetadata.open(uri) as cluster:
        await cluster.ledgers.create(meta, ledger_id=ledger_id)


async def _restart(bookie: _Bookie, plan: RestartBenchPlan, how: signal.Signals) -> RestartRun:
    stop_s = await asyncio.to_thread(bookie.stop, how)
    ready_s, offset = await asyncio.to_thread(bookie.start, plan.ready_timeout_s)
    open_s, said = bookie.open_line(offset)
    return RestartRun(how.name, stop_s, ready_s, open_s, said)


def _report(progress: Progress | None, phase: str, done: int, whole: int) -> None:
    if progress is not None:
        progress(phase, done, whole)
