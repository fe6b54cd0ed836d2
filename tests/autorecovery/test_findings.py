"""The auditor's pure decisions: which ledgers to mark, which probe reads to make, which lost
bookies are due."""

from __future__ import annotations

import itertools

from bkeeper.autorecovery.expected import expected_entries
from bkeeper.autorecovery.findings import (
    FragmentCheck,
    LossTracker,
    bookies_holding_entries,
    fragment_checks,
    ledgers_to_mark,
    placement_violations,
)
from bkeeper.client.placement import Domains
from bkeeper.meta import DigestType
from bkeeper.meta.ledger_metadata import LedgerMetadata, LedgerState

A, B, C, D, E, F = (f"10.0.0.{i}:3181" for i in range(1, 7))


def _meta(
    segments: dict[int, tuple[str, ...]],
    write_quorum: int,
    *,
    last: int | None = None,
    state: LedgerState | None = None,
) -> LedgerMetadata:
    meta = LedgerMetadata.new(segments[0], write_quorum, 1, DigestType.CRC32C, b"pw")
    for first, ensemble in list(segments.items())[1:]:
        meta = meta.with_new_segment(first, ensemble)
    if last is not None:
        meta = meta.closed(last, 10 * (last + 1))
    if state is not None:
        meta = meta.with_state(state)
    return meta


def test_closed_ledger_marked_for_its_lost_bookies() -> None:
    closed = _meta({0: (A, B, C), 5: (A, D, C)}, 3, last=9)
    assert ledgers_to_mark([(1, closed)], {A, B, C, D}) == {}
    assert ledgers_to_mark([(1, closed)], {A, C}) == {1: (B, D)}
    assert ledgers_to_mark([(1, closed)], []) == {1: (A, B, C, D)}


def test_closed_ledger_empty_segment_does_not_count() -> None:
    # closed at entry 4: the segment from 5 on (with D) holds nothing
    closed = _meta({0: (A, B, C), 5: (A, D, C)}, 3, last=4)
    assert ledgers_to_mark([(1, closed)], {A, B, C}) == {}
    assert ledgers_to_mark([(1, closed)], {A, C, D}) == {1: (B,)}
    # a decommission wants the reference gone too
    assert ledgers_to_mark([(1, closed)], {A, B, C}, empty_segments=True) == {1: (D,)}
    # an empty closed ledger holds nothing anywhere
    empty = _meta({0: (A, B, C)}, 3, last=-1)
    assert ledgers_to_mark([(2, empty)], set()) == {}
    assert ledgers_to_mark([(2, empty)], set(), empty_segments=True) == {2: (A, B, C)}


def test_open_and_in_recovery_ledgers_count_every_segment() -> None:
    for state in (LedgerState.OPEN, LedgerState.IN_RECOVERY):
        ledger = _meta({0: (A, B, C), 5: (A, D, C)}, 3, state=state)
        assert ledgers_to_mark([(3, ledger)], {A, B, C}) == {3: (D,)}
        assert ledgers_to_mark([(3, ledger)], {A, C, D}) == {3: (B,)}


def test_striped_bookie_without_entries_does_not_count() -> None:
    # E5/Qw2, one entry (0): it goes to indexes 0 and 1 only (A, B)
    one_entry = _meta({0: (A, B, C, D, E)}, 2, last=0)
    assert bookies_holding_entries(one_entry) == {A, B}
    assert ledgers_to_mark([(4, one_entry)], {A, B}) == {}
    assert ledgers_to_mark([(4, one_entry)], {B, C, D, E}) == {4: (A,)}
    # entries 0..3: indexes {0,1},{1,2},{2,3},{3,4}: all five hold something
    four = _meta({0: (A, B, C, D, E)}, 2, last=3)
    assert bookies_holding_entries(four) == {A, B, C, D, E}


def test_read_only_bookies_are_alive() -> None:
    writable, read_only = {A, B}, {C}
    closed = _meta({0: (A, B, C)}, 3, last=9)
    assert ledgers_to_mark([(1, closed)], writable | read_only) == {}


def test_several_ledgers_sorted_and_deduplicated() -> None:
    ledgers = [
        (10, _meta({0: (A, B, C), 3: (D, B, C), 6: (D, E, C)}, 2, last=8)),
        (11, _meta({0: (E, F, A)}, 3, last=0)),
        (12, _meta({0: (A, B, C)}, 2, last=2)),
    ]
    assert ledgers_to_mark(ledgers, {C, F}) == {10: (A, B, D, E), 11: (A, E), 12: (A, B)}


def test_matches_expected_entries_exhaustively() -> None:
    """For every small shape, a bookie counts exactly when it is expected to hold an entry."""
    bookies = (A, B, C, D, E)
    for size, quorum, last, split in itertools.product(
        range(1, 5), range(1, 5), range(-1, 7), range(1, 6)
    ):
        if quorum > size:
            continue
        segments = {0: bookies[:size]}
        if split <= 4:  # a second segment with the last bookie swapped for F
            segments[split] = (*bookies[: size - 1], F)
        meta = _meta(segments, quorum, last=last)
        expected = {b for b in (*bookies, F) if list(expected_entries(meta, b, last))}
        assert bookies_holding_entries(meta) == expected, (size, quorum, last, split)


def test_fragment_checks_first_and_last_held_entry() -> None:
    closed = _meta({0: (A, B, C), 5: (A, D, C)}, 3, last=7)
    assert fragment_checks(1, closed) == [
        FragmentCheck(1, A, 0, (0, 4)),
        FragmentCheck(1, B, 0, (0, 4)),
        FragmentCheck(1, C, 0, (0, 4)),
        FragmentCheck(1, A, 5, (5, 7)),
        FragmentCheck(1, D, 5, (5, 7)),
        FragmentCheck(1, C, 5, (5, 7)),
    ]


def test_fragment_checks_striped() -> None:
    # E4/Qw2 over entries 0..9: index i holds e with (i - e) % 4 < 2
    closed = _meta({0: (A, B, C, D)}, 2, last=9)
    assert fragment_checks(2, closed) == [
        FragmentCheck(2, A, 0, (0, 8)),  # 0, 3, 4, 7, 8
        FragmentCheck(2, B, 0, (0, 9)),  # 0, 1, 4, 5, 8, 9
        FragmentCheck(2, C, 0, (1, 9)),  # 1, 2, 5, 6, 9
        FragmentCheck(2, D, 0, (2, 7)),  # 2, 3, 6, 7
    ]
    # one entry in a segment: only its write set is probed, once
    short = _meta({0: (A, B, C, D), 1: (E, B, C, D)}, 2, last=1)
    assert fragment_checks(3, short) == [
        FragmentCheck(3, A, 0, (0,)),
        FragmentCheck(3, B, 0, (0,)),
        FragmentCheck(3, B, 1, (1,)),
        FragmentCheck(3, C, 1, (1,)),
    ]


def test_fragment_checks_agree_with_expected_entries() -> None:
    bookies = (A, B, C, D, E)
    for size, quorum, last in itertools.product(range(1, 6), range(1, 6), range(-1, 12)):
        if quorum > size:
            continue
        meta = _meta({0: bookies[:size], 4: (*bookies[1:size], F)}, quorum, last=last)
        for check in fragment_checks(9, meta):
            held = [
                e
                for e in expected_entries(meta, check.bookie, last)
                if meta.ensemble_for(e) == meta.segments[check.segment_first]
                and e >= check.segment_first
            ]
            assert check.entry_ids == tuple(dict.fromkeys((held[0], held[-1])))
        probed = {(c.bookie, c.segment_first) for c in fragment_checks(9, meta)}
        holding = {
            (b, first)
            for first in meta.segments
            for b in meta.segments[first]
            if any(
                e >= first and meta.ensemble_for(e) == meta.segments[first]
                for e in expected_entries(meta, b, last)
            )
        }
        assert probed == holding, (size, quorum, last)


def test_fragment_checks_of_open_ledgers() -> None:
    open_ledger = _meta({0: (A, B, C), 5: (A, D, C)}, 3)
    # without a known LAC only the complete segments are probed
    assert fragment_checks(4, open_ledger) == [
        FragmentCheck(4, A, 0, (0, 4)),
        FragmentCheck(4, B, 0, (0, 4)),
        FragmentCheck(4, C, 0, (0, 4)),
    ]
    assert fragment_checks(4, open_ledger, last_entry_id=6)[3:] == [
        FragmentCheck(4, A, 5, (5, 6)),
        FragmentCheck(4, D, 5, (5, 6)),
        FragmentCheck(4, C, 5, (5, 6)),
    ]
    assert fragment_checks(5, _meta({0: (A, B, C)}, 3)) == []
    # a LAC behind the last segment's start: the complete segments are still probed
    assert fragment_checks(4, open_ledger, last_entry_id=2) == fragment_checks(4, open_ledger)
    # a closed ledger ignores the hint: its last entry is known
    assert fragment_checks(6, _meta({0: (A,)}, 1, last=0), last_entry_id=50) == [
        FragmentCheck(6, A, 0, (0,))
    ]


def test_loss_tracker_waits_out_the_delay() -> None:
    tracker = LossTracker()
    tracker.update({A, B, C}, now=0.0)
    assert tracker.due(0.0, 30.0) == [] and tracker.next_due(30.0) is None
    tracker.update({A, C}, now=10.0)
    tracker.update({A}, now=20.0)
    assert tracker.next_due(30.0) == 40.0
    assert tracker.due(39.9, 30.0) == []
    assert tracker.due(40.0, 30.0) == [B]
    assert tracker.due(50.0, 30.0) == [B, C]
    assert tracker.due(20.0, 0.0) == [B, C]  # the delay shortened at run time
    tracker.handled([B])
    tracker.update({A}, now=60.0)
    assert tracker.due(100.0, 30.0) == [C]  # B is not lost again until seen again


def test_loss_tracker_forgets_a_bookie_back_in_time() -> None:
    tracker = LossTracker()
    tracker.update({A, B}, now=0.0)
    tracker.update({A}, now=1.0)
    tracker.update({A, B}, now=2.0)
    assert tracker.due(100.0, 0.0) == [] and tracker.next_due(0.0) is None
    tracker.update({A}, now=5.0)  # lost again: the delay starts over
    assert tracker.due(34.0, 30.0) == [] and tracker.due(35.0, 30.0) == [B]
    tracker.handled([B])
    tracker.update({A, B}, now=40.0)
    tracker.update({A}, now=41.0)
    assert tracker.due(41.0, 0.0) == [B]  # back and lost again: tracked again


def test_loss_tracker_never_seen_is_not_tracked() -> None:
    tracker = LossTracker()
    tracker.update(set(), now=0.0)
    tracker.update({D}, now=1.0)
    assert tracker.due(100.0, 0.0) == []


def test_placement_violations_per_write_set() -> None:
    racks = Domains({A: "/r1", B: "/r1", C: "/r2", D: "/r2", E: "/r3"})
    # E3/Qw2: write sets {0,1}, {1,2}, {2,0}; A and B share r1
    bad = _meta({0: (A, B, C), 5: (A, C, E)}, 2, last=9)
    assert placement_violations(bad, racks, racks_available=3) == (0,)
    # with one rack up, nothing better was possible
    assert placement_violations(bad, racks, racks_available=1) == ()
    # E3/Qw3: one write set, the whole ensemble; two racks among three bookies meet the
    # default of two racks per write quorum, not three
    whole = _meta({0: (A, C, E), 3: (A, B, C)}, 3, last=9)
    assert placement_violations(whole, racks, racks_available=3) == ()
    three = Domains(racks.locations, min_racks=3)
    assert placement_violations(whole, three, racks_available=3) == (3,)
    assert placement_violations(whole, three, racks_available=2) == ()
    # E4/Qw2 striped: sets {A,C} {C,B} {B,D} {D,A}: all on two racks
    striped = _meta({0: (A, C, B, D)}, 2, last=9)
    assert placement_violations(striped, racks, racks_available=3) == ()
    # bookies without a rack are on the default rack together
    assert placement_violations(_meta({0: (F, "x:1")}, 2, last=0), racks, 3) == (0,)
    assert placement_violations(_meta({0: (F, "x:1")}, 2, last=0), Domains(), 1) == ()
