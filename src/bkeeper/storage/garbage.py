"""What a garbage-collection pass does, decided purely from the entry logs' ledgers maps.

A log's *live bytes* are the record bytes of the ledgers in its map that the engine still
holds; its live ratio is live bytes over all its record bytes (an entry overwritten by a
later add still counts as live until compaction finds the index pointing elsewhere, as in
Apache BookKeeper). A pass:

1. removes the logs with no live bytes (their ledgers were all deleted);
2. compacts the logs whose live ratio is below the threshold of the kinds asked for (minor:
   ``minor_compaction_threshold``, major: ``major_compaction_threshold``; a threshold <= 0
   disables its kind): their live entries are copied to a new log and the old one goes.

Never the log being written. Order: normally the logs with the lowest live ratio first (the
most space for the least copying); on a full disk the logs with the fewest live bytes first,
because each copy needs that much free space before its old log can be removed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

__all__ = ["EntryLogUsage", "GcPlan", "GcResult", "plan_collection"]


@dataclass(frozen=True)
class EntryLogUsage:
    """An entry log's size and how much of it is live."""

    log_id: int
    total_bytes: int
    live_bytes: int

    @property
    def live_ratio(self) -> float:
        return self.live_bytes / self.total_bytes if self.total_bytes else 0.0


@dataclass(frozen=True)
class GcResult:
    """What one garbage-collection pass of the storage engine did."""

    minor: bool
    major: bool
    logs_removed: int
    logs_compacted: int
    bytes_freed: int
    bytes_copied: int
    entries_copied: int
    duration_s: float
    stopped: bool
    error: str = ""

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class GcPlan:
    remove: tuple[int, ...]
    compact: tuple[int, ...]


def plan_collection(
    usages: list[EntryLogUsage],
    *,
    exclude: frozenset[int],
    minor_threshold: float | None,
    major_threshold: float | None,
    disk_full: bool,
) -> GcPlan:
    """The logs to remove and the logs to compact (in order). A threshold of None (kind not
    asked for) or <= 0 (kind disabled) compacts nothing of that kind."""
    thresholds = [t for t in (minor_threshold, major_threshold) if t is not None and t > 0]
    threshold = max(thresholds, default=0.0)
    remove = []
    compact = []
    for usage in usages:
        if usage.log_id in exclude:
            continue
        if usage.live_bytes == 0:
            remove.append(usage)
        elif usage.live_ratio < threshold:
            compact.append(usage)
    if disk_full:
        compact.sort(key=lambda u: (u.live_bytes, u.log_id))
    else:
        compact.sort(key=lambda u: (u.live_ratio, u.log_id))
    return GcPlan(tuple(u.log_id for u in remove), tuple(u.log_id for u in compact))
