"""Quarantine: a bookie that failed a writer is avoided for a while, and taken back when no
other bookie is left (docs/client.md, "Quarantine"); the no-spare warning.

Pure placement decisions first, then scenarios on the in-memory cluster.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random

import pytest

from bkeeper.client import BookKeeper
from bkeeper.client.adding import AddPipeline
from bkeeper.client.config import ClientConfig
from bkeeper.client.placement import Quarantine, SpareWarning, choose_ensemble, replace_bookie
from bkeeper.common.errors import ConfigError, NotEnoughBookiesError
from bkeeper.testing.cluster import MemoryBookie, MemoryCluster
from bkeeper.testing.virtual_time import on_virtual_time
from tests.client.test_scenarios_more import bounded, read_all

FAST = ClientConfig(
    add_timeout_ms=300,
    read_timeout_ms=300,
    speculative_read_timeout_ms=50,
    timeout_check_interval_ms=20,
)
BOOKIES = ("a:1", "b:1", "c:1", "d:1")


# -- pure: placement -------------------------------------------------------------------------
def test_a_replacement_avoids_quarantined_bookies_while_others_are_left() -> None:
    for seed in range(50):
        chosen = replace_bookie(
            ("a:1", "b:1", "c:1"), 1, (*BOOKIES, "e:1"), 3,
            exclude={"b:1"}, quarantined={"d:1": 10.0}, rng=random.Random(seed),
        )  # fmt: skip
        assert chosen == "e:1"


def test_a_quarantined_bookie_replaces_when_no_other_is_left() -> None:
    # The measured case: a:1 failed this client, came back; now b:1 fails.
    chosen = replace_bookie(
        ("d:1", "b:1", "c:1"), 1, BOOKIES, 3, exclude={"b:1"}, quarantined={"a:1": 10.0}
    )
    assert chosen == "a:1"


def test_the_failing_bookie_never_replaces_itself_even_as_the_last_one() -> None:
    with pytest.raises(NotEnoughBookiesError, match="no bookie can replace b:1"):
        replace_bookie(
            ("a:1", "b:1", "c:1"), 1, ("a:1", "b:1", "c:1"), 3,
            exclude={"b:1"}, quarantined={"b:1": 10.0},
        )  # fmt: skip


def test_the_quarantined_bookie_released_first_is_taken_first() -> None:
    quarantined = {"d:1": 30.0, "e:1": 20.0, "f:1": 25.0}
    candidates = ("a:1", "b:1", "c:1", "d:1", "e:1", "f:1")
    chosen = replace_bookie(
        ("a:1", "b:1", "c:1"), 0, candidates, 3, exclude={"a:1"}, quarantined=quarantined
    )
    assert chosen == "e:1"


def test_a_new_ensemble_avoids_quarantined_bookies_while_enough_are_left() -> None:
    for seed in range(50):
        ensemble = choose_ensemble(BOOKIES, 3, 3, quarantined={"b:1": 5.0}, rng=random.Random(seed))
        assert sorted(ensemble) == ["a:1", "c:1", "d:1"]


def test_a_new_ensemble_takes_as_few_quarantined_bookies_as_it_needs() -> None:
    quarantined = {"a:1": 9.0, "b:1": 7.0, "c:1": 8.0}
    for seed in range(20):
        ensemble = choose_ensemble(BOOKIES, 3, 3, quarantined=quarantined, rng=random.Random(seed))
        assert sorted(ensemble) == ["b:1", "c:1", "d:1"], "d, then those released first"


def test_quarantined_bookies_do_not_count_as_missing() -> None:
    ensemble = choose_ensemble(("a:1", "b:1"), 2, 2, quarantined={"a:1": 1.0, "b:1": 1.0})
    assert sorted(ensemble) == ["a:1", "b:1"]
    with pytest.raises(NotEnoughBookiesError, match="need 3 bookies, 2 available"):
        choose_ensemble(("a:1", "b:1"), 3, 2, quarantined={"a:1": 1.0})


def test_rack_aware_placement_still_prefers_healthy_bookies() -> None:
    racks = {"a:1": "/r1", "b:1": "/r1", "c:1": "/r2", "d:1": "/r2", "e:1": "/r3"}
    for seed in range(30):
        chosen = replace_bookie(
            ("a:1", "c:1", "x:1"), 2, (*racks, "x:1"), 3,
            exclude={"x:1"}, quarantined={"e:1": 3.0}, racks=racks, rng=random.Random(seed),
        )  # fmt: skip
        assert chosen in {"b:1", "d:1"}, "a fresh rack is not worth a quarantined bookie"


# -- pure: the quarantine's times -----------------------------------------------------------
def test_quarantine_ends_after_its_time() -> None:
    quarantine = Quarantine(1800.0)
    quarantine.add(["a:1"], now=100.0)
    assert quarantine.current(100.0) == {"a:1": 1900.0}
    assert quarantine.current(1899.9) == {"a:1": 1900.0}
    assert quarantine.current(1900.0) == {}


def test_failing_again_extends_the_quarantine() -> None:
    quarantine = Quarantine(10.0)
    quarantine.add(["a:1", "b:1"], now=0.0)
    quarantine.add(["a:1"], now=5.0)
    assert quarantine.current(12.0) == {"a:1": 15.0}


def test_quarantine_time_zero_quarantines_nothing() -> None:
    quarantine = Quarantine(0.0)
    quarantine.add(["a:1"], now=0.0)
    assert quarantine.current(0.0) == {}


def test_the_quarantine_time_is_validated() -> None:
    assert ClientConfig().bookie_quarantine_time_ms == 1_800_000  # BookKeeper's 1800 s
    with pytest.raises(ConfigError, match="bookie_quarantine_time_ms"):
        ClientConfig(bookie_quarantine_time_ms=-1)


# -- pure: the writer excludes only the bookies failing during this change ---------------------
def test_a_replacement_excludes_what_failed_during_the_change_only() -> None:
    pipeline = AddPipeline(
        7, ("a:1", "b:1", "c:1"), 3, 2, pending_max=10, add_timeout_s=1.0,
        tick_interval_s=0.1, ensemble_changes_max=10, now=0.0,
    )  # fmt: skip
    pipeline.bookie_failed("a:1")
    first = pipeline.begin_replacement()
    assert first is not None and first.exclude == {"a:1"}
    pipeline.replaced(("d:1", "b:1", "c:1"), now=0.0)
    pipeline.bookie_failed("d:1")  # the replacement failed at once: same change
    second = pipeline.begin_replacement()
    assert second is not None and second.exclude == {"a:1", "d:1"}
    pipeline.replaced(("e:1", "b:1", "c:1"), now=0.0)
    assert pipeline.begin_replacement() is None
    pipeline.change_done()
    pipeline.bookie_failed("b:1")  # a later change: a:1 and d:1 are the quarantine's business
    third = pipeline.begin_replacement()
    assert third is not None and third.exclude == {"b:1"}


# -- pure: the no-spare warning -------------------------------------------------------------
def test_no_spare_is_warned_once_per_cluster_state() -> None:
    warning = SpareWarning()
    assert warning.check(writable=3, ensemble_size=3)
    assert not warning.check(writable=3, ensemble_size=3), "not per ledger"
    assert not warning.check(writable=3, ensemble_size=2)
    assert not warning.check(writable=2, ensemble_size=3), "too few: the create fails"
    assert not warning.check(writable=4, ensemble_size=3)  # a spare came
    assert warning.check(writable=3, ensemble_size=3)  # and went


# -- scenarios on the in-memory cluster -------------------------------------------------------
def payload(i: int) -> bytes:
    return b"entry-%06d" % i


def vanish_keeping_registration(bookie: MemoryBookie) -> None:
    """The bookie dies but its registration stays (a session not expired yet)."""
    bookie.down = True
    for conn in bookie.connections:
        conn.fail_all()
    bookie.connections.clear()


async def wait_writable(cluster: MemoryCluster, bookie_id: str, present: bool) -> None:
    assert cluster.metadata is not None
    registry = cluster.metadata.registry

    async def wait() -> None:
        while (bookie_id in (await registry.bookies()).writable) is not present:
            await asyncio.sleep(0.01)

    await bounded(wait())


@on_virtual_time
async def test_a_bookie_back_from_a_crash_replaces_the_next_one_lost() -> None:
    """4 bookies, E3: A lost and replaced; A back; B lost: A takes B's place (fails
    with NotEnoughBookiesError before quarantine: A was excluded for the writer's life)."""
    async with MemoryCluster(4) as cluster:
        bk = await cluster.client(FAST)
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        first, second = (cluster.bookies.index(cluster.bookie(b)) for b in wh.ensemble[:2])
        a_id = cluster.bookies[first].bookie_id
        for i in range(20):
            assert await bounded(wh.append(payload(i))) == i
        await cluster.crash(first, restart=False)
        for i in range(20, 40):
            assert await bounded(wh.append(payload(i))) == i
        assert a_id not in wh.ensemble
        await cluster.start_bookie(cluster.bookies[first])
        await wait_writable(cluster, a_id, present=True)
        await cluster.crash(second, restart=False)
        for i in range(40, 60):
            assert await bounded(wh.append(payload(i))) == i
        assert a_id in wh.ensemble, "the quarantined bookie was the only one left"
        await bounded(wh.close())
        reader = await cluster.client(FAST)
        rh = await reader.open_ledger(wh.ledger_id, b"pw")
        assert await read_all(rh) == [payload(i) for i in range(60)]


@on_virtual_time
async def test_a_quarantined_bookie_that_cannot_be_reached_is_not_taken_back() -> None:
    """A and B dead but still registered: the writer goes on degraded (B down) at once
    instead of writing segments that swap one dead bookie for the other."""
    async with MemoryCluster(4) as cluster:
        bk = await cluster.client(FAST)
        wh = await bk.create_ledger(3, 3, 2, password=b"pw")
        a, b = (cluster.bookie(bookie) for bookie in wh.ensemble[:2])
        for i in range(10):
            await bounded(wh.append(payload(i)))
        vanish_keeping_registration(a)
        for i in range(10, 20):
            await bounded(wh.append(payload(i)))
        assert a.bookie_id not in wh.ensemble
        vanish_keeping_registration(b)
        for i in range(20, 40):
            await bounded(wh.append(payload(i)))
        assert wh.degraded == {b.bookie_id}
        assert len(wh.metadata.segments) == 2, "no segment with a dead bookie in it"


async def fail_a_writer_and_come_back(cluster: MemoryCluster, bk: BookKeeper) -> MemoryBookie:
    """A bookie of a new writer of ``bk`` vanishes (still registered) and is replaced; then
    it is back, same registration."""
    wh = await bk.create_ledger(3, 3, 2, password=b"pw")
    await bounded(wh.append(b"x"))
    lost = cluster.bookie(wh.ensemble[0])
    vanish_keeping_registration(lost)
    await bounded(wh.append(b"y"))
    assert lost.bookie_id not in wh.ensemble
    lost.down = False
    return lost


@on_virtual_time
async def test_quarantine_is_shared_by_the_clients_writers() -> None:
    """A bookie that failed one writer is left out of the client's next new ensemble while
    enough others are there."""
    async with MemoryCluster(5) as cluster:
        bk = await cluster.client(FAST)
        lost = await fail_a_writer_and_come_back(cluster, bk)  # quarantined all the same
        for _ in range(10):
            other = await bk.create_ledger(3, 3, 2)
            assert lost.bookie_id not in other.ensemble
            await bounded(other.close())


@on_virtual_time
async def test_quarantine_time_zero_excludes_only_the_failing_bookie() -> None:
    """Without quarantine a bookie that failed a writer and is back is an ordinary candidate
    (each of 20 ensembles of 3 among 5 leaves it out with chance 2/5: (2/5)**20 < 1e-7)."""
    config = dataclasses.replace(FAST, bookie_quarantine_time_ms=0)
    async with MemoryCluster(5) as cluster:
        bk = await cluster.client(config)
        lost = await fail_a_writer_and_come_back(cluster, bk)
        chosen = set()
        for _ in range(20):
            other = await bk.create_ledger(3, 3, 2)
            chosen.update(other.ensemble)
            await bounded(other.close())
        assert lost.bookie_id in chosen


@on_virtual_time
async def test_a_client_warns_once_when_a_new_ledger_leaves_no_spare(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="bkeeper.client.context")

    def warnings() -> int:
        return sum("no spare" in r.getMessage() for r in caplog.records)

    async with MemoryCluster(4) as cluster:
        await cluster.crash(3, restart=False)
        bk = await cluster.client(FAST)
        for _ in range(3):
            await bounded((await bk.create_ledger(3, 3, 2)).close())
        await bounded((await bk.create_ledger(2, 2, 2)).close())
        assert warnings() == 1, "once, not per ledger"
        await cluster.start_bookie(cluster.bookies[3])
        await bounded((await bk.create_ledger(3, 3, 2)).close())
        assert warnings() == 1, "a spare now"
        await cluster.crash(3, restart=False)
        await bounded((await bk.create_ledger(3, 3, 2)).close())
        assert warnings() == 2, "the spare came and went"
        message = next(r.getMessage() for r in caplog.records if "no spare" in r.getMessage())
        assert "ensemble of 3 takes every writable bookie (3)" in message
