"""``bkeeper bench recovery``: how fast auto-recovery rebuilds a killed bookie's replicas.

Against a sandbox whose bookies run auto-recovery: write ``ledgers`` closed ledgers of
``ledger_bytes`` each (E3/Qw3/Qa2 by default), every entry's bytes a function of (ledger,
entry) (:func:`entry_payload`), so a later read is checked without keeping what was written.
Then kill -9 one bookie (not the auditor, unless asked), wait until its registration is gone
(the ZooKeeper session timeout) and the lost bookie recovery delay has passed, and time the
repair: until no ledger's metadata names the dead bookie and the under-replicated queue is
empty. Meanwhile an open-loop writer appends at ``write_rate`` (its latency: the repair's cost
to other clients); a writer before the kill gives the same figures without repair. With
``second_kill`` another bookie is killed and every entry of every ledger is read back and
compared, byte for byte.
"""

from __future__ import annotations

import asyncio
import functools
import random
import struct
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bkeeper.common.errors import BKeeperError, ConfigError
from bkeeper.common.validate import check_non_negative_ints, check_positive_ints
from bkeeper.testing.benchmarks.results import BenchResult
from bkeeper.testing.benchmarks.writer_process import WriterProcess, WriterSpec

if TYPE_CHECKING:  # the client loads when a benchmark runs, not when the CLI starts
    from bkeeper.client import BookKeeper

__all__ = [
    "RecoveryBenchOutcome",
    "RecoveryBenchPlan",
    "RecoveryCluster",
    "bench_recovery",
    "entry_payload",
]

PASSWORD = b"bench-recovery"
#: Bytes of the (ledger, entry) header at the start of every payload.
HEADER_BYTES = 16
#: Payloads are windows of a fixed random block; this many distinct window starts.
_SPREAD = 4096

#: How often the registry is looked at while waiting for a killed bookie to leave it.
GONE_POLL_S = 0.05

Progress = Callable[[str, int, int], None]


@functools.lru_cache(maxsize=4)
def _block(size: int) -> bytes:
    return random.Random(0x14).randbytes(size + _SPREAD)


def entry_payload(ledger_id: int, entry_id: int, size: int) -> bytes:
    """The ``size`` bytes of entry ``entry_id`` of ledger ``ledger_id``: the two ids, then a
    window of a seeded random block that depends on both (no two neighbours alike)."""
    header = struct.pack(">QQ", ledger_id, entry_id)
    if size <= HEADER_BYTES:
        return header[:size]
    start = (ledger_id * 7919 + entry_id * 104_729) % _SPREAD
    return header + _block(size)[start : start + size - HEADER_BYTES]


@dataclass(frozen=True)
class RecoveryBenchPlan:
    ledgers: int = 1000
    ledger_bytes: int = 1024 * 1024
    entry_bytes: int = 64 * 1024
    ensemble: int = 3
    write_quorum: int = 3
    ack_quorum: int = 2
    #: The lost bookie recovery delay set in the cluster before the kill.
    delay_s: int = 0
    #: Open-loop appends per second during the repair (and before the kill); 0: none.
    write_rate: float = 5000.0
    write_entry_bytes: int = 1024
    baseline_s: float = 5.0
    kill_auditor: bool = False
    second_kill: bool = False
    fill_ledgers_in_parallel: int = 16
    read_ledgers_in_parallel: int = 8
    metadata_reads_in_flight: int = 32
    poll_interval_s: float = 0.5
    #: Gone after the kill, repaired after the delay: each within this, else an error.
    timeout_s: float = 600.0

    def __post_init__(self) -> None:
        check_positive_ints(
            self,
            "ledgers",
            "ledger_bytes",
            "entry_bytes",
            "ensemble",
            "write_quorum",
            "ack_quorum",
            "write_entry_bytes",
            "fill_ledgers_in_parallel",
            "read_ledgers_in_parallel",
            "metadata_reads_in_flight",
        )
        check_non_negative_ints(self, "delay_s")
        if self.entry_bytes > self.ledger_bytes:
            raise ConfigError(
                f"entry_bytes: {self.entry_bytes} is more than ledger_bytes {self.ledger_bytes}"
            )
        if not self.ensemble >= self.write_quorum >= self.ack_quorum:
            raise ConfigError("ensemble, write_quorum, ack_quorum: need E >= Qw >= Qa")
        for name in ("write_rate", "baseline_s", "poll_interval_s", "timeout_s"):
            value = getattr(self, name)
            if value < 0 or (value == 0 and name in ("poll_interval_s", "timeout_s")):
                raise ConfigError(f"{name}: must be > 0, got {value!r}")

    @property
    def entries_per_ledger(self) -> int:
        return self.ledger_bytes // self.entry_bytes


@dataclass(frozen=True)
class RecoveryCluster:
    """The cluster under test: its URI, its bookie ids, and how to kill bookie ``i``."""

    metadata_uri: str
    bookie_ids: tuple[str, ...]
    kill: Callable[[int], None]


@dataclass
class RecoveryBenchOutcome:
    fill: BenchResult | None = None
    victim: str = ""
    auditor: str | None = None
    affected_ledgers: int = 0
    affected_bytes: int = 0
    gone_after_s: float = 0.0  # kill -> registration gone
    repair_s: float | None = None  # delay expired -> fully replicated (None: not in time)
    left_unrepaired: int = 0  # ledgers still naming the dead bookie when time ran out
    left_queued: int = 0  # ledgers still in the under-replicated queue then
    baseline: BenchResult | None = None
    during: BenchResult | None = None
    second_victim: str | None = None
    verify: BenchResult | None = None
    identical_entries: int = 0
    mismatches: list[str] = field(default_factory=list)

    @property
    def ledgers_per_min(self) -> float:
        return self.affected_ledgers / self.repair_s * 60 if self.repair_s else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.affected_bytes / self.repair_s / 1e6 if self.repair_s else 0.0


async def bench_recovery(
    cluster: RecoveryCluster, plan: RecoveryBenchPlan, on_progress: Progress | None = None
) -> RecoveryBenchOutcome:
    """Run the benchmark; ``on_progress(phase, done, total)`` reports long phases."""
    from bkeeper.client import BookKeeper, ClientConfig

    report = on_progress or (lambda phase, done, total: None)
    outcome = RecoveryBenchOutcome()
    config = ClientConfig(pending_adds_max=max(plan.entries_per_ledger, 1))
    async with BookKeeper(cluster.metadata_uri, config) as bk:
        urm = bk.cluster.underreplication
        await urm.ensure_layout()
        await urm.set_lost_bookie_recovery_delay_s(plan.delay_s)
        ledger_ids, outcome.fill = await _fill(bk, plan, report)
        outcome.auditor = await urm.current_auditor()
        victim = _pick(cluster.bookie_ids, outcome.auditor, plan.kill_auditor, ())
        outcome.victim = cluster.bookie_ids[victim]
        affected = await _naming(bk, ledger_ids, outcome.victim, plan)
        outcome.affected_ledgers = len(affected)
        outcome.affected_bytes = len(affected) * plan.entries_per_ledger * plan.entry_bytes
        if plan.write_rate > 0 and plan.baseline_s > 0:
            baseline = await _start_writer(cluster.metadata_uri, plan, plan.baseline_s)
            baseline.go()
            try:
                outcome.baseline = await baseline.result()
            finally:
                baseline.close()
            outcome.baseline.name = "writes before the kill"
        writer = (  # up before the kill, writing once the repair may start
            await _start_writer(cluster.metadata_uri, plan, plan.timeout_s)
            if plan.write_rate > 0
            else None
        )
        try:
            killed_at = time.perf_counter()
            cluster.kill(victim)
            await _wait_gone(bk, outcome.victim, plan.timeout_s)
            outcome.gone_after_s = time.perf_counter() - killed_at
            await asyncio.sleep(plan.delay_s)  # the delay the auditor waits too
            if writer is not None:
                writer.go()
            repair_start = time.perf_counter()
            left, queued = await _wait_repaired(bk, affected, outcome.victim, plan, report)
            if not left and not queued:
                outcome.repair_s = time.perf_counter() - repair_start
            outcome.left_unrepaired, outcome.left_queued = len(left), queued
        finally:
            if writer is not None:
                try:
                    outcome.during = await writer.stop()
                finally:
                    writer.close()
                outcome.during.name = "writes during the repair"
        if plan.second_kill and outcome.repair_s is not None:
            second = _pick(cluster.bookie_ids, outcome.auditor, False, (victim,))
            outcome.second_victim = cluster.bookie_ids[second]
            cluster.kill(second)
            outcome.verify, outcome.identical_entries, outcome.mismatches = await _verify(
                bk, ledger_ids, plan, report
            )
    return outcome


def _pick(
    bookies: tuple[str, ...], auditor: str | None, kill_auditor: bool, dead: Iterable[int]
) -> int:
    """The index of the bookie to kill: the auditor's if asked (and known), else the last
    live one that is not the auditor."""
    if kill_auditor and auditor in bookies:
        return bookies.index(auditor)
    dead = set(dead)
    for index in reversed(range(len(bookies))):
        if index not in dead and bookies[index] != auditor:
            return index
    raise BKeeperError("no bookie left to kill that is not the auditor")


async def _bounded(jobs: Iterable[Callable[[], Awaitable[None]]], limit: int) -> None:
    """Run the jobs, at most ``limit`` at once; the first failure cancels the rest."""
    pending = iter(jobs)

    async def lane() -> None:
        for job in pending:  # a shared iterator: each job runs once
            await job()

    async with asyncio.TaskGroup() as group:
        for _ in range(limit):
            group.create_task(lane())


async def _fill(
    bk: BookKeeper, plan: RecoveryBenchPlan, report: Progress
) -> tuple[list[int], BenchResult]:
    ledger_ids: list[int] = []
    latencies: list[float] = []
    perf = time.perf_counter
    started = perf()

    async def one() -> None:
        wh = await bk.create_ledger(
            plan.ensemble, plan.write_quorum, plan.ack_quorum, password=PASSWORD
        )
        sent = perf()
        futures = [
            await wh.append_async(entry_payload(wh.ledger_id, entry_id, plan.entry_bytes))
            for entry_id in range(plan.entries_per_ledger)
        ]
        await asyncio.gather(*futures)
        await wh.close()
        latencies.append(perf() - sent)
        ledger_ids.append(wh.ledger_id)
        report("write ledgers", len(ledger_ids), plan.ledgers)

    await _bounded((one for _ in range(plan.ledgers)), plan.fill_ledgers_in_parallel)
    result = BenchResult(
        f"fill: {plan.ledgers:,} ledgers of {plan.entries_per_ledger} x {plan.entry_bytes:,} B, "
        f"E{plan.ensemble}/Qw{plan.write_quorum}/Qa{plan.ack_quorum}",
        plan.ledgers,
        perf() - started,
        plan.ledgers * plan.entries_per_ledger * plan.entry_bytes,
    )
    result.latencies_s.extend(latencies)
    return sorted(ledger_ids), result


async def _naming(
    bk: BookKeeper, ledger_ids: Iterable[int], bookie: str, plan: RecoveryBenchPlan
) -> set[int]:
    """The ledgers among ``ledger_ids`` whose metadata names ``bookie`` in any segment."""
    found: set[int] = set()

    def check(ledger_id: int) -> Callable[[], Awaitable[None]]:
        async def job() -> None:
            meta = await bk.ledger_metadata(ledger_id)
            if any(bookie in ensemble for ensemble in meta.segments.values()):
                found.add(ledger_id)

        return job

    await _bounded((check(i) for i in ledger_ids), plan.metadata_reads_in_flight)
    return found


async def _wait_gone(bk: BookKeeper, bookie: str, timeout_s: float) -> None:
    """Until ``bookie`` is no longer registered (its session expired), checked every
    :data:`GONE_POLL_S`."""
    deadline = time.perf_counter() + timeout_s
    while time.perf_counter() < deadline:
        bookies = await bk.cluster.registry.bookies()
        if bookie not in bookies.writable | bookies.read_only:
            return
        await asyncio.sleep(GONE_POLL_S)
    raise BKeeperError(f"killed bookie {bookie} was still registered after {timeout_s:.0f} s")


async def _wait_repaired(
    bk: BookKeeper, affected: set[int], victim: str, plan: RecoveryBenchPlan, report: Progress
) -> tuple[set[int], int]:
    """Poll until none of ``affected`` names ``victim`` and the under-replicated queue is
    empty, or ``timeout_s`` runs out: the ledgers still naming it and the queue's length
    (both empty: repaired). While ledgers are queued only the queue is listed (no reads):
    reading hundreds of ledgers' metadata every poll took CPU from the repair it measures."""
    urm = bk.cluster.underreplication
    left = set(affected)
    deadline = time.perf_counter() + plan.timeout_s
    while True:
        queued = len([ledger_id async for ledger_id in urm.ledger_ids()])
        timed_out = time.perf_counter() >= deadline
        if not queued or timed_out:  # marked and repaired, or not marked yet: look
            left = await _naming(bk, left, victim, plan)
            report("repair", len(affected) - len(left), len(affected))
            if (not left and not queued) or timed_out:
                return left, queued
        else:
            report("repair", max(0, len(affected) - queued), len(affected))
        await asyncio.sleep(plan.poll_interval_s)


async def _start_writer(
    metadata_uri: str, plan: RecoveryBenchPlan, seconds: float
) -> WriterProcess:
    """The open-loop writer, in a process of its own (as an application's), started: in
    this process its latency would also count the benchmark's metadata polling."""
    writer = WriterProcess(
        WriterSpec(
            metadata_uri,
            ensemble=plan.ensemble,
            write_quorum=plan.write_quorum,
            ack_quorum=plan.ack_quorum,
            entry_bytes=plan.write_entry_bytes,
            rate=plan.write_rate,
            duration_s=seconds,
        )
    )
    await writer.start()
    return writer


async def _verify(
    bk: BookKeeper, ledger_ids: list[int], plan: RecoveryBenchPlan, report: Progress
) -> tuple[BenchResult, int, list[str]]:
    """Read every entry of every ledger: the result, how many entries were identical to
    :func:`entry_payload`, and what was not."""
    mismatches: list[str] = []
    done = entries = identical = 0
    started = time.perf_counter()

    def check(ledger_id: int) -> Callable[[], Awaitable[None]]:
        async def job() -> None:
            nonlocal done, entries, identical
            expected = 0
            try:
                rh = await bk.open_ledger(ledger_id, PASSWORD, recovery=False)
                async for entry in rh.read():
                    if entry.entry_id != expected or entry.payload != entry_payload(
                        ledger_id, entry.entry_id, plan.entry_bytes
                    ):
                        mismatches.append(f"ledger {ledger_id} entry {entry.entry_id}: differs")
                    else:
                        identical += 1
                    expected = entry.entry_id + 1
            except BKeeperError as exc:  # recorded: the run fails, naming the ledger
                mismatches.append(f"ledger {ledger_id}: unreadable from entry {expected}: {exc}")
                return
            if expected != plan.entries_per_ledger:
                mismatches.append(
                    f"ledger {ledger_id}: {expected} entries, not {plan.entries_per_ledger}"
                )
            entries += expected
            done += 1
            report("read and compare", done, len(ledger_ids))

        return job

    await _bounded((check(i) for i in ledger_ids), plan.read_ledgers_in_parallel)
    return (
        BenchResult(
            f"read back {len(ledger_ids):,} ledgers after the second kill, compared",
            entries,
            time.perf_counter() - started,
            entries * plan.entry_bytes,
        ),
        identical,
        mismatches,
    )
