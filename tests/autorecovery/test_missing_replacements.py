"""The decision taken before any fencing (pure): can every lost bookie that must be replaced
be replaced by a writable bookie? An open ledger with nowhere to copy is never fenced."""

from __future__ import annotations

import random

from bkeeper.autorecovery.replicate import missing_replacements, plan_repair
from bkeeper.meta.ledger_metadata import LedgerMetadata, LedgerState
from bkeeper.wire.digest import DigestType

B = [f"b{i}:3181" for i in range(8)]


def meta(
    segments: dict[int, list[str]],
    write_quorum: int,
    *,
    last: int = -1,
    state: LedgerState = LedgerState.CLOSED,
) -> LedgerMetadata:
    return LedgerMetadata(
        ensemble_size=len(next(iter(segments.values()))),
        write_quorum=write_quorum,
        ack_quorum=2,
        segments=segments,
        digest_type=DigestType.CRC32C,
        password=b"pw",
        state=state,
        last_entry_id=last,
    )


def test_open_ledger_on_every_writable_bookie_has_no_candidate() -> None:
    """The sandbox's case: E3/Qw3 on 3 bookies, one lost, the other two writable."""
    m = meta({0: B[:3]}, 3, state=LedgerState.OPEN)
    why = missing_replacements(m, {B[2]}, B[:2])
    assert why == (
        f"no candidate bookie for {B[2]} (segment at entry 0): 2 writable, 2 already in the "
        "ensemble"
    )


def test_open_ledger_with_a_spare_bookie_can_be_repaired() -> None:
    m = meta({0: B[:3]}, 3, state=LedgerState.OPEN)
    assert missing_replacements(m, {B[2]}, [*B[:2], B[5]]) is None


def test_open_ledger_last_segment_counts_even_before_any_entry() -> None:
    """Its writer may be adding entries there: fencing it to find no target stops the writer
    for nothing, so the empty open segment needs a candidate too."""
    m = meta({0: B[:3], 10: [B[0], B[1], B[3]]}, 3, state=LedgerState.IN_RECOVERY)
    why = missing_replacements(m, {B[3]}, [B[0], B[1]])
    assert why is not None and "segment at entry 10" in why
    assert why.endswith("2 writable, 2 already in the ensemble")
    assert missing_replacements(m, {B[3]}, [B[0], B[1], B[2]]) is None


def test_closed_empty_segment_needs_no_candidate() -> None:
    """A closed ledger's segment past its last entry holds nothing: nothing to lose."""
    m = meta({0: B[:3], 10: [B[0], B[1], B[3]]}, 3, last=9)
    assert missing_replacements(m, {B[3]}, B[:3]) is None


def test_striped_segment_where_the_lost_bookie_holds_nothing() -> None:
    """E5/Qw2, entries 0..0: only the bookies at index 0 and 1 hold anything."""
    m = meta({0: B[:5]}, 2, last=0)
    assert missing_replacements(m, {B[4]}, B[:4]) is None
    why = missing_replacements(m, {B[1]}, [B[0], B[2], B[3], B[4]])
    assert why is not None and why.startswith(f"no candidate bookie for {B[1]} ")


def test_two_lost_in_one_segment_need_two_candidates() -> None:
    m = meta({0: B[:3]}, 3, last=5)
    why = missing_replacements(m, {B[1], B[2]}, [B[0], B[5]])
    assert why is not None and f"for {B[1]}, {B[2]}" in why
    assert missing_replacements(m, {B[1], B[2]}, [B[0], B[5], B[6]]) is None


def test_a_registered_bookie_lacking_entries_is_no_candidate_for_itself() -> None:
    """A lost bookie still registered (it lacks entries) is counted, and never a target."""
    m = meta({0: B[:3]}, 3, last=5)
    why = missing_replacements(m, {B[2]}, B[:3])
    assert why is not None and why.endswith(
        "3 writable, 2 already in the ensemble, 1 lacking entries"
    )


def test_the_decision_agrees_with_the_plan() -> None:
    """Whenever the decision says a closed ledger can be repaired, the plan finds targets
    (and the other way round), over random ensembles, losses and writable sets."""
    rng = random.Random(7)
    for _ in range(300):
        size = rng.randint(2, 5)
        quorum = rng.randint(2, size)
        first = rng.sample(B, size)
        second = rng.sample(B, size)
        m = meta({0: first, 8: second}, quorum, last=rng.randint(-1, 14))
        lost = set(rng.sample(B, rng.randint(1, 2)))
        writable = [b for b in B if rng.random() < 0.6]
        why = missing_replacements(m, lost, writable)
        try:
            plan_repair(1, m, lost, writable, rng=rng)
            planned = True
        except Exception:
            planned = False
        assert (why is None) == planned, (m, lost, writable, why)
