"""The data integrity check repairs ledgers in limbo and takes them out of it (in-memory
cluster: real handlers and storage; the limbo comes from bit flips in a bookie's last
journal group)."""

from __future__ import annotations

import asyncio

import pytest

from bkeeper.autorecovery.expected import expected_entries
from bkeeper.autorecovery.integrity import IntegrityCheckConfig, check_storage, run_integrity_check
from bkeeper.client.bookkeeper import BookKeeper
from bkeeper.client.config import ClientConfig
from bkeeper.client.write_handle import WriteHandle
from bkeeper.common.errors import DataUnknownError, NoSuchEntryError, NoSuchLedgerError
from bkeeper.meta.ledger_metadata import LedgerState
from bkeeper.storage import Storage
from bkeeper.storage.framing import RECORD_HEADER_BYTES
from bkeeper.testing.cluster import MemoryBookie, MemoryCluster
from bkeeper.testing.journal_faults import journal_patches
from bkeeper.testing.virtual_time import on_virtual_time

PASSWORD = b"pw"
CLIENT = ClientConfig(add_timeout_ms=120_000, read_timeout_ms=1_000)
# Ledgers are written with Qa = Qw, so that every acknowledged entry is durable on every
# bookie of its write set: the one crashed then lacks exactly the entries damaged.
GROUP_WAIT = {"journal_max_group_wait_ms": 200.0}


def payload(ledger_id: int, entry_id: int) -> bytes:
    return b"%d/%04d-" % (ledger_id, entry_id) + bytes([entry_id % 251]) * 80


async def _write(
    bk: BookKeeper, sizes: tuple[int, int, int], first: int, last_group: int
) -> WriteHandle:
    """``first`` entries one by one, then ``last_group`` at once (one journal group)."""
    wh = await bk.create_ledger(*sizes, password=PASSWORD)
    for entry_id in range(first):
        await wh.append(payload(wh.ledger_id, entry_id))
    futures = [await wh.append_async(payload(wh.ledger_id, first + i)) for i in range(last_group)]
    await asyncio.gather(*futures)
    return wh


async def _damage(
    cluster: MemoryCluster, bookie: MemoryBookie, ledger_id: int, *, hide_ledger: bool = False
) -> int:
    """Crash ``bookie``; flip a bit in each entry of the ledger in its last journal group
    (``hide_ledger``: overwrite one record's length instead, which hides what ledger it
    was: the whole storage in limbo); restart it. How many entries were damaged."""
    await cluster.stop_bookie(bookie, crash=True)
    journal_dir = f"{bookie.data_dir}/current/journal"
    path = f"{journal_dir}/{max(bookie.fs.list_dir(journal_dir))}"
    patches = journal_patches(bookie.fs.read_file(path), ledger_id)
    if hide_ledger:
        offset = patches.patches[0][0] - RECORD_HEADER_BYTES - 60  # the record's length field
        bookie.fs.corrupt(path, offset, b"\xff\xff\xff\x00")
    else:
        for offset, value in patches.patches:
            bookie.fs.corrupt(path, offset, value)
    await cluster.start_bookie(bookie)
    return len(patches.entry_ids)


def _storage(bookie: MemoryBookie) -> Storage:
    assert bookie.storage is not None
    return bookie.storage


def _assert_holds_everything(bookie: MemoryBookie, ledger_id: int, meta) -> None:  # type: ignore[no-untyped-def]
    storage = _storage(bookie)
    expected = list(expected_entries(meta, bookie.bookie_id, meta.last_entry_id))
    assert expected
    assert storage.list_entries(ledger_id) == expected
    for entry_id in expected:
        body = storage.read_entry(ledger_id, entry_id)
        assert body.endswith(payload(ledger_id, entry_id))


@on_virtual_time
async def test_a_closed_ledger_is_copied_back_and_leaves_limbo() -> None:
    async with MemoryCluster(3, storage_options=GROUP_WAIT) as cluster:
        bk = await cluster.client(CLIENT)
        other = await _write(bk, (3, 3, 3), first=5, last_group=0)  # not hit: no limbo
        wh = await _write(bk, (3, 3, 3), first=20, last_group=15)
        await wh.close()
        bookie = cluster.bookie(wh.ensemble[0])
        damaged = await _damage(cluster, bookie, wh.ledger_id)
        storage = _storage(bookie)
        assert storage.limbo_ledgers() == [wh.ledger_id]
        with pytest.raises(DataUnknownError):
            storage.read_entry(wh.ledger_id, 34)
        report = await check_storage(storage, bookie.bookie_id, bk)
        assert report.repaired == [wh.ledger_id] and report.entries_copied == damaged
        assert not report.failed and not report.deleted
        assert storage.limbo_ledgers() == [] and not storage.limbo
        meta = await bk.ledger_metadata(wh.ledger_id)
        _assert_holds_everything(bookie, wh.ledger_id, meta)
        with pytest.raises(NoSuchEntryError):  # answers normally again
            storage.read_entry(wh.ledger_id, 35)
        assert storage.list_entries(other.ledger_id) == list(range(5))
        await cluster.crash(cluster.bookies.index(bookie))  # the repair is durable
        assert _storage(bookie).limbo_ledgers() == []
        _assert_holds_everything(bookie, wh.ledger_id, meta)


@on_virtual_time
async def test_an_open_ledger_is_recovered_first() -> None:
    async with MemoryCluster(3, storage_options=GROUP_WAIT) as cluster:
        bk = await cluster.client(CLIENT)
        wh = await _write(bk, (3, 3, 3), first=10, last_group=10)  # left open
        bookie = cluster.bookie(wh.ensemble[1])
        await _damage(cluster, bookie, wh.ledger_id)
        report = await check_storage(_storage(bookie), bookie.bookie_id, await cluster.client())
        assert report.repaired == [wh.ledger_id]
        meta = await bk.ledger_metadata(wh.ledger_id)
        assert meta.state is LedgerState.CLOSED and meta.last_entry_id == 19
        _assert_holds_everything(bookie, wh.ledger_id, meta)


@on_virtual_time
async def test_striped_ledger_copies_only_this_bookie_share() -> None:
    async with MemoryCluster(4, storage_options=GROUP_WAIT) as cluster:
        bk = await cluster.client(CLIENT)
        wh = await _write(bk, (4, 2, 2), first=8, last_group=24)
        await wh.close()
        bookie = cluster.bookie(wh.ensemble[2])
        damaged = await _damage(cluster, bookie, wh.ledger_id)
        report = await check_storage(_storage(bookie), bookie.bookie_id, bk)
        assert report.repaired == [wh.ledger_id] and report.entries_copied == damaged
        _assert_holds_everything(bookie, wh.ledger_id, await bk.ledger_metadata(wh.ledger_id))


@on_virtual_time
async def test_a_ledger_without_metadata_is_deleted() -> None:
    async with MemoryCluster(3, storage_options=GROUP_WAIT) as cluster:
        bk = await cluster.client(CLIENT)
        wh = await _write(bk, (3, 3, 3), first=3, last_group=5)
        await wh.close()
        bookie = cluster.bookie(wh.ensemble[0])
        await _damage(cluster, bookie, wh.ledger_id)
        await bk.delete_ledger(wh.ledger_id)
        report = await check_storage(_storage(bookie), bookie.bookie_id, bk)
        assert report.deleted == [wh.ledger_id] and not report.repaired
        with pytest.raises(NoSuchLedgerError):
            _storage(bookie).read_entry(wh.ledger_id, 0)


@on_virtual_time
async def test_limbo_of_the_whole_storage_becomes_limbo_of_its_ledgers() -> None:
    async with MemoryCluster(3, storage_options=GROUP_WAIT) as cluster:
        bk = await cluster.client(CLIENT)
        untouched = await _write(bk, (3, 3, 3), first=6, last_group=0)
        await untouched.close()
        wh = await _write(bk, (3, 3, 3), first=4, last_group=8)
        await wh.close()
        bookie = cluster.bookie(wh.ensemble[0])
        await _damage(cluster, bookie, wh.ledger_id, hide_ledger=True)
        storage = _storage(bookie)
        assert storage.limbo
        with pytest.raises(DataUnknownError):
            storage.read_entry(untouched.ledger_id, 6)
        report = await check_storage(storage, bookie.bookie_id, bk)
        assert sorted(report.repaired) == sorted([untouched.ledger_id, wh.ledger_id])
        assert not storage.limbo and storage.limbo_ledgers() == []
        for handle in (untouched, wh):
            meta = await bk.ledger_metadata(handle.ledger_id)
            _assert_holds_everything(bookie, handle.ledger_id, meta)
        with pytest.raises(NoSuchLedgerError):
            storage.read_entry(10_000, 0)


@on_virtual_time
async def test_a_ledger_that_cannot_be_repaired_yet_stays_in_limbo_until_a_later_pass() -> None:
    async with MemoryCluster(3, storage_options=GROUP_WAIT) as cluster:
        bk = await cluster.client(CLIENT)
        wh = await _write(bk, (3, 3, 3), first=2, last_group=6)
        await wh.close()
        bookie = cluster.bookie(wh.ensemble[0])
        await _damage(cluster, bookie, wh.ledger_id)
        for other in wh.ensemble[1:]:
            await cluster.stop_bookie(cluster.bookie(other))
        storage = _storage(bookie)
        config = IntegrityCheckConfig(attempts_max=3, retry_interval_ms=50)
        report = await run_integrity_check(storage, bookie.bookie_id, bk, config)
        assert list(report.failed) == [wh.ledger_id] and storage.limbo_ledgers() == [wh.ledger_id]
        for other in wh.ensemble[1:]:
            await cluster.start_bookie(cluster.bookie(other))
        report = await run_integrity_check(storage, bookie.bookie_id, bk, config)
        assert report.repaired == [wh.ledger_id] and storage.limbo_ledgers() == []
