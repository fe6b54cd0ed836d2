"""AutoRecoveryConfig refuses bad values with one error naming the field."""

from __future__ import annotations

import pytest

from bkeeper.autorecovery.config import AutoRecoveryConfig
from bkeeper.common.errors import ConfigError


def test_defaults_are_bookkeepers() -> None:
    config = AutoRecoveryConfig()
    assert config.lost_bookie_recovery_delay_s == 0
    assert config.bookie_check_interval_s == 86_400.0
    assert config.check_all_ledgers_interval_s == 604_800.0
    assert config.placement_check_interval_s == 0.0
    assert config.open_ledger_grace_period_ms == 30_000


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("lost_bookie_recovery_delay_s", -1, "must be an integer in 0..2147483647, got -1"),
        ("lost_bookie_recovery_delay_s", 1.5, "must be an integer in 0..2147483647, got 1.5"),
        ("bookie_check_interval_s", -1.0, "must be 0.0..3153600000.0, got -1.0"),
        ("check_all_ledgers_interval_s", "1", "must be 0.0..3153600000.0, got '1'"),
        ("placement_check_interval_s", True, "must be 0.0..3153600000.0, got True"),
        ("audit_metadata_reads_in_flight_max", 0, "must be a positive integer, got 0"),
        ("check_reads_in_flight_max", 0, "must be a positive integer, got 0"),
        ("ledgers_in_parallel", 0, "must be a positive integer, got 0"),
        ("entries_in_flight_max", -5, "must be a positive integer, got -5"),
        ("idle_poll_interval_ms", 0, "must be a positive integer, got 0"),
        ("rate_bytes_per_s", -1, "must be an integer >= 0, got -1"),
        ("open_ledger_grace_period_ms", -1, "must be an integer >= 0, got -1"),
        ("failed_ledger_retry_delay_ms", 2.5, "must be an integer >= 0, got 2.5"),
    ],
)
def test_a_bad_field_is_named(field: str, value: object, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        AutoRecoveryConfig(**{field: value})  # type: ignore[arg-type]
    assert str(raised.value) == f"{field}: {message}"
