"""The schedule is a pure function of the seed: same seed, same faults; faults never overlap
and each holds within its kind's range."""

from __future__ import annotations

import pytest

from bkeeper.common.errors import ConfigError
from bkeeper.verify.schedule import (
    CLUSTER_NEMESES,
    GAP_S,
    HOLD_S,
    KV_NEMESES,
    NEMESES,
    SLOW_SYNC_MS,
    make_schedule,
    parse_nemeses,
)


def test_the_same_seed_gives_the_same_schedule_and_another_seed_another() -> None:
    one = make_schedule(7, NEMESES, 300.0, 5)
    assert one == make_schedule(7, NEMESES, 300.0, 5)
    assert one != make_schedule(8, NEMESES, 300.0, 5)


@pytest.mark.parametrize("seed", range(20))
def test_faults_do_not_overlap_and_end_within_the_run(seed: int) -> None:
    faults = make_schedule(seed, NEMESES, 120.0, 5)
    assert faults
    previous_heal = 0.0
    for fault in faults:
        low, high = HOLD_S[fault.kind]
        assert low <= fault.hold_s <= high
        assert fault.at_s - previous_heal >= GAP_S[0] - 1e-6
        assert fault.heal_s <= 120.0
        assert (fault.target is None) == (fault.kind in CLUSTER_NEMESES)
        if fault.kind == "slow-disk":
            assert SLOW_SYNC_MS[0] <= fault.sync_delay_ms <= SLOW_SYNC_MS[1]
        else:
            assert fault.sync_delay_ms == 0
        assert fault.target is None or 0 <= fault.target < 5
        previous_heal = fault.heal_s


def test_only_the_nemeses_asked_for() -> None:
    faults = make_schedule(3, ("kill", "zk"), 200.0, 5)
    assert {f.kind for f in faults} == {"kill", "zk"}
    assert make_schedule(3, (), 200.0, 5) == ()


def test_parse_nemeses() -> None:
    assert parse_nemeses("kill, pause,kill") == ("kill", "pause")
    assert parse_nemeses("all") == NEMESES
    with pytest.raises(ConfigError, match="'kil' is not one of kill"):
        parse_nemeses("kil")
    with pytest.raises(ConfigError, match="none given"):
        parse_nemeses(" , ")


def test_on_a_cluster_given_with_metadata_only_verifys_own_processes_are_faulted() -> None:
    assert parse_nemeses("all", "ledger", external=True) == ("client-kill",)
    assert parse_nemeses("client-kill", "ledger", external=True) == ("client-kill",)
    for name in ("kill", "zk", "disk-full", "partition"):
        with pytest.raises(ConfigError, match=f"'{name}' works on the cluster's own processes"):
            parse_nemeses(f"client-kill,{name}", "ledger", external=True)
    with pytest.raises(ConfigError, match="'kil' is not one of"):
        parse_nemeses("kil", "ledger", external=True)


def test_every_nemesis_is_drawn_and_a_slow_disk_says_its_delay() -> None:
    kinds = {f.kind for seed in range(10) for f in make_schedule(seed, NEMESES, 300.0, 5)}
    assert kinds == set(NEMESES)
    slow = next(f for f in make_schedule(1, ("slow-disk",), 60.0, 5))
    assert f"({slow.sync_delay_ms} ms per fsync)" in slow.describe()


def test_the_kv_workload_adds_the_members_faults_without_a_bookie_target() -> None:
    assert parse_nemeses("all", "kv") == (*NEMESES, *KV_NEMESES)
    assert parse_nemeses("all") == NEMESES
    assert parse_nemeses("leader-kill,kill", "kv") == ("leader-kill", "kill")
    with pytest.raises(ConfigError, match="nemesis: 'leader-pause' needs --workload kv"):
        parse_nemeses("kill,leader-pause", "log")
    faults = make_schedule(11, KV_NEMESES, 200.0, 5)
    assert {f.kind for f in faults} == set(KV_NEMESES)
    assert all(f.target is None for f in faults)
    assert any(f.kind == "leader-pause" and f.hold_s > 8.0 for f in faults)  # past fail-over
    # a leader cut from ZooKeeper past its session timeout (4 s), deposed while it serves on
    assert any(f.kind == "leader-partition-zk" and f.hold_s > 6.0 for f in faults)
    with pytest.raises(ConfigError, match="'leader-partition-zk' needs --workload kv"):
        parse_nemeses("leader-partition-zk", "ledger")
