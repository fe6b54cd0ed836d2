"""The member's pure core (:mod:`bkeeper.statemachine.core`): events in, actions out, time as
an argument. No loop, no sockets, no clock."""

from __future__ import annotations

import pytest

from bkeeper.statemachine.core import (
    LEASE_DRIFT,
    Apply,
    CheckStall,
    CoreConfig,
    FailPending,
    Lead,
    LeaseAnswer,
    MemberCore,
    OpenWriter,
    Phase,
    Resign,
    TakeSnapshot,
    WaitLease,
)

Pos = tuple[int, int]


def leader(config: CoreConfig, now_s: float = 100.0) -> MemberCore[Pos]:
    core: MemberCore[Pos] = MemberCore(config)
    assert core.elected(7) == [OpenWriter(7)]
    actions = core.writer_opened(now_s, None)
    if config.read_lease_s:
        assert actions == [WaitLease(now_s + config.read_lease_s)]
        actions = core.lease_waited(now_s + config.read_lease_s)
    assert actions == [Lead()]
    return core


def test_election_catch_up_then_lead() -> None:
    core: MemberCore[Pos] = MemberCore(CoreConfig())
    assert (core.phase, core.role) == (Phase.FOLLOWING, "following")
    assert core.record_read((1, 0), [b"a"], 0.0) == [Apply((1, 0), [b"a"])]
    assert core.elected(3) == [OpenWriter(3)]
    assert (core.phase, core.role, core.term) == (Phase.OPENING, "following", 3)
    assert core.writer_opened(10.0, (1, 2)) == []  # the log ends past what was applied
    assert (core.phase, core.role) == (Phase.CATCHUP, "catchup")
    assert core.record_read((1, 0), [b"a"], 10.1) == []  # applied already: skipped
    assert core.record_read((1, 1), [], 10.2) == [Apply((1, 1), [])]  # a barrier
    assert core.phase is Phase.CATCHUP
    assert core.record_read((1, 2), [b"b", b"c"], 10.3) == [Apply((1, 2), [b"b", b"c"]), Lead()]
    assert (core.phase, core.role) == (Phase.LEADING, "leading")
    assert (core.applied, core.applied_count) == ((1, 2), 3)


def test_an_empty_or_applied_log_leads_at_once() -> None:
    core: MemberCore[Pos] = MemberCore(CoreConfig())
    core.restored((4, 9))
    core.elected(1)
    assert core.writer_opened(0.0, (4, 9)) == [Lead()]
    other: MemberCore[Pos] = MemberCore(CoreConfig())
    other.elected(1)
    assert other.writer_opened(0.0, None) == [Lead()]


def test_a_refused_writer_resigns_another_failure_only_follows() -> None:
    core: MemberCore[Pos] = MemberCore(CoreConfig())
    core.elected(2)
    assert core.writer_refused(older_term=True) == [Resign()]
    assert (core.phase, core.refused) == (Phase.FOLLOWING, 1)
    core.elected(3)
    assert core.writer_refused(older_term=False) == []
    assert (core.phase, core.refused) == (Phase.FOLLOWING, 1)


def test_a_new_leader_waits_the_lease_out_after_fencing() -> None:
    core: MemberCore[Pos] = MemberCore(CoreConfig(read_lease_s=2.0))
    core.elected(1)
    assert core.writer_opened(50.0, None) == [WaitLease(52.0)]
    assert (core.phase, core.role) == (Phase.LEASE_WAIT, "catchup")
    assert core.lease_waited(51.999) == [WaitLease(52.0)]  # woke early: wait on
    assert core.lease_read(51.999, barrier_running=False) == LeaseAnswer(False, False)
    assert core.lease_waited(52.0) == [Lead()]
    assert core.phase is Phase.LEADING


def test_an_acknowledged_append_gives_a_lease_until_it_expires() -> None:
    core = leader(CoreConfig(read_lease_s=1.0), now_s=0.0)
    assert core.lease_read(1.5, barrier_running=False) == LeaseAnswer(False, True)
    assert core.append_acked((1, 0), 2.0, [b"x"]) == [Apply((1, 0), [b"x"])]
    until = 2.0 + 1.0 * (1 - LEASE_DRIFT)
    assert core.lease_until_s == until
    assert core.lease_read(2.1, barrier_running=False) == LeaseAnswer(True, False)
    # Past half of it, a read renews the lease (unless a barrier runs already)...
    assert core.lease_read(2.6, barrier_running=False) == LeaseAnswer(True, True)
    assert core.lease_read(2.6, barrier_running=True) == LeaseAnswer(True, False)
    # ... and once it ran out the read needs a barrier.
    assert core.lease_read(until, barrier_running=True) == LeaseAnswer(False, False)
    assert (core.lease_reads, core.lease_renewals) == (3, 2)
    # An older append acknowledged later does not shorten the lease.
    core.append_acked((1, 1), 1.0, [])
    assert core.lease_until_s == until


def test_without_a_lease_no_read_is_granted() -> None:
    core = leader(CoreConfig())
    core.append_acked((1, 0), 100.0, [b"x"])
    assert core.lease_read(100.0, barrier_running=False) == LeaseAnswer(False, False)


def test_a_fenced_leader_steps_down_loses_its_lease_and_resigns() -> None:
    core = leader(CoreConfig(read_lease_s=1.0))
    core.append_acked((1, 0), 101.0, [b"x"])
    assert core.append_failed(fenced=True) == [FailPending()]
    assert (core.phase, core.lease_until_s) == (Phase.FOLLOWING, 0.0)
    assert core.lease_read(101.1, barrier_running=False) == LeaseAnswer(False, False)
    assert core.step_down() == [FailPending(), Resign()]
    assert core.fenced == 1
    assert core.step_down() == [FailPending()]  # once only


def test_leadership_lost_steps_down_without_resigning() -> None:
    core = leader(CoreConfig())
    assert core.append_failed(fenced=False) == [FailPending()]
    assert core.step_down() == [FailPending()]
    core = leader(CoreConfig())
    assert core.step_down() == [FailPending()]
    assert (core.phase, core.fenced) == (Phase.FOLLOWING, 0)


def test_a_late_append_failure_of_an_earlier_term_changes_nothing() -> None:
    core: MemberCore[Pos] = MemberCore(CoreConfig(read_lease_s=1.0))
    core.elected(1)
    core.writer_opened(0.0, (1, 5))
    assert core.append_failed(fenced=True) == []
    assert core.phase is Phase.CATCHUP
    assert not core.fenced_while_leading


def test_a_step_down_during_catch_up_follows() -> None:
    core: MemberCore[Pos] = MemberCore(CoreConfig())
    core.elected(1)
    core.writer_opened(0.0, (1, 5))
    assert core.step_down() == [FailPending()]
    assert core.phase is Phase.FOLLOWING
    with pytest.raises(AssertionError, match="ACKED in phase FOLLOWING"):
        core.append_acked((1, 0), 0.0, [])


def test_snapshots_are_due_by_commands_or_bytes_one_at_a_time() -> None:
    core = leader(CoreConfig(snapshot_every_commands=3))
    assert core.append_acked((1, 0), 0.0, [b"a", b"b"]) == [Apply((1, 0), [b"a", b"b"])]
    assert core.append_acked((1, 1), 0.0, [b"c"]) == [Apply((1, 1), [b"c"]), TakeSnapshot()]
    assert core.append_acked((1, 2), 0.0, [b"d"]) == [Apply((1, 2), [b"d"])]  # one running
    core.snapshot_captured()
    core.snapshot_finished()
    assert core.since_snapshot_commands == 0
    by_bytes = leader(CoreConfig(snapshot_every_bytes=10))
    assert by_bytes.append_acked((1, 0), 0.0, [b"x" * 9]) == [Apply((1, 0), [b"x" * 9])]
    assert TakeSnapshot() in by_bytes.append_acked((1, 1), 0.0, [b"y"])


def test_a_follower_that_applies_nothing_checks_for_a_stall_once_per_period() -> None:
    core: MemberCore[Pos] = MemberCore(CoreConfig(follow_stall_s=5.0))
    core.start_following(0.0)
    assert core.follow_tick(4.9, connected=True) == []
    assert core.follow_tick(5.0, connected=True) == [CheckStall()]
    assert core.follow_tick(9.9, connected=True) == []  # the wait starts again
    assert core.follow_tick(10.0, connected=True) == [CheckStall()]
    core.record_read((1, 0), [b"a"], 11.0)
    assert core.follow_tick(11.0, connected=True) == []  # progress
    assert core.follow_tick(15.5, connected=True) == []
    assert core.follow_tick(15.5, connected=False) == []  # no store: no stall
    assert core.follow_tick(20.25, connected=True) == []
    assert core.follow_tick(20.5, connected=True) == [CheckStall()]


def test_a_deleted_log_fails_the_member_for_good() -> None:
    core = leader(CoreConfig())
    core.log_deleted()
    assert (core.phase, core.role) == (Phase.FAILED, "failed")
    assert core.step_down() == [FailPending()]
    with pytest.raises(AssertionError, match="ELECTED in phase FAILED"):
        core.elected(9)
