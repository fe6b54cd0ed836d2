"""Auto-recovery's metrics, in a :class:`MetricSet` the process running it serves.

* ``bkeeper_autorecovery_under_replicated_ledgers``: ledgers in the under-replication queue,
  as the auditor counted them last (it lists the queue every
  :data:`UNDER_REPLICATED_COUNT_INTERVAL_S` while it leads); 0 in a participant that is not
  the auditor (take the ``max`` over processes), with ``bkeeper_autorecovery_auditor`` 1 in
  the one that is.
* ``bkeeper_autorecovery_blocked_ledgers{reason=...}``: of those, the ledgers whose worker
  recorded why it could not repair them, by kind (``no_candidate``, ``awaiting_writer``,
  ... :class:`~bkeeper.autorecovery.replicate.BlockKind`), counted by the auditor like the
  gauge above (0 elsewhere); at most :data:`BLOCKED_READ_MAX` reasons read per count.
* ``bkeeper_autorecovery_placement_violations``: ledgers the auditor's last placement check
  found with write quorums on too few racks (-1 before its first check; 0 elsewhere).
* ``bkeeper_autorecovery_rereplicated_ledgers_total`` / ``..._bytes_total``: ledgers whose
  mark this participant's replication worker removed, and the entry bytes it copied (read
  from the worker's counters when collected).

A bookie running auto-recovery in its process adds this set to its own ``/metrics``
(``Bookie.add_metric_set``); ``bkeeper autorecovery`` serves it with ``--http-port``.
"""

from __future__ import annotations

from collections.abc import Callable

from bkeeper.autorecovery.replicate import BlockKind
from bkeeper.autorecovery.worker import WorkerStatus
from bkeeper.common.metrics import MetricSet

__all__ = ["BLOCKED_READ_MAX", "UNDER_REPLICATED_COUNT_INTERVAL_S", "AutoRecoveryMetrics"]

#: While leading, the auditor lists the under-replication queue this often for the gauge.
UNDER_REPLICATED_COUNT_INTERVAL_S = 5.0
#: Recorded reasons the auditor reads per count (the rest are not counted by kind).
BLOCKED_READ_MAX = 10_000


class AutoRecoveryMetrics:
    """One participant's metrics; ``under_replicated`` is set by its auditor."""

    def __init__(
        self,
        worker_status: Callable[[], WorkerStatus],
        is_auditor: Callable[[], bool],
        placement_violations: Callable[[], int | None] = lambda: None,
    ) -> None:
        self.metric_set = metrics = MetricSet()
        self.under_replicated = 0
        #: queued ledgers with a recorded reason, by its kind (set by the auditor)
        self.blocked: dict[str, int] = {}
        metrics.gauge(
            "bkeeper_autorecovery_under_replicated_ledgers",
            "Ledgers marked under-replicated, as the auditor last counted them (0 elsewhere).",
            read=lambda: float(self.under_replicated) if is_auditor() else 0.0,
        )
        metrics.gauge(
            "bkeeper_autorecovery_auditor",
            "1 in the process whose participant is the auditor, else 0.",
            read=lambda: 1.0 if is_auditor() else 0.0,
        )
        metrics.gauge(
            "bkeeper_autorecovery_placement_violations",
            "Ledgers the auditor's last placement check found on too few racks (-1: no check "
            "yet; 0 elsewhere).",
            read=lambda: _count_or_unknown(placement_violations()) if is_auditor() else 0.0,
        )
        for kind in BlockKind:
            metrics.gauge(
                "bkeeper_autorecovery_blocked_ledgers",
                "Under-replicated ledgers a worker could not repair, by why (the auditor's "
                "count; 0 elsewhere).",
                read=self._blocked_reader(str(kind), is_auditor),
                reason=str(kind),
            )
        ledgers = metrics.counter(
            "bkeeper_autorecovery_rereplicated_ledgers_total",
            "Ledgers re-replicated (their mark removed) by this participant's worker.",
        )
        copied = metrics.counter(
            "bkeeper_autorecovery_rereplicated_bytes_total",
            "Entry bytes copied by this participant's worker.",
        )

        def refresh() -> None:
            status = worker_status()
            ledgers.value = status.replicated
            copied.value = status.bytes_copied

        metrics.on_collect(refresh)

    def _blocked_reader(self, kind: str, is_auditor: Callable[[], bool]) -> Callable[[], float]:
        return lambda: float(self.blocked.get(kind, 0)) if is_auditor() else 0.0


def _count_or_unknown(count: int | None) -> float:
    return -1.0 if count is None else float(count)
