"""A writer's roll and timer decisions, pure (namedlog.core.rolling)."""

from __future__ import annotations

from bkeeper.namedlog import LogConfig
from bkeeper.namedlog.core import TICK_S_MAX, TICK_S_MIN, overtaken, roll_due, tick_s


def test_a_ledger_rolls_when_full_or_old_with_entries_never_old_and_empty() -> None:
    config = LogConfig(roll_bytes=1000, roll_age_ms=60_000)
    assert roll_due(config, length_bytes=1000, has_entries=True, age_s=0.0)
    assert not roll_due(config, length_bytes=999, has_entries=True, age_s=59.999)
    assert roll_due(config, length_bytes=999, has_entries=True, age_s=60.0)
    assert not roll_due(config, length_bytes=0, has_entries=False, age_s=3600.0)
    no_age = LogConfig(roll_bytes=1000, roll_age_ms=0)
    assert not roll_due(no_age, length_bytes=10, has_entries=True, age_s=1e9)


def test_the_timer_ticks_every_half_roll_age_within_its_bounds() -> None:
    assert tick_s(LogConfig(roll_age_ms=0)) == TICK_S_MAX
    assert tick_s(LogConfig(roll_age_ms=10)) == TICK_S_MIN
    assert tick_s(LogConfig(roll_age_ms=20_000)) == 10.0
    assert tick_s(LogConfig(roll_age_ms=10_000_000)) == TICK_S_MAX


def test_only_a_newer_recorded_term_overtakes_a_termed_writer() -> None:
    assert overtaken(3, 4)
    assert not overtaken(4, 4)
    assert not overtaken(None, 9)
    assert not overtaken(3, None)
