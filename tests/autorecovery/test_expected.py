"""Which entries a bookie should hold: segments and write-set striping (pure)."""

from __future__ import annotations

import random

import pytest

from bkeeper.autorecovery.expected import (
    Stripe,
    expected_entries,
    missing_entries,
    stripes_of,
)
from bkeeper.client.distribution import write_set
from bkeeper.meta import DigestType
from bkeeper.meta.ledger_metadata import LedgerMetadata

A, B, C, D, E = (f"10.0.0.{i}:3181" for i in range(1, 6))


def _meta(segments: dict[int, tuple[str, ...]], write_quorum: int, ack_quorum: int = 1):  # type: ignore[no-untyped-def]
    meta = LedgerMetadata.new(segments[0], write_quorum, ack_quorum, DigestType.CRC32C, b"pw")
    for first, ensemble in list(segments.items())[1:]:
        meta = meta.with_new_segment(first, ensemble)
    return meta


def test_no_striping_every_entry_of_the_bookie_segments() -> None:
    meta = _meta({0: (A, B, C), 10: (A, D, C)}, write_quorum=3)
    assert list(expected_entries(meta, A, 14)) == list(range(15))
    assert list(expected_entries(meta, B, 14)) == list(range(10))
    assert list(expected_entries(meta, D, 14)) == list(range(10, 15))
    assert list(expected_entries(meta, E, 14)) == []


def test_striping_follows_the_write_sets() -> None:
    meta = _meta({0: (A, B, C, D, E)}, write_quorum=2)
    # entry e goes to indexes e % 5 and (e + 1) % 5: A (index 0) holds 0, 4, 5, 9, 10, ...
    assert list(expected_entries(meta, A, 11)) == [0, 4, 5, 9, 10]
    assert stripes_of(meta, C, 11) == [Stripe(0, 11, 2, 5, 2)]


def test_segments_past_the_last_entry_and_an_empty_ledger_hold_nothing() -> None:
    meta = _meta({0: (A, B, C), 5: (D, B, C)}, write_quorum=3)
    assert list(expected_entries(meta, D, 4)) == []  # closed before the new segment's entry
    assert list(expected_entries(meta, A, -1)) == []
    assert stripes_of(meta, B, 7) == [Stripe(0, 4, 1, 3, 3), Stripe(5, 7, 1, 3, 3)]


def test_missing_entries() -> None:
    meta = _meta({0: (A, B, C, D)}, write_quorum=2)
    assert list(expected_entries(meta, B, 9)) == [0, 1, 4, 5, 8, 9]
    assert missing_entries(meta, B, 9, [0, 4, 5, 9, 99]) == [1, 8]
    assert missing_entries(meta, B, 9, {0, 1, 4, 5, 8, 9}) == []


@pytest.mark.parametrize("seed", range(10))
def test_expected_entries_agree_with_the_client_write_sets(seed: int) -> None:
    rng = random.Random(seed)
    bookies = [f"10.1.0.{i}:3181" for i in range(8)]
    size = rng.randrange(1, 6)
    write_quorum = rng.randrange(1, size + 1)
    segments = {0: tuple(rng.sample(bookies, size))}
    first = 0
    for _ in range(rng.randrange(3)):
        first += rng.randrange(1, 30)
        segments[first] = tuple(rng.sample(bookies, size))
    meta = _meta(segments, write_quorum)
    last = first + rng.randrange(-1, 30)
    for bookie in bookies:
        expected = [
            e
            for e in range(last + 1)
            if bookie in [meta.ensemble_for(e)[i] for i in write_set(e, size, write_quorum)]
        ]
        assert list(expected_entries(meta, bookie, last)) == expected
