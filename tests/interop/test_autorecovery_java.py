"""Java BookKeeper's shell and bkeeper see the same auto-recovery state, in BookKeeper's
ZooKeeper layout: the under-replicated ledgers (``listunderreplicated`` and its filters), the
ledgers being worked on (``queryautorecoverystatus``), who the auditor is (``whoisauditor``),
the lost bookie recovery delay (``lostbookierecoverydelay``, ``triggeraudit``) and the
cluster-wide disable flag (``autorecovery``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from bkeeper.meta.cluster import ClusterMetadata
from bkeeper.meta.underreplication import (
    BlockedReason,
    UnderReplicationManager,
    auditor_election,
)
from tests.e2e.helpers import bkeeper
from tests.interop.javabk import JavaBookKeeper, ShellRun

pytestmark = pytest.mark.interop

A, B, C = "127.0.0.1:3181", "127.0.0.1:3182", "127.0.0.1:3183"
WORKER = "127.0.0.1:3190"
# Ledger id -> the replica lists marked one after another (merged into one marker). Ids
# cover each of the four 16-bit groups of the marker's path.
MARKS: dict[int, list[list[str]]] = {
    1: [[A]],
    5: [[B], [C, B]],
    70_000: [[A]],
    4_294_967_297: [[C, A]],
    (1 << 62) + 3: [[B]],
}
LOCKED = 70_000


@dataclass
class Listed:
    ctime_ms: int | None = None
    replicas: list[str] = field(default_factory=list)
    worker: str | None = None


def _listed(run: ShellRun) -> dict[int, Listed]:
    """What ``listunderreplicated`` printed: a ledger id per line, its details indented."""
    assert run.returncode == 0, run.output
    found: dict[int, Listed] = {}
    current: Listed | None = None
    for line in run.messages:
        if line.isdigit():
            current = found.setdefault(int(line), Listed())
        elif line.startswith("\t") and current is not None:
            key, _, value = line.strip().partition(" : ")
            if key == "Ctime":
                current.ctime_ms = int(value)
            elif key == "MissingReplica":
                current.replicas.append(value)
            elif key == "ReplicationWorkerId":
                current.worker = value
            else:
                raise AssertionError(f"unexpected line {line!r} in:\n{run.output}")
    return found


def _count(run: ShellRun) -> int:
    counts = [line for line in run.messages if line.startswith("Under replicated ledger count:")]
    assert len(counts) == 1, run.output
    return int(counts[0].rpartition(":")[2])


async def _our_cli(uri: str, *args: str) -> dict[int, Listed]:
    """What ``bkeeper shell listunderreplicated --json ARGS`` prints."""
    done = await asyncio.to_thread(bkeeper, uri, "shell", "listunderreplicated", "--json", *args)
    assert done.returncode == 0, done.stderr
    return {
        row["ledger_id"]: Listed(row["ctime_ms"], row["missing_replicas"], row["worker"])
        for row in json.loads(done.stdout)
    }


async def _ours(urm: UnderReplicationManager) -> dict[int, Listed]:
    return {
        entry.ledger_id: Listed(entry.ctime_ms, list(entry.missing_replicas))
        async for entry in urm.ledgers()
    }


async def test_listunderreplicated_agrees_with_ours(
    javabk: JavaBookKeeper, cluster: tuple[str, ClusterMetadata], tmp_path: Path
) -> None:
    uri, metadata = cluster
    urm = metadata.underreplication
    for ledger_id, rounds in MARKS.items():
        for replicas in rounds:
            await urm.mark_underreplicated(ledger_id, replicas)
    assert await urm.try_lock(LOCKED, WORKER)
    # Our reason beside a mark (underreplication/blocked/): Java's listing is not changed by it.
    await urm.set_blocked(1, BlockedReason("no_candidate", "no candidate bookie", 1, WORKER))
    ours = await _ours(urm)
    assert {ledger: entry.replicas for ledger, entry in ours.items()} == {
        1: [A], 5: [B, C], 70_000: [A], 4_294_967_297: [C, A], (1 << 62) + 3: [B],
    }  # fmt: skip
    assert all(entry.ctime_ms is not None for entry in ours.values())

    def shell(*args: str) -> ShellRun:
        return javabk.shell(uri, tmp_path, "listunderreplicated", *args)

    runs = await asyncio.gather(*(
        asyncio.to_thread(shell, *args)
        for args in (
            ("-printmissingreplica", "-printreplicationworkerid"),
            ("-missingreplica", A, "-printmissingreplica"),
            ("-excludingmissingreplica", B),
            ("-onlydisplayledgercount",),
        )
    ))  # fmt: skip
    everything, missing_a, excluding_b, count_only = runs

    listed = _listed(everything)
    expected = {
        ledger: Listed(entry.ctime_ms, entry.replicas, WORKER if ledger == LOCKED else None)
        for ledger, entry in ours.items()
    }
    assert listed == expected, everything.output
    assert await _our_cli(uri) == expected
    assert _count(everything) == len(MARKS)

    with_a = {ledger for ledger, entry in ours.items() if A in entry.replicas}
    assert with_a == {1, 70_000, 4_294_967_297}
    assert _listed(missing_a) == {
        ledger: Listed(expected[ledger].ctime_ms, expected[ledger].replicas) for ledger in with_a
    }
    assert _count(missing_a) == len(with_a)
    assert await _our_cli(uri, "--missing", A) == {ledger: expected[ledger] for ledger in with_a}

    without_b = {ledger for ledger, entry in ours.items() if B not in entry.replicas}
    assert set(_listed(excluding_b)) == without_b == {1, 70_000, 4_294_967_297}

    assert _listed(count_only) == {}, count_only.output
    assert _count(count_only) == len(MARKS)


async def test_listunderreplicated_sees_ledgers_leave_the_queue(
    javabk: JavaBookKeeper, cluster: tuple[str, ClusterMetadata], tmp_path: Path
) -> None:
    uri, metadata = cluster
    urm = metadata.underreplication
    await urm.mark_underreplicated(7, [A])
    await urm.mark_underreplicated(65_543, [B])
    assert await urm.try_lock(7, WORKER)
    await urm.mark_replicated(7)  # removed, its empty hex directories pruned
    run = await asyncio.to_thread(javabk.shell, uri, tmp_path, "listunderreplicated")
    assert set(_listed(run)) == {65_543} == {entry.ledger_id async for entry in urm.ledgers()}
    assert await urm.try_lock(65_543, WORKER)
    await urm.mark_replicated(65_543)
    run = await asyncio.to_thread(javabk.shell, uri, tmp_path, "listunderreplicated")
    assert _listed(run) == {}
    assert _count(run) == 0


def _auditor(run: ShellRun) -> str | None:
    if "No auditor elected" in run.messages:
        assert run.returncode != 0, run.output  # the shell fails when there is none
        return None
    assert run.returncode == 0, run.output
    named = [line for line in run.messages if line.startswith("Auditor: ")]
    assert len(named) == 1, run.output
    return named[0].removeprefix("Auditor: ")


async def test_whoisauditor_names_our_elected_auditor(
    javabk: JavaBookKeeper, cluster: tuple[str, ClusterMetadata], tmp_path: Path
) -> None:
    uri, metadata = cluster

    urm = metadata.underreplication

    async def whoisauditor() -> str | None:
        java = _auditor(await asyncio.to_thread(javabk.shell, uri, tmp_path, "whoisauditor"))
        assert await urm.current_auditor() == java
        cli = await asyncio.to_thread(bkeeper, uri, "shell", "whoisauditor")
        if java is None:
            assert cli.returncode != 0 and "no auditor is elected" in cli.stderr, cli
        else:
            assert (cli.returncode, cli.stdout) == (0, f"{java}\n"), cli
        return java

    first_id, second_id = "127.0.0.1:3185", "127.0.0.1:3186"
    async with await ClusterMetadata.open(uri) as other:
        first = auditor_election(metadata.store, metadata.root, first_id)
        second = auditor_election(other.store, other.root, second_id)
        await first.start()
        await first.wait_leadership(30)
        await second.start()
        assert await whoisauditor() == first_id
        assert not second.is_leader
        await first.aclose()  # the leader leaves: the next candidate leads
        await second.wait_leadership(30)
        assert await whoisauditor() == second_id
        await second.aclose()
    assert await whoisauditor() is None


async def test_disable_flag_is_shared_with_java(
    javabk: JavaBookKeeper, cluster: tuple[str, ClusterMetadata], tmp_path: Path
) -> None:
    uri, metadata = cluster
    urm = metadata.underreplication
    assert await urm.is_enabled()
    run = await asyncio.to_thread(javabk.shell, uri, tmp_path, "autorecovery", "-disable")
    assert run.returncode == 0, run.output
    assert not await urm.is_enabled()
    run = await asyncio.to_thread(javabk.shell, uri, tmp_path, "autorecovery", "-enable")
    assert run.returncode == 0, run.output
    assert await urm.is_enabled()
    await urm.disable()
    run = await asyncio.to_thread(javabk.shell, uri, tmp_path, "autorecovery", "-disable")
    assert run.returncode == 0, run.output
    assert "WARN  Autorecovery already disabled. Doing nothing" in run.output
    await urm.enable()
    run = await asyncio.to_thread(javabk.shell, uri, tmp_path, "autorecovery", "-enable")
    assert run.returncode == 0, run.output
    assert "WARN  Autorecovery already enabled. Doing nothing" in run.output


async def test_queryautorecoverystatus_lists_our_locks(
    javabk: JavaBookKeeper, cluster: tuple[str, ClusterMetadata], tmp_path: Path
) -> None:
    uri, metadata = cluster
    urm = metadata.underreplication

    async def java_locked() -> list[tuple[int, str]]:
        run = await asyncio.to_thread(javabk.shell, uri, tmp_path, "queryautorecoverystatus")
        assert run.returncode == 0, run.output
        lines = run.after("CurrentRecoverLedgerInfo:")
        if lines == ["\t No Ledger is being recovered."]:
            return []
        held = []
        for line in lines:
            ledger, holder = line.strip().split("\t")
            held.append((int(ledger.removeprefix("LedgerId:")), holder.removeprefix("BookieId:")))
        return sorted(held)

    for ledger_id in (3, 4, 70_000):
        await urm.mark_underreplicated(ledger_id, [A])
    assert await java_locked() == [] == await urm.locked()
    async with await ClusterMetadata.open(uri) as other:
        assert await urm.try_lock(3, WORKER)
        assert await other.underreplication.try_lock(70_000, "127.0.0.1:3191")
        expected = [(3, WORKER), (70_000, "127.0.0.1:3191")]
        assert await urm.locked() == expected
        assert await java_locked() == expected
        cli = await asyncio.to_thread(bkeeper, uri, "shell", "queryautorecoverystatus", "--json")
        assert cli.returncode == 0, cli.stderr
        assert [tuple(held) for held in json.loads(cli.stdout)["locked"]] == expected
    # The other worker's session ended: its ephemeral lock went with it.
    assert await java_locked() == [(3, WORKER)] == await urm.locked()


async def test_lost_bookie_recovery_delay_is_shared_with_java(
    javabk: JavaBookKeeper, cluster: tuple[str, ClusterMetadata], tmp_path: Path
) -> None:
    uri, metadata = cluster
    urm = metadata.underreplication

    def shell(*args: str) -> ShellRun:
        run = javabk.shell(uri, tmp_path, *args)
        assert run.returncode == 0, run.output
        return run

    await urm.set_lost_bookie_recovery_delay_s(7)
    run = await asyncio.to_thread(shell, "lostbookierecoverydelay", "-get")
    assert "LostBookieRecoveryDelay value in ZK: 7" in run.messages, run.output
    run = await asyncio.to_thread(shell, "lostbookierecoverydelay", "-set", "12")
    assert "Successfully set LostBookieRecoveryDelay value in ZK: 12" in run.messages
    assert await urm.lost_bookie_recovery_delay_s() == 12
    cli = await asyncio.to_thread(bkeeper, uri, "shell", "lostbookierecoverydelay")
    assert (cli.returncode, cli.stdout) == (0, "lostBookieRecoveryDelay: 12 s\n"), cli
    cli = await asyncio.to_thread(bkeeper, uri, "shell", "lostbookierecoverydelay", "--set", "3")
    assert cli.returncode == 0, cli.stderr
    run = await asyncio.to_thread(shell, "lostbookierecoverydelay", "-get")
    assert "LostBookieRecoveryDelay value in ZK: 3" in run.messages, run.output
    run = await asyncio.to_thread(shell, "lostbookierecoverydelay", "-set", "12")

    # ``triggeraudit`` rewrites the delay node (same value) while an auditor is elected:
    # our watch sees that write, which is what makes our auditor audit at once.
    election = auditor_election(metadata.store, metadata.root, "127.0.0.1:3185")
    await election.start()
    await election.wait_leadership(30)
    try:
        async with contextlib.aclosing(urm.watch_lost_bookie_recovery_delay()) as delays:
            assert await anext(delays) == 12
            run = await asyncio.to_thread(shell, "triggeraudit")
            assert "Resetting LostBookieRecoveryDelay value: 12, to kickstart audit task" in (
                run.messages
            ), run.output
            async with asyncio.timeout(30):
                assert await anext(delays) == 12
    finally:
        await election.aclose()
