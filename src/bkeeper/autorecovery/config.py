"""The settings of auto-recovery: the auditor's, then the replication worker's.

Frozen and validated at construction (a bad value is one ``ConfigError`` naming the field).
The lost-bookie delay here is only the default: the cluster's ``lostBookieRecoveryDelay`` node,
when present, wins (it can be changed at run time).
"""

from __future__ import annotations

from dataclasses import dataclass

from bkeeper.common.validate import (
    check_int_in_range,
    check_non_negative_ints,
    check_number_in_range,
    check_positive_ints,
)

__all__ = ["AutoRecoveryConfig"]

#: Java's Integer.MAX_VALUE: the delay node holds a Java int.
_DELAY_S_MAX = (1 << 31) - 1

#: A century: the largest interval accepted (a typo guard, not a policy).
_INTERVAL_S_MAX = 100 * 365 * 86_400.0


@dataclass(frozen=True)
class AutoRecoveryConfig:
    """Auditor and replication worker settings; every limit is named here."""

    # --- auditor ---
    lost_bookie_recovery_delay_s: int = 0  # default when the ZK node is absent
    bookie_check_interval_s: float = 86_400.0  # audit all ledgers against live bookies; 0: off
    check_all_ledgers_interval_s: float = 604_800.0  # probe first/last entries; 0: off
    placement_check_interval_s: float = 0.0  # 0: off
    # the placement check marks the ledgers it finds, naming the bookies to move, and the
    # workers relocate them (placement repair); off: it only reports them
    placement_repair: bool = True
    replicas_check_interval_s: float = 0.0  # list every replica's entries; 0: off (as Java)
    # a ledger a replica could not list for is asked again this many times in the same check
    # (a timeout under load, a bookie restarting), after this pause each
    replicas_recheck_rounds: int = 3
    replicas_recheck_pause_s: float = 5.0
    audit_metadata_reads_in_flight_max: int = 32  # ledger metadata reads during an audit
    check_reads_in_flight_max: int = 64  # probe reads of check-all-ledgers
    audit_retry_delay_s: float = 10.0  # a failed audit pass (metadata unreachable) waits this
    # --- worker (H2) ---
    ledgers_in_parallel: int = 8  # ledgers one worker repairs at once
    entries_in_flight_max: int = 256  # recovery adds outstanding per ledger
    rate_bytes_per_s: int = 0  # re-replication throttle, 0: none
    bytes_in_flight_max: int = 2 * 1024 * 1024  # recovery adds unanswered per worker, 0: none
    open_ledger_grace_period_ms: int = 30_000  # BookKeeper's openLedgerRereplicationGracePeriod
    failed_ledger_retry_delay_ms: int = 10_000  # a ledger that failed waits this before retry
    idle_poll_interval_ms: int = 1_000  # queue empty / disabled: look again after

    def __post_init__(self) -> None:
        check_int_in_range(
            "lost_bookie_recovery_delay_s", self.lost_bookie_recovery_delay_s, 0, _DELAY_S_MAX
        )
        for name in (
            "bookie_check_interval_s",
            "check_all_ledgers_interval_s",
            "placement_check_interval_s",
            "replicas_check_interval_s",
            "replicas_recheck_pause_s",
            "audit_retry_delay_s",
        ):
            check_number_in_range(name, getattr(self, name), 0.0, _INTERVAL_S_MAX)
        check_positive_ints(
            self,
            "audit_metadata_reads_in_flight_max",
            "check_reads_in_flight_max",
            "ledgers_in_parallel",
            "entries_in_flight_max",
            "idle_poll_interval_ms",
        )
        check_non_negative_ints(
            self,
            "replicas_recheck_rounds",
            "rate_bytes_per_s",
            "bytes_in_flight_max",
            "open_ledger_grace_period_ms",
            "failed_ledger_retry_delay_ms",
        )
