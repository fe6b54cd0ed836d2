"""Changing a sealed ledger's replication online (plan: pure; copy and metadata: in-memory
cluster), and a named log writer rolling to the log's new replication."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from bkeeper.autorecovery.expected import expected_entries
from bkeeper.autorecovery.relayout import plan_relayout, relayout_ledger
from bkeeper.client.distribution import write_set
from bkeeper.common.errors import ConfigError, NotEnoughBookiesError
from bkeeper.meta import DigestType
from bkeeper.meta.ledger_metadata import LedgerMetadata, LedgerState
from bkeeper.namedlog import NamedLogs
from bkeeper.namedlog.core import LogConfig, LogSettings
from bkeeper.testing.cluster import MemoryCluster
from bkeeper.testing.virtual_time import on_virtual_time
from tests.autorecovery.test_worker import CLIENT, CONFIG, PASSWORD, payload

A, B, C, D = "a:1", "b:1", "c:1", "d:1"


def closed(segments: dict[int, tuple[str, ...]], qw: int, qa: int, last: int) -> LedgerMetadata:
    first = next(iter(segments.values()))
    meta = LedgerMetadata.new(first, qw, qa, DigestType.CRC32C, PASSWORD)
    return dataclasses.replace(
        meta, segments=segments, state=LedgerState.CLOSED, last_entry_id=last, length=1
    )


def test_write_quorum_two_to_three_copies_each_entry_to_its_missing_bookie() -> None:
    meta = closed({0: (A, B, C)}, 2, 2, last=8)
    plan = plan_relayout(1, meta, 3, 3, 2, [A, B, C, D])
    assert plan.after.write_quorum == 3 and plan.after.segments == meta.segments
    # entry e was on positions e%3 and e%3+1: the third one gets it
    assert {f.target: list(f.entry_ids) for f in plan.copies} == {
        C: [0, 3, 6],
        A: [1, 4, 7],
        B: [2, 5, 8],
    }
    assert plan.entries == 9
    # nothing to do: the same replication
    assert not plan_relayout(1, meta, 3, 2, 2, [A, B, C]).changed


def test_a_growing_ensemble_takes_new_bookies_and_a_shrinking_one_restripes() -> None:
    meta = closed({0: (A, B), 5: (A, C)}, 2, 2, last=9)
    grown = plan_relayout(1, meta, 3, 3, 2, [A, B, C, D])
    for first, ensemble in grown.after.segments.items():
        assert len(set(ensemble)) == 3 and list(ensemble[:2]) == list(meta.segments[first])
    assert grown.entries == 10  # every entry to its segment's new bookie
    with pytest.raises(NotEnoughBookiesError, match="needs 1 more bookies"):
        plan_relayout(1, meta, 3, 3, 2, [A, B])
    wide = closed({0: (A, B, C, D)}, 2, 2, last=7)
    narrow = plan_relayout(1, wide, 3, 2, 2, [A, B, C, D])
    assert narrow.after.segments[0] == (A, B, C)
    for entry_id in range(8):
        holders = {wide.segments[0][p] for p in write_set(entry_id, 4, 2)}
        needed = {narrow.after.segments[0][p] for p in write_set(entry_id, 3, 2)} - holders
        got = {f.target for f in narrow.copies if entry_id in f.entry_ids}
        assert got == needed, entry_id


def test_open_ledgers_and_impossible_quorums_are_refused() -> None:
    meta = closed({0: (A, B, C)}, 2, 2, last=3)
    with pytest.raises(ConfigError, match="not closed: its writer owns its replication"):
        opened = dataclasses.replace(meta, state=LedgerState.OPEN, last_entry_id=-1, length=0)
        plan_relayout(1, opened, 3, 3, 2, [A, B, C])
    with pytest.raises(ConfigError):
        plan_relayout(1, meta, 3, 4, 2, [A, B, C])


@on_virtual_time
async def test_relayout_puts_every_entry_on_three_bookies_and_a_dry_run_nothing() -> None:
    async with MemoryCluster(4) as cluster:
        bk = await cluster.client(CLIENT)
        wh = await bk.create_ledger(3, 2, 2, password=PASSWORD)
        await asyncio.gather(*[await wh.append_async(payload(wh.ledger_id, e)) for e in range(60)])
        await wh.close()
        lid = wh.ledger_id
        dry = await relayout_ledger(bk, lid, 3, 3, 2, CONFIG, dry_run=True)
        assert (dry.state, dry.entries) == ("planned", 60)
        assert (await bk.ledger_metadata(lid)).write_quorum == 2
        result = await relayout_ledger(bk, lid, 3, 3, 2, CONFIG)
        assert (result.state, result.entries, result.replication_after) == (
            "changed",
            60,
            (3, 3, 2),
        )
        meta = await bk.ledger_metadata(lid)
        assert (meta.write_quorum, meta.ack_quorum) == (3, 2)
        for bookie in {str(b) for b in meta.segments[0]}:
            storage = cluster.bookie(bookie).storage
            assert storage is not None
            assert set(storage.list_entries(lid)) >= set(expected_entries(meta, bookie, 59))
            assert len(list(expected_entries(meta, bookie, 59))) == 60
        rh = await bk.open_ledger(lid, PASSWORD, recovery=False)
        assert [bytes(e.payload) async for e in rh.read(0, 59)] == [
            payload(lid, e) for e in range(60)
        ]
        again = await relayout_ledger(bk, lid, 3, 3, 2, CONFIG)
        assert again.state == "unchanged"


@on_virtual_time
async def test_a_log_writer_rolls_to_the_logs_new_replication_at_its_next_tick() -> None:
    async with MemoryCluster(4) as cluster:
        logs = NamedLogs(await cluster.client(CLIENT), LogConfig(ensemble_size=3, write_quorum=2))
        named = await logs.create(
            "relaid", LogSettings(ensemble_size=3, write_quorum=2, ack_quorum=2)
        )
        writer = await named.open_writer()
        await writer.append(b"before")
        await named.configure(lambda s: dataclasses.replace(s, write_quorum=3))
        await writer.tick()
        meta, _version = await logs.store.read("relaid")
        assert len(meta.ledgers) == 2
        old, new = [await logs.bk.ledger_metadata(ledger.ledger_id) for ledger in meta.ledgers]
        assert old.write_quorum == 2 and new.write_quorum == 3
        await writer.append(b"after")
        await writer.close()
