"""The pure compaction schedule of the garbage collector, on a fake clock."""

from __future__ import annotations

from bkeeper.server.gc_schedule import CompactionPlan, CompactionSchedule
from bkeeper.testing.clock import FakeClock

NONE = CompactionPlan(minor=False, major=False)
MINOR = CompactionPlan(minor=True, major=False)
MAJOR = CompactionPlan(minor=False, major=True)


def run(schedule: CompactionSchedule, clock: FakeClock, **flags: bool) -> CompactionPlan:
    """Plan a pass now and record it as run to its end."""
    plan = schedule.plan(clock.monotonic(), **flags)
    schedule.completed(plan, clock.monotonic())
    return plan


def test_each_kind_runs_once_its_interval_has_passed_since_the_last() -> None:
    clock = FakeClock()
    schedule = CompactionSchedule(60.0, 600.0, clock.monotonic())
    assert run(schedule, clock) == NONE  # a fresh bookie waits one interval
    clock.advance(59.9)
    assert run(schedule, clock) == NONE
    clock.advance(0.1)
    assert run(schedule, clock) == MINOR
    clock.advance(30)
    assert run(schedule, clock) == NONE
    clock.advance(30)
    assert run(schedule, clock) == MINOR
    clock.advance(540)  # 600 s since the start: major, which counts as a minor too
    assert run(schedule, clock) == MAJOR
    clock.advance(59)
    assert run(schedule, clock) == NONE
    clock.advance(1)
    assert run(schedule, clock) == MINOR


def test_a_pass_that_did_not_complete_leaves_the_kind_due() -> None:
    clock = FakeClock()
    schedule = CompactionSchedule(60.0, 0, clock.monotonic())
    clock.advance(60)
    assert schedule.plan(clock.monotonic()) == MINOR  # not completed: stopped or failed
    clock.advance(1)
    assert run(schedule, clock) == MINOR
    assert run(schedule, clock) == NONE


def test_an_interval_of_0_disables_the_schedule_but_not_a_forced_run() -> None:
    clock = FakeClock()
    schedule = CompactionSchedule(0, 0, clock.monotonic())
    clock.advance(10**9)
    assert run(schedule, clock) == NONE
    assert run(schedule, clock, disk_full=True) == NONE
    assert run(schedule, clock, force_minor=True) == MINOR
    assert run(schedule, clock, force_major=True) == MAJOR
    assert run(schedule, clock, force_major=True, force_minor=True) == MAJOR


def test_suspended_kinds_are_not_scheduled_but_forced_runs_happen() -> None:
    clock = FakeClock()
    schedule = CompactionSchedule(60.0, 600.0, clock.monotonic())
    schedule.suspend(major=True, minor=False)
    clock.advance(600)
    assert run(schedule, clock) == MINOR  # major due, but suspended
    schedule.suspend(major=False, minor=True)
    assert (schedule.suspended_major, schedule.suspended_minor) == (True, True)
    clock.advance(600)
    assert run(schedule, clock) == NONE
    assert run(schedule, clock, disk_full=True) == NONE  # a full disk is no operator
    assert run(schedule, clock, force_major=True) == MAJOR
    clock.advance(600)
    schedule.resume(major=True, minor=False)
    assert (schedule.suspended_major, schedule.suspended_minor) == (False, True)
    assert run(schedule, clock) == MAJOR
    schedule.resume(major=False, minor=True)
    clock.advance(60)
    assert run(schedule, clock) == MINOR


def test_a_full_disk_compacts_at_every_pass_when_allowed_and_never_when_not() -> None:
    clock = FakeClock()
    schedule = CompactionSchedule(60.0, 600.0, clock.monotonic())
    assert run(schedule, clock, disk_full=True) == MAJOR
    assert run(schedule, clock, disk_full=True) == MAJOR
    schedule.suspend(major=True, minor=False)
    assert run(schedule, clock, disk_full=True) == MINOR
    schedule.resume(major=True, minor=False)
    clock.advance(600)
    assert run(schedule, clock, disk_full=True, allowed_on_full_disk=False) == NONE
    assert (
        schedule.plan(
            clock.monotonic(),
            force_major=True,
            force_minor=True,
            disk_full=True,
            allowed_on_full_disk=False,
        )
        == NONE
    )  # compaction writes: no room for it, forced or not
    assert run(schedule, clock) == MAJOR  # still due once the disk has room
