"""A cluster at a glance, from its metadata alone: what ``bkeeper shell clusterinfo`` prints.

The counts follow Apache BookKeeper's ``clusterinfo`` (and its HTTP ``cluster_info``): the
bookies the cluster knows are those with a cookie (``<root>/cookies/``) or a registration;
those registered are writable (``available/``) or read-only (``available/readonly/``); the
others are *unavailable* (stopped, lost, or decommissioned without deleting the cookie).
"""

from __future__ import annotations

from dataclasses import dataclass

from bkeeper.meta.cluster import ClusterMetadata

__all__ = ["ClusterSummary", "UNDER_REPLICATED_COUNTED_MAX", "cluster_summary"]

#: Under-replicated ledgers counted at most (a count past it is shown as "at least").
UNDER_REPLICATED_COUNTED_MAX = 100_000


@dataclass(frozen=True, slots=True)
class ClusterSummary:
    """``under_replicated``: ledgers marked under-replicated, counted up to
    :data:`UNDER_REPLICATED_COUNTED_MAX` (``under_replicated_capped`` when there are more);
    ``lost_bookie_recovery_delay_s``: None when never set (the auditor's own default)."""

    instance_id: str
    writable: tuple[str, ...]
    read_only: tuple[str, ...]
    unavailable: tuple[str, ...]
    auditor: str | None
    replication_enabled: bool
    under_replicated: int
    under_replicated_capped: bool
    lost_bookie_recovery_delay_s: int | None

    @property
    def total(self) -> int:
        return len(self.writable) + len(self.read_only) + len(self.unavailable)

    def as_json(self) -> dict[str, object]:
        """Apache BookKeeper's ``cluster_info`` fields, then bkeeper's own."""
        return {
            "auditorElected": self.auditor is not None,
            "auditorId": self.auditor or "",
            "clusterUnderReplicated": self.under_replicated > 0,
            "ledgerReplicationEnabled": self.replication_enabled,
            "totalBookiesCount": self.total,
            "writableBookiesCount": len(self.writable),
            "readonlyBookiesCount": len(self.read_only),
            "unavailableBookiesCount": len(self.unavailable),
            "instanceId": self.instance_id,
            "writableBookies": list(self.writable),
            "readonlyBookies": list(self.read_only),
            "unavailableBookies": list(self.unavailable),
            "underReplicatedLedgersCount": self.under_replicated,
            "underReplicatedLedgersCountCapped": self.under_replicated_capped,
            "lostBookieRecoveryDelaySeconds": self.lost_bookie_recovery_delay_s,
        }


async def cluster_summary(cluster: ClusterMetadata) -> ClusterSummary:
    """Read the summary of ``cluster`` (which must be formatted: ``require_formatted``)."""
    instance_id = await cluster.instance_id() or ""
    bookies = await cluster.registry.bookies()
    registered = bookies.writable | bookies.read_only
    known = set(await cluster.cookies.bookie_ids())
    urm = cluster.underreplication
    count, capped = 0, False
    async for _ledger_id in urm.ledger_ids():
        if count == UNDER_REPLICATED_COUNTED_MAX:
            capped = True
            break
        count += 1
    return ClusterSummary(
        instance_id=instance_id,
        writable=tuple(sorted(bookies.writable)),
        read_only=tuple(sorted(bookies.read_only)),
        unavailable=tuple(sorted(known - registered)),
        auditor=await urm.current_auditor(),
        replication_enabled=await urm.is_enabled(),
        under_replicated=count,
        under_replicated_capped=capped,
        lost_bookie_recovery_delay_s=await urm.lost_bookie_recovery_delay_s(),
    )
