"""Auto-recovery with real processes: a 5-bookie sandbox (every bookie runs auto-recovery, one
is the auditor) loses bookies to kill -9 one after another; after each loss every replica is
rebuilt on a live bookie, without anyone asking, and at the end, with only 3 bookies left,
every entry of every ledger is on each bookie its metadata names, byte for byte."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bkeeper.autorecovery.expected import expected_entries
from bkeeper.client import BookKeeper
from bkeeper.client.bookie_client import BookieClient
from bkeeper.meta.ledger_metadata import LedgerMetadata
from bkeeper.testing.benchmarks import free_port, free_port_range
from bkeeper.testing.benchmarks.recovery import entry_payload
from bkeeper.testing.sandbox import Sandbox, SandboxConfig
from bkeeper.wire.codes import Protocol, StatusCode
from bkeeper.wire.digest import DigestManager
from bkeeper.wire.messages import ReadRequest

BOOKIES = 5
PASSWORD = b"autorecovery"
ENTRIES = 24
#: How long one repair may take here (a bookie's session must expire first: 10 s).
REPAIR_TIMEOUT_S = 120.0


def _size(entry_id: int) -> int:
    return 50 + (entry_id * 997) % 3000


@pytest.fixture
async def sandbox(tmp_path: Path) -> AsyncIterator[Sandbox]:
    config = SandboxConfig(
        data_dir=tmp_path / "sandbox",
        bookies=BOOKIES,
        zookeeper_port=free_port(),
        bookie_port_base=free_port_range(BOOKIES),
    )
    assert config.autorecovery  # the sandbox runs auto-recovery unless told not to
    box = Sandbox(config)
    await asyncio.to_thread(box.start)
    try:
        yield box
    finally:
        await asyncio.to_thread(box.stop)


def _bookie_id(box: Sandbox, index: int) -> str:
    host, port = box.bookie_address(index)
    return f"{host}:{port}"


async def _write(bk: BookKeeper, write_quorum: int, entries: int) -> int:
    wh = await bk.create_ledger(3, write_quorum, 2, password=PASSWORD)
    for entry_id in range(entries):
        await wh.append(entry_payload(wh.ledger_id, entry_id, _size(entry_id)))
    await wh.close()
    return wh.ledger_id


def _naming(meta: LedgerMetadata, dead: set[str]) -> bool:
    return any(dead & set(ensemble) for ensemble in meta.segments.values())


async def _wait_repaired(bk: BookKeeper, ledgers: list[int], dead: set[str]) -> None:
    """Until no ledger with entries names a dead bookie and nothing is queued (an empty
    closed ledger has nothing to rebuild: its metadata keeps the dead bookie)."""
    urm = bk.cluster.underreplication
    deadline = time.monotonic() + REPAIR_TIMEOUT_S
    while True:
        metas = {ledger: await bk.ledger_metadata(ledger) for ledger in ledgers}
        naming = [i for i, m in metas.items() if m.last_entry_id >= 0 and _naming(m, dead)]
        queued = [entry.ledger_id async for entry in urm.ledgers()]
        if not naming and not queued:
            return
        assert time.monotonic() < deadline, f"still naming {dead}: {naming}; queued: {queued}"
        await asyncio.sleep(0.2)


async def _check_every_replica(bk: BookKeeper, box: Sandbox, ledger_id: int) -> int:
    """Read each entry from every bookie that should hold it; the entries checked."""
    meta = await bk.ledger_metadata(ledger_id)
    digest = DigestManager(ledger_id, meta.digest_type, PASSWORD)
    ports = {_bookie_id(box, i): box.bookie_address(i) for i in range(BOOKIES)}
    checked = 0
    for bookie in sorted({b for ensemble in meta.segments.values() for b in ensemble}):
        held = list(expected_entries(meta, bookie, meta.last_entry_id))
        client = await BookieClient.connect(*ports[bookie], Protocol.V3)
        try:
            answers = await asyncio.gather(
                *(client.send(ReadRequest(ledger_id, entry)) for entry in held)
            )
        finally:
            await client.aclose()
        for entry_id, answer in zip(held, answers, strict=True):
            assert answer.status is StatusCode.EOK, (ledger_id, entry_id, bookie, answer.status)
            payload = digest.verify_entry(bytes(answer.body), entry_id).payload
            assert payload == entry_payload(ledger_id, entry_id, _size(entry_id)), (
                ledger_id, entry_id, bookie,
            )  # fmt: skip
            checked += 1
    return checked


async def test_killed_bookies_are_rebuilt_one_after_another(sandbox: Sandbox) -> None:
    async with BookKeeper(sandbox.metadata_uri) as bk:
        urm = bk.cluster.underreplication
        await urm.set_lost_bookie_recovery_delay_s(0)
        ledgers = [await _write(bk, 3, ENTRIES) for _ in range(8)]  # every entry on 3
        ledgers += [await _write(bk, 2, ENTRIES) for _ in range(6)]  # striped: each on 2
        empty = await _write(bk, 3, 0)
        live = {_bookie_id(sandbox, i) for i in range(BOOKIES)}

        auditor = await urm.current_auditor()
        assert auditor in live, auditor
        # First the auditor's bookie (another is elected and takes over), then another.
        first = next(i for i in range(BOOKIES) if _bookie_id(sandbox, i) == auditor)
        second = next(i for i in reversed(range(BOOKIES)) if i != first)
        dead: set[str] = set()
        for victim in (first, second):
            metas = [await bk.ledger_metadata(ledger) for ledger in ledgers]
            held = [m for m in metas if _naming(m, {_bookie_id(sandbox, victim)})]
            assert held, "the victim held none of the ledgers: nothing to prove"
            sandbox.kill_bookie(victim)
            dead.add(_bookie_id(sandbox, victim))
            await _wait_repaired(bk, ledgers, dead)
            assert await urm.current_auditor() in live - dead

        # Only 3 bookies left: every replica the metadata names is there, identical.
        checked = 0
        for ledger in ledgers:
            meta = await bk.ledger_metadata(ledger)
            assert not _naming(meta, dead) and meta.last_entry_id == ENTRIES - 1
            checked += await _check_every_replica(bk, sandbox, ledger)
        assert checked == 8 * ENTRIES * 3 + 6 * ENTRIES * 2
        for ledger in ledgers:  # and through the client
            rh = await bk.open_ledger(ledger, PASSWORD, recovery=False)
            read = [(e.entry_id, e.payload) async for e in rh.read()]
            assert read == [(i, entry_payload(ledger, i, _size(i))) for i in range(ENTRIES)]
        rh = await bk.open_ledger(empty, PASSWORD, recovery=False)
        assert rh.last_add_confirmed == -1
