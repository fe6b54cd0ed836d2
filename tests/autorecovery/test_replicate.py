"""The repair plan of a ledger (pure): fragments, targets, entries, and the CAS decision."""

from __future__ import annotations

import asyncio
import random

import pytest

from bkeeper.autorecovery.expected import expected_entries
from bkeeper.autorecovery.recovery_adds import THROTTLE_BURST_S, Throttle
from bkeeper.autorecovery.replicate import (
    Fragment,
    apply_plan,
    last_segment_lost,
    lost_bookies,
    plan_repair,
)
from bkeeper.common.errors import ConfigError, NotEnoughBookiesError
from bkeeper.meta.ledger_metadata import LedgerMetadata, LedgerState
from bkeeper.testing.clock import FakeClock
from bkeeper.wire.digest import DigestType

B = [f"b{i}:3181" for i in range(8)]


def meta(
    segments: dict[int, list[str]],
    write_quorum: int,
    *,
    last: int | None = None,
    state: LedgerState = LedgerState.CLOSED,
) -> LedgerMetadata:
    size = len(next(iter(segments.values())))
    value = LedgerMetadata(
        ensemble_size=size,
        write_quorum=write_quorum,
        ack_quorum=2,
        segments=segments,
        digest_type=DigestType.CRC32C,
        password=b"pw",
        state=state,
        last_entry_id=last if last is not None else -1,
    )
    return value


def test_full_copy_when_every_bookie_holds_every_entry() -> None:
    m = meta({0: B[:3]}, 3, last=99)
    plan = plan_repair(7, m, {B[1]}, B[:5], rng=random.Random(1))
    assert len(plan.fragments) == 1
    fragment = plan.fragments[0]
    assert (fragment.segment, fragment.position, fragment.lost) == (0, 1, B[1])
    assert fragment.target in (B[3], B[4])
    assert list(fragment.entry_ids) == list(range(100))
    assert plan.ensembles == {0: (B[0], fragment.target, B[2])}
    assert plan.replaced == {0: {B[1]: fragment.target}}
    assert plan.entries == 100
    assert not plan.needs_fencing


def test_striped_ledger_copies_the_lost_bookies_share_per_segment() -> None:
    m = meta({0: B[:5], 50: [B[0], B[1], B[2], B[3], B[5]]}, 3, last=119)
    plan = plan_repair(7, m, {B[2]}, B[:7], rng=random.Random(2))
    assert [f.segment for f in plan.fragments] == [0, 50]
    for fragment in plan.fragments:
        assert fragment.target not in m.segments[fragment.segment]
        assert fragment.target in (B[4], B[5], B[6])
    # exactly the entries the lost bookie held, segment by segment
    held = list(expected_entries(m, B[2], 119))
    assert [e for f in plan.fragments for e in f.entry_ids] == held
    assert all(e < 50 for e in plan.fragments[0].entry_ids)
    assert all(50 <= e <= 119 for e in plan.fragments[1].entry_ids)
    # entry e is on index b when (b - e) mod 5 < 3: index 2 holds 0, 1, 2, 5, 6, 7...
    assert list(plan.fragments[0].entry_ids)[:6] == [0, 1, 2, 5, 6, 7]


def test_two_lost_bookies_of_one_segment_get_two_different_targets() -> None:
    m = meta({0: B[:3]}, 3, last=9)
    for seed in range(20):
        plan = plan_repair(7, m, {B[0], B[2]}, B[:5], rng=random.Random(seed))
        targets = [f.target for f in plan.fragments]
        assert sorted(targets) == [B[3], B[4]]
        assert plan.ensembles[0] == (targets[0], B[1], targets[1])


def test_read_only_and_lost_bookies_are_never_targets() -> None:
    m = meta({0: B[:3]}, 3, last=9)
    # b3 is read-only (not in writable), b4 is lost itself though still registered writable
    for seed in range(20):
        plan = plan_repair(7, m, {B[0], B[4]}, [B[1], B[2], B[4], B[5]], rng=random.Random(seed))
        assert [f.target for f in plan.fragments] == [B[5]]


def test_not_enough_bookies_names_the_segment() -> None:
    m = meta({0: B[:3]}, 3, last=9)
    with pytest.raises(NotEnoughBookiesError, match=r"ledger 7, segment at entry 0: no bookie"):
        plan_repair(7, m, {B[0]}, B[:3])


def test_empty_segments_change_metadata_only_and_only_when_possible() -> None:
    # the second segment starts past the last entry: it holds nothing
    m = meta({0: B[:3], 10: [B[0], B[1], B[3]]}, 3, last=9)
    plan = plan_repair(7, m, {B[0]}, B[:5], rng=random.Random(3))
    by_segment = {f.segment: f for f in plan.fragments}
    assert list(by_segment[0].entry_ids) == list(range(10))
    assert list(by_segment[10].entry_ids) == []
    # no target for the empty segment (b1, b2 read-only; b3, b4 in it): skipped
    m2 = meta({0: B[:3], 10: [B[0], B[3], B[4]]}, 3, last=9)
    plan2 = plan_repair(7, m2, {B[0]}, [B[3], B[4]], rng=random.Random(3))
    assert [f.segment for f in plan2.fragments] == [0]
    assert plan2.ensembles.keys() == {0}


def test_empty_closed_ledger_needs_no_copy() -> None:
    m = meta({0: B[:3]}, 3, last=-1)
    plan = plan_repair(7, m, {B[0]}, B[:4])
    assert [(f.segment, list(f.entry_ids)) for f in plan.fragments] == [(0, [])]


def test_open_ledger_plans_only_the_finished_segments() -> None:
    m = meta({0: B[:3], 20: [B[3], B[1], B[2]]}, 3, state=LedgerState.OPEN)
    plan = plan_repair(7, m, {B[0]}, B[:6], rng=random.Random(4))
    assert [f.segment for f in plan.fragments] == [0]
    assert list(plan.fragments[0].entry_ids) == list(range(20))
    assert not plan.needs_fencing
    # lost in the last (open) segment: fence first, nothing planned there
    plan = plan_repair(7, m, {B[3]}, B[:6], rng=random.Random(4))
    assert plan.fragments == ()
    assert plan.needs_fencing
    assert last_segment_lost(m, {B[1]})
    assert not last_segment_lost(m, {B[0]})
    assert not last_segment_lost(meta({0: B[:3]}, 3, last=5), {B[0]})


def test_lost_bookies_are_the_unregistered_members() -> None:
    m = meta({0: B[:3], 5: [B[3], B[1], B[2]]}, 3, last=9)
    assert lost_bookies(m, [B[1], B[2]]) == (B[0], B[3])
    assert lost_bookies(m, B[:4]) == ()


def test_apply_plan_replaces_only_where_the_lost_bookie_still_is() -> None:
    m = meta({0: B[:3], 10: [B[0], B[1], B[3]]}, 3, last=19)
    fragments = [
        Fragment(0, 0, B[0], B[4], range(10)),
        Fragment(10, 0, B[0], B[5], range(10, 20)),
    ]
    new, applied, refused = apply_plan(m, fragments)
    assert new.segments[0] == (B[4], B[1], B[2])
    assert new.segments[10] == (B[5], B[1], B[3])
    assert applied == fragments and refused == []
    # someone replaced b0 in segment 10 meanwhile (by b6): that fragment needs nothing
    moved = m.__class__(**{**m.__dict__, "segments": {0: B[:3], 10: [B[6], B[1], B[3]]}})
    new, applied, refused = apply_plan(moved, fragments)
    assert new.segments[10] == (B[6], B[1], B[3])
    assert applied == fragments[:1] and refused == []
    # the target joined the ensemble meanwhile: refused, the ensemble stays valid
    joined = m.__class__(**{**m.__dict__, "segments": {0: [B[0], B[4], B[2]], 10: m.segments[10]}})
    new, applied, refused = apply_plan(joined, fragments)
    assert new.segments[0] == (B[0], B[4], B[2])
    assert applied == fragments[1:] and refused == fragments[:1]
    # nothing to apply: the same metadata back
    same, applied, refused = apply_plan(new, fragments[1:])
    assert same is new and applied == [] and refused == []


def test_throttle_spreads_bytes_over_time() -> None:
    clock = FakeClock()
    throttle = Throttle(1_000_000, clock)
    burst = int(1_000_000 * THROTTLE_BURST_S)
    assert throttle.delay_s(burst) == 0.0  # within the burst: no wait
    assert throttle.delay_s(1_000_000) == pytest.approx(1.0)  # a second's worth more
    clock.advance(1.0)
    assert throttle.delay_s(0) == 0.0  # caught up
    clock.advance(10.0)
    assert throttle.delay_s(500_000) == pytest.approx(0.5 - THROTTLE_BURST_S)  # no credit saved
    assert Throttle(0, clock).delay_s(10**9) == 0.0


async def test_throttle_window_holds_bytes_in_flight_under_its_max() -> None:
    throttle = Throttle(0, FakeClock(), bytes_in_flight_max=100)
    await throttle.admit(60, 30)
    second = asyncio.ensure_future(throttle.admit(60, 30))
    await asyncio.sleep(0)
    assert not second.done() and throttle.bytes_in_flight == 60  # 120 would pass the max
    throttle.release(60)
    await asyncio.wait_for(second, 30)
    assert throttle.bytes_in_flight == 60
    throttle.release(60)
    await throttle.admit(500, 30)  # bigger than the max: goes alone
    with pytest.raises(TimeoutError):
        await throttle.admit(1, 0.01)  # no answer comes: the sender gives up
    throttle.release(500)
    await Throttle(0, FakeClock()).admit(10**9, 0.01)  # 0: no window
    with pytest.raises(ConfigError, match="bytes_in_flight_max"):
        Throttle(0, FakeClock(), bytes_in_flight_max=-1)
