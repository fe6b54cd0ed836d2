"""Damaged entry-log records on a real bookie process (bits flipped while it was stopped):
found by its scrub soon after start, or by a client's read when the scrub is off, and
copied back from the other replicas by its integrity check (docs/storage.md, "Damaged entry
logs and the scrub"). Four bookies: the E3/Qa3 ledger's ensemble has a spare (issue 41: on
three, an add a loaded bookie answered late failed with ``NotEnoughBookiesError``); the test
damages a bookie of the ensemble; no auto-recovery (it would move the ledger to the spare
while that bookie is stopped)."""

from __future__ import annotations

import asyncio
import random
import signal
from pathlib import Path

import pytest

from bkeeper.client import BookKeeper
from bkeeper.common.errors import BKeeperError, DataUnknownError
from bkeeper.testing.entry_log_faults import flip_entry_log_records
from bkeeper.testing.sandbox import Sandbox, SandboxConfig
from bkeeper.testing.zookeeper import port_free

PASSWORD = b"pw"
ENTRIES = 100
BOOKIES = 4


def sandbox_config(data_dir: Path, zookeeper_home: Path | None, *options: str) -> SandboxConfig:
    rng = random.Random()
    for _ in range(50):
        base = rng.randrange(30_000, 40_000)
        if all(port_free("127.0.0.1", port) for port in range(base, base + 1 + BOOKIES)):
            return SandboxConfig(
                data_dir=data_dir,
                bookies=BOOKIES,
                # The bookie's own scrub and integrity check repair it: auto-recovery would
                # move the ledger to the spare while the damaged bookie is stopped.
                autorecovery=False,
                zookeeper_port=base,
                bookie_port_base=base + 1,
                zookeeper_home=zookeeper_home,
                bookie_args=tuple(arg for option in options for arg in ("-o", option)),
            )
    raise AssertionError("no free ports")


async def write_ledger(uri: str) -> tuple[int, str]:
    """A closed ledger of ``ENTRIES`` entries on 3 bookies; its id and its first bookie."""
    async with BookKeeper(uri) as bk:
        writer = await bk.create_ledger(3, 3, 3, password=PASSWORD)
        for entry_id in range(ENTRIES):
            await writer.append(b"entry %d " % entry_id + b"x" * 200)
        await writer.close()
        assert len(writer.metadata.segments) == 1
        return writer.ledger_id, writer.ensemble[0]


def index_of(sandbox: Sandbox, bookie: str) -> int:
    [index] = [i for i in range(BOOKIES) if "{}:{}".format(*sandbox.bookie_address(i)) == bookie]
    return index


async def read_from(uri: str, bookie: str, ledger_id: int, entry_ids: tuple[int, ...]) -> None:
    """Each entry from ``bookie`` alone (its digest checked); raises as the bookie answers."""
    async with BookKeeper(uri) as bk:
        handle = await bk.open_ledger(ledger_id, PASSWORD)
        try:
            for entry_id in entry_ids:
                entry = await handle.read_entry_from(bookie, entry_id)
                assert bytes(entry.payload).startswith(b"entry %d " % entry_id)
        finally:
            await handle.close()


def damage_bookie(sandbox: Sandbox, index: int, ledger_id: int) -> tuple[int, ...]:
    """Stop bookie ``index`` (SIGTERM: it checkpoints), flip its ledger's last 3 entry-log
    records, start it again."""
    sandbox.kill_bookie(index, signal.SIGTERM)
    sandbox.bookies[index].wait(30)
    flipped = flip_entry_log_records(sandbox.bookie_data_dir(index), [ledger_id], count=3)
    assert flipped is not None and flipped.ledger_id == ledger_id
    sandbox.restart_bookie(index)
    return flipped.entry_ids


async def until_whole(uri: str, bookie: str, ledger_id: int, ids: tuple[int, ...]) -> None:
    async with asyncio.timeout(60):
        while True:
            try:
                await read_from(uri, bookie, ledger_id, ids)
                return
            except BKeeperError:
                await asyncio.sleep(0.2)


def test_the_scrub_finds_damage_soon_after_start_and_it_is_repaired(
    tmp_path: Path, zookeeper_home: Path | None
) -> None:
    config = sandbox_config(tmp_path, zookeeper_home, "checkpoint_interval_ms=300")
    with Sandbox(config) as sandbox:
        uri = sandbox.metadata_uri
        ledger_id, bookie = asyncio.run(write_ledger(uri))
        index = index_of(sandbox, bookie)
        ids = damage_bookie(sandbox, index, ledger_id)
        asyncio.run(until_whole(uri, bookie, ledger_id, ids))
        log = (tmp_path / f"bookie-{index}.log").read_text()
    assert f"scrub: damaged entries in 1 ledgers (ledger {ledger_id}: {list(ids)})" in log
    assert f"integrity check: ledger {ledger_id}: 3 entries copied, limbo cleared" in log


def test_with_the_scrub_off_damage_a_read_finds_is_repaired(
    tmp_path: Path, zookeeper_home: Path | None
) -> None:
    """Before, a bookie that found a damaged record only at a read (no scrub) kept it for
    good: nothing ran its integrity check until it was restarted."""
    config = sandbox_config(
        tmp_path, zookeeper_home, "checkpoint_interval_ms=300", "scrub_interval_ms=0",
        "limbo_check_interval_ms=500",
    )  # fmt: skip
    with Sandbox(config) as sandbox:
        uri = sandbox.metadata_uri
        ledger_id, bookie = asyncio.run(write_ledger(uri))
        index = index_of(sandbox, bookie)
        ids = damage_bookie(sandbox, index, ledger_id)
        with pytest.raises(DataUnknownError):  # "unknown": never a bad body, never "absent"
            asyncio.run(read_from(uri, bookie, ledger_id, ids[:1]))
        asyncio.run(until_whole(uri, bookie, ledger_id, ids))
        log = (tmp_path / f"bookie-{index}.log").read_text()
    assert "scrub:" not in log
    assert f"ledger {ledger_id} entry {ids[0]}: damaged on this bookie" in log
    # the check reads the ledger back first: the other two damaged records are found too
    assert f"integrity check: ledger {ledger_id}: 3 entries copied, limbo cleared" in log
