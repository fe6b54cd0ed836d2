"""Racks on the multi-host harness (issue 42's criteria).

A whole rack cut off during appends: with rack-aware placement and two racks per write
quorum (E3/Qw3/Qa2: a bookie of each ledger in each of the three racks; a striped E3/Qw2
ledger cannot keep two racks in every write quorum once two racks are left, as a ring of
three on two racks puts two neighbours on one), no acknowledged entry is lost, every ledger
stays readable, the writer goes on within 10 s, and within 120 s auto-recovery has every
ledger fully replicated on the racks left, with no placement violation reported by the
auditor. The rack's bookies are cut off at the link (their namespaces' links to the bridge
down: to clients and ZooKeeper alike they vanish mid-connection, as a rack whose switch
died). Auto-recovery runs in this process's namespace, as a client does (lost-bookie delay
0; the placement check every 2 s); the sealed ledgers are written before the cut and read
back with the rack still away.

On the same cluster: ``bkeeper shell relocateledgers`` fixes a ledger planted on one rack,
and ``bkeeper log config --existing`` takes a log's write quorum from 2 to 3 under a writer,
leaving every entry on three bookies (each bookie asked for its list of entries)."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time

from bkeeper.autorecovery.auditor import Auditor
from bkeeper.autorecovery.config import AutoRecoveryConfig
from bkeeper.autorecovery.replicas import lacking_bookies
from bkeeper.autorecovery.service import AutoRecovery
from bkeeper.client import BookKeeper, ClientConfig
from bkeeper.client.placement import quorum_racks_short
from bkeeper.namedlog import NamedLogs
from bkeeper.testing.multihost import MultiHostCluster
from tests.multihost.writer import (
    PASSWORD,
    PacedWriter,
    check_all_read_back,
    payload,
    run_in_thread,
)

RATE_PER_S = 200
#: Sealed ledgers written before the cut, and their entries.
SEALED, SEALED_ENTRIES = 8, 50
#: The issue's bounds: the writer appends again within this long of the cut ...
WRITER_RESUMES_S = 10.0
#: The writer goes on this long after the cut (past its add timeout: an ensemble change).
WRITING_AFTER_CUT_S = 8
#: ... and every ledger is fully replicated within this long.
HEALED_S = 120.0
#: How long the rack's bookies may take to register again once it is back.
REREGISTER_S = 60.0
RECOVERY = AutoRecoveryConfig(
    lost_bookie_recovery_delay_s=0,
    placement_check_interval_s=2.0,
    idle_poll_interval_ms=200,
    failed_ledger_retry_delay_ms=2_000,
)
#: A bookie cut off is seen gone when its ZooKeeper session expires (tick 500 ms: a 10 s
#: session asked for is granted); the client and auto-recovery ask for short sessions.
CLIENT = ClientConfig(metadata_session_timeout_ms=4_000)


async def write_sealed(uri: str) -> list[int]:
    async with BookKeeper(uri, CLIENT) as bk:
        ids = []
        for _ in range(SEALED):
            handle = await bk.create_ledger(3, 3, 2, password=PASSWORD)
            for sequence in range(SEALED_ENTRIES):
                await handle.append(payload(sequence))
            await handle.close()
            ids.append(handle.ledger_id)
        return ids


async def healed(cluster: MultiHostCluster, ledger_ids: list[int], gone: set[str]) -> list[str]:
    """What keeps the cluster from healed (empty: healed): a ledger still naming a bookie of
    the rack cut off, a bookie lacking entries it should hold, a write quorum on one rack,
    or a ledger still queued."""
    async with BookKeeper(cluster.metadata_uri, CLIENT) as bk:
        bookies = await bk.cluster.registry.bookies()
        domains = await bk.domains()
        assert domains is not None
        wrong = []
        for ledger_id in ledger_ids:
            meta = await bk.ledger_metadata(ledger_id)
            members = {str(b) for e in meta.segments.values() for b in e}
            if members & gone:
                wrong.append(f"ledger {ledger_id} still names {sorted(members & gone)}")
                continue
            for first, ensemble in meta.segments.items():
                short = quorum_racks_short([str(b) for b in ensemble], meta.write_quorum, domains)
                if short:
                    wrong.append(f"ledger {ledger_id} segment {first}: write quorums {short}")
            if meta.is_closed:
                lacking = await lacking_bookies(bk, ledger_id, meta, bookies.writable)
                if lacking:
                    wrong.append(f"ledger {ledger_id}: {sorted(lacking)} lack entries")
        queued = [e.ledger_id async for e in bk.cluster.underreplication.ledgers()]
        if queued:
            wrong.append(f"still under-replicated: {queued}")
        return wrong


def test_a_rack_cut_off_during_appends_loses_nothing_and_heals_on_the_racks_left(
    multihost_cluster: MultiHostCluster,
) -> None:
    cluster = multihost_cluster
    uri = cluster.metadata_uri
    sealed = run_in_thread(lambda: write_sealed(uri))
    writer = PacedWriter(uri, RATE_PER_S, quorum=(3, 3, 2), config=CLIENT)
    writer.start()
    rack = "/rack-0"
    gone = {cluster.bookie_id(i) for i in cluster.rack_bookies(rack)}
    result = None
    try:
        writer.wait_acknowledged(RATE_PER_S, 30.0, "appends before the cut")

        async def recover_and_watch() -> tuple[list[str], float, int]:
            async with BookKeeper(uri, CLIENT) as bk:
                await bk.cluster.underreplication.ensure_layout()
                async with AutoRecovery(bk, "recovery-in-clients:0", RECOVERY) as recovery:
                    await recovery.wait_auditor(30.0)
                    cut_at = time.monotonic()
                    await asyncio.to_thread(cluster.cut_rack, rack)
                    at_cut = writer.acknowledged
                    # the writer goes on within 10 s
                    await asyncio.to_thread(
                        writer.wait_acknowledged,
                        at_cut + RATE_PER_S,
                        WRITER_RESUMES_S,
                        "appends after the rack was cut off",
                    )
                    resumed_s = time.monotonic() - cut_at
                    # every sealed ledger reads back with the rack away
                    for ledger_id in sealed:
                        handle = await bk.open_ledger(ledger_id, PASSWORD, recovery=False)
                        got = [bytes(e.payload) async for e in handle.read(0, SEALED_ENTRIES - 1)]
                        assert got == [payload(s) for s in range(SEALED_ENTRIES)], ledger_id
                    # past the add timeout: the writer's ensemble changes off the lost rack
                    await asyncio.to_thread(
                        writer.wait_acknowledged,
                        at_cut + RATE_PER_S * WRITING_AFTER_CUT_S,
                        WRITING_AFTER_CUT_S + WRITER_RESUMES_S,
                        "appends through the writer's ensemble change",
                    )
                    # the writer's ledger is sealed and healed too: stop it first
                    nonlocal result
                    result = await asyncio.to_thread(writer.stop)
                    ledgers = [*sealed, result.ledger_id]
                    wrong: list[str] = []
                    while time.monotonic() - cut_at < HEALED_S:
                        wrong = await healed(cluster, ledgers, gone)
                        if not wrong:
                            break
                        await asyncio.sleep(1.0)
                    healed_s = time.monotonic() - cut_at
                    auditor = Auditor(bk, bk.cluster.underreplication, RECOVERY)
                    violations = (await auditor.placement_check()).not_adhering
                    assert violations == {}, f"placement violations after healing: {violations}"
                    return wrong, healed_s, int(resumed_s * 1000)

        wrong, healed_s, resumed_ms = run_in_thread(recover_and_watch)
        assert wrong == [], f"not healed {healed_s:.0f} s after the cut: {wrong[:5]}"
        print(
            f"writer: {RATE_PER_S} more appends {resumed_ms} ms after the cut, longest gap "
            f"{result.longest_gap_s if result else -1:.2f} s; healed in {healed_s:.1f} s"
        )
        assert result is not None and result.failures == [], result.failures[:3]
        assert check_all_read_back(uri, result) >= len(result.acknowledged)
    finally:
        cluster.heal_rack(rack)
        if result is None:
            with contextlib.suppress(AssertionError):
                writer.stop()
        run_in_thread(lambda: all_registered_again(cluster))


async def all_registered_again(cluster: MultiHostCluster) -> None:
    """Wait until every bookie is registered writable again (the rack's re-register once
    their new ZooKeeper sessions are up), at most :data:`REREGISTER_S`."""
    async with BookKeeper(cluster.metadata_uri, CLIENT) as bk:
        deadline = time.monotonic() + REREGISTER_S
        while True:
            writable = (await bk.cluster.registry.bookies()).writable
            missing = set(cluster.bookie_ids) - set(writable)
            if not missing:
                return
            assert time.monotonic() < deadline, f"not registered again: {sorted(missing)}"
            await asyncio.sleep(0.5)


def bkeeper(uri: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m bkeeper ARGS --metadata URI``, a process in the clients' namespace."""
    return subprocess.run(
        [sys.executable, "-m", "bkeeper", *args, "--metadata", uri],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


async def plant(uri: str, bookies: list[str]) -> int:
    async with BookKeeper(uri, ClientConfig(placement="random")) as bk:
        handle = await bk.create_ledger(2, 2, 2, password=PASSWORD, bookies=bookies)
        for sequence in range(SEALED_ENTRIES):
            await handle.append(payload(sequence))
        await handle.close()
        return handle.ledger_id


def test_relocateledgers_fixes_a_planted_violation(multihost_cluster: MultiHostCluster) -> None:
    cluster = multihost_cluster
    uri = cluster.metadata_uri
    one_rack = [cluster.bookie_id(i) for i in cluster.rack_bookies("/rack-1")]
    ledger_id = run_in_thread(lambda: plant(uri, one_rack))
    dry = bkeeper(uri, "shell", "relocateledgers", "--ledger-ids", str(ledger_id), "--dry-run")
    assert dry.returncode == 0 and "planned" in dry.stdout, (dry.stdout, dry.stderr)
    done = bkeeper(uri, "shell", "relocateledgers", "--ledger-ids", str(ledger_id))
    assert done.returncode == 0 and "moved" in done.stdout, (done.stdout, done.stderr)

    async def check() -> None:
        async with BookKeeper(uri, CLIENT) as bk:
            meta = await bk.ledger_metadata(ledger_id)
            assert len({cluster.racks[str(b)] for b in meta.segments[0]}) == 2
            handle = await bk.open_ledger(ledger_id, PASSWORD, recovery=False)
            got = [bytes(e.payload) async for e in handle.read(0, SEALED_ENTRIES - 1)]
            assert got == [payload(s) for s in range(SEALED_ENTRIES)]
            report = await Auditor(bk, bk.cluster.underreplication, RECOVERY).placement_check()
            assert ledger_id not in report.not_adhering

    run_in_thread(check)


def test_a_logs_write_quorum_two_to_three_online(multihost_cluster: MultiHostCluster) -> None:
    uri = multihost_cluster.metadata_uri
    created = bkeeper(uri, "log", "create", "hosts", "-e", "3", "--write-quorum", "2",
                      "--ack-quorum", "2", "--roll-age", "2s")  # fmt: skip
    assert created.returncode == 0, created.stderr

    async def scenario() -> None:
        async with BookKeeper(uri, CLIENT) as bk:
            logs = NamedLogs(bk)
            writer = await logs.log("hosts").open_writer()
            appended = []
            for sequence in range(100):
                await writer.append(payload(sequence))
                appended.append(payload(sequence))
            changing = asyncio.create_task(asyncio.to_thread(
                bkeeper, uri, "log", "config", "hosts", "-e", "3", "--write-quorum", "3",
                "--ack-quorum", "2", "--existing", "--wait", "60",
            ))  # fmt: skip
            sequence = 100
            while not changing.done():  # the writer goes on meanwhile
                await writer.append(payload(sequence))
                appended.append(payload(sequence))
                sequence += 1
                await asyncio.sleep(0.01)
            changed = await changing
            assert changed.returncode == 0, (changed.stdout, changed.stderr)
            await writer.close()
            meta, _version = await logs.store.read("hosts")
            bookies = await bk.cluster.registry.bookies()
            for ledger in meta.ledgers:
                ledger_meta = await bk.ledger_metadata(ledger.ledger_id)
                assert ledger_meta.write_quorum == 3
                lacking = await lacking_bookies(bk, ledger.ledger_id, ledger_meta, bookies.writable)
                assert lacking == frozenset(), (ledger.ledger_id, lacking)
            reader = await logs.log("hosts").open_reader()
            got = []
            while len(got) < len(appended):
                record = await reader.next(timeout_s=30)
                assert record is not None
                got.append(bytes(record.payload))
            await reader.close()
            assert got == appended

    run_in_thread(scenario)
