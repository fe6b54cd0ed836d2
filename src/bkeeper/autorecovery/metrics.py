"""Auto-recovery's metrics, in a :class:`MetricSet` the process running it serves.

* ``bkeeper_autorecovery_under_replicated_ledgers``: ledgers in the under-replication queue,
  as the auditor counted them last (it lists the queue every
  :data:`UNDER_REPLICATED_COUNT_INTERVAL_S` while it leads); 0 in a participant that is not
  the auditor (take the ``max`` over processes), with ``bkeeper_autorecovery_auditor`` 1 in
  the one that is.
* ``bkeeper_autorecovery_rereplicated_ledgers_total`` / ``..._bytes_total``: ledgers whose
  mark this participant's replication worker removed, and the entry bytes it copied (read
  from the worker's counters when collected).

A bookie running auto-recovery in its process adds this set to its own ``/metrics``
(``Bookie.add_metric_set``); ``bkeeper autorecovery`` serves it with ``--http-port``.
"""

from __future__ import annotations

from collections.abc import Callable

from bkeeper.autorecovery.worker import WorkerStatus
from bkeeper.common.metrics import MetricSet

__all__ = ["UNDER_REPLICATED_COUNT_INTERVAL_S", "AutoRecoveryMetrics"]

#: While leading, the auditor lists the under-replication queue this often for the gauge.
UNDER_REPLICATED_COUNT_INTERVAL_S = 5.0


class AutoRecoveryMetrics:
    """One participant's metrics; ``under_replicated`` is set by its auditor."""

    def __init__(
        self, worker_status: Callable[[], WorkerStatus], is_auditor: Callable[[], bool]
    ) -> None:
        self.metric_set = metrics = MetricSet()
        self.under_replicated = 0
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
