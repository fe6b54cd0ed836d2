"""When a garbage-collection pass compacts: the pure schedule of minor and major compaction.

Every pass of the bookie's garbage collector (:mod:`bkeeper.server.garbage`) deletes ledgers
whose metadata is gone and removes entry logs that hold nothing live; this module decides
which compactions the pass also runs. Time is an argument (monotonic seconds): nothing here
reads a clock.

Rules, for a pass starting at ``now``:

===========  ==============================================================================
kind         runs when
===========  ==============================================================================
major        forced; or enabled (interval > 0), not suspended, and either its interval has
             passed since the last major or the disk is full
minor        major does not run in this pass, and: forced; or enabled, not suspended, and
             either its interval has passed since the last minor or the disk is full
===========  ==============================================================================

* "The disk is full" counts only when compaction is allowed on a full disk
  (``StorageConfig.gc_allowed_on_full_disk``): compaction is how a full bookie frees space,
  so it then runs at every pass, without waiting for its interval. When it is not allowed,
  no compaction runs on a full disk, forced or not (it writes, and there is no room).
* A forced kind runs even when suspended, as Apache BookKeeper's forced GC does: suspending
  stops the schedule, while an operator's explicit request (``bkeeper shell gc --major``) is
  obeyed. A full disk does not override a suspension: it is no operator's request.
* A major compaction compacts every log a minor one would (its threshold is the higher), so
  it resets both intervals; a minor one resets its own.
* Intervals count from the start of the last pass that ran that kind to its end (a pass cut
  short by shutdown, or failed, does not count), and from the start of the collector at
  first: a freshly started bookie compacts after one interval, not at once.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CompactionPlan", "CompactionSchedule"]


@dataclass(frozen=True)
class CompactionPlan:
    """The compactions one pass runs."""

    minor: bool
    major: bool


class CompactionSchedule:
    """Intervals, last runs and suspensions of minor and major compaction.

    An interval of 0 disables that kind (it still runs when forced).
    """

    def __init__(self, minor_interval_s: float, major_interval_s: float, now: float) -> None:
        self.minor_interval_s = minor_interval_s
        self.major_interval_s = major_interval_s
        self.last_minor_s = now
        self.last_major_s = now
        self.suspended_minor = False
        self.suspended_major = False

    def suspend(self, *, major: bool, minor: bool) -> None:
        """Stop scheduling the kinds named (forced runs still happen)."""
        self.suspended_major = self.suspended_major or major
        self.suspended_minor = self.suspended_minor or minor

    def resume(self, *, major: bool, minor: bool) -> None:
        """Schedule the kinds named again."""
        self.suspended_major = self.suspended_major and not major
        self.suspended_minor = self.suspended_minor and not minor

    def plan(
        self,
        now: float,
        *,
        force_minor: bool = False,
        force_major: bool = False,
        disk_full: bool = False,
        allowed_on_full_disk: bool = True,
    ) -> CompactionPlan:
        """The compactions a pass starting at ``now`` runs (see the module's rules)."""
        if disk_full and not allowed_on_full_disk:
            return CompactionPlan(minor=False, major=False)
        major = force_major or self._scheduled(
            now, self.major_interval_s, self.last_major_s, self.suspended_major, disk_full
        )
        minor = not major and (
            force_minor
            or self._scheduled(
                now, self.minor_interval_s, self.last_minor_s, self.suspended_minor, disk_full
            )
        )
        return CompactionPlan(minor=minor, major=major)

    def completed(self, plan: CompactionPlan, started_s: float) -> None:
        """Record that a pass started at ``started_s`` ran ``plan`` to its end."""
        if plan.major:
            self.last_major_s = max(self.last_major_s, started_s)
        if plan.major or plan.minor:
            self.last_minor_s = max(self.last_minor_s, started_s)

    @staticmethod
    def _scheduled(
        now: float, interval_s: float, last_s: float, suspended: bool, disk_full: bool
    ) -> bool:
        if interval_s <= 0 or suspended:
            return False
        return disk_full or now - last_s >= interval_s
