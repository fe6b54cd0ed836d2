"""Rack- and region-aware placement (pure): min racks per write quorum, enforcement, region
preference, and the moves of placement repair."""

from __future__ import annotations

import random

import pytest

from bkeeper.client.config import ClientConfig
from bkeeper.client.placement import (
    DEFAULT_RACK,
    DEFAULT_REGION,
    Domains,
    choose_ensemble,
    placement_moves,
    quorum_racks_short,
    replace_bookie,
    write_quorums,
)
from bkeeper.common.errors import ConfigError, NotEnoughBookiesError

#: six bookies, two per rack
SIX = {f"b{i}:3181": f"/rack-{i % 3}" for i in range(6)}


def racks_of(ensemble: tuple[str, ...] | list[str], domains: Domains) -> list[str]:
    return [domains.rack(b) for b in ensemble]


def test_write_quorums_are_the_striped_sets() -> None:
    assert write_quorums(3, 3) == [(0, 1, 2)]
    assert write_quorums(4, 2) == [(0, 1), (1, 2), (2, 3), (3, 0)]


@pytest.mark.parametrize(
    ("size", "quorum", "racks"), [(3, 3, 3), (3, 2, 2), (6, 2, 2), (6, 3, 3), (5, 3, 2)]
)
def test_every_write_quorum_spans_the_racks_asked_when_there_are_enough(
    size: int, quorum: int, racks: int
) -> None:
    # (a ring of five cannot have every three neighbours on three racks of three: two asked)
    domains = Domains(SIX, min_racks=racks)
    for seed in range(200):
        ensemble = choose_ensemble(SIX, size, quorum, domains=domains, rng=random.Random(seed))
        assert len(set(ensemble)) == size
        assert quorum_racks_short(ensemble, quorum, domains) == [], (seed, ensemble)


def test_two_racks_left_still_give_two_racks_per_quorum() -> None:
    two = {b: r for b, r in SIX.items() if r != "/rack-2"}  # rack-2 lost
    domains = Domains(two, enforce=True)
    for seed in range(100):
        ensemble = choose_ensemble(two, 3, 3, domains=domains, rng=random.Random(seed))
        assert len(set(racks_of(ensemble, domains))) == 2


def test_enforce_refuses_an_ensemble_on_one_rack_best_effort_takes_it() -> None:
    one = {"a:1": "/r1", "b:1": "/r1", "c:1": "/r1"}
    with pytest.raises(NotEnoughBookiesError, match=r"span 1 rack \(/r1\)"):
        choose_ensemble(one, 3, 2, domains=Domains(one, enforce=True))
    assert sorted(choose_ensemble(one, 3, 2, domains=Domains(one))) == sorted(one)


def test_replacement_keeps_the_quorum_on_two_racks_or_is_refused_when_enforced() -> None:
    domains = Domains(SIX, enforce=True)
    ensemble = ["b0:3181", "b1:3181", "b2:3181"]  # rack-0, rack-1, rack-2
    for seed in range(50):
        new = replace_bookie(ensemble, 0, SIX, 3, domains=domains, rng=random.Random(seed))
        assert domains.rack(new) == "/rack-0"  # the only rack not in the quorum yet
    # bookies b1 (rack-1) and b4 (rack-1) stay; the candidates left are all on rack-1
    crowded = {"b1:1": "/r1", "b4:1": "/r1", "x:1": "/r1", "y:1": "/r2"}
    with pytest.raises(NotEnoughBookiesError, match="min_racks_per_write_quorum, enforced"):
        replace_bookie(
            ["y:1", "b1:1", "b4:1"], 0, ["x:1"], 2, domains=Domains(crowded, enforce=True)
        )
    # not enforced: it takes what there is
    assert replace_bookie(["y:1", "b1:1", "b4:1"], 0, ["x:1"], 2, domains=Domains(crowded)) == "x:1"


def test_region_aware_spreads_regions_first() -> None:
    locations = {
        "a1:1": "/east/r1", "a2:1": "/east/r2", "a3:1": "/east/r3",
        "b1:1": "/west/r1", "b2:1": "/west/r2",
        "c1:1": "/north/r1",
    }  # fmt: skip
    domains = Domains(locations, regions=True)
    for seed in range(100):
        ensemble = choose_ensemble(locations, 3, 3, domains=domains, rng=random.Random(seed))
        assert {domains.region(b) for b in ensemble} == {"/east", "/west", "/north"}
    assert domains.region("unknown:1") == DEFAULT_REGION
    assert domains.rack("unknown:1") == DEFAULT_RACK
    # rack-aware alone only looks at racks: /east/r1 and /west/r1 are different racks
    assert Domains(locations).rack("a1:1") != Domains(locations).rack("b1:1")


def test_placement_moves_name_one_bookie_per_short_quorum_and_only_mendable_ones() -> None:
    domains = Domains(SIX)
    # E3/Qw3 all on rack-0 and rack-0 ... b0 and b3 share rack-0
    ensemble = ["b0:3181", "b3:3181", "b1:3181"]
    assert placement_moves(ensemble, 3, domains, SIX, need=3) in (("b0:3181",), ("b3:3181",))
    assert placement_moves(ensemble, 3, domains, SIX, need=2) == ()  # two racks: fine
    # no candidate on another rack: nothing to move
    only_rack0 = [b for b, r in SIX.items() if r == "/rack-0"]
    assert placement_moves(ensemble, 3, domains, only_rack0, need=3) == ()
    # E4/Qw2: sets {0,1},{1,2},{2,3},{3,0}: two of them on one rack
    striped = ["b0:3181", "b3:3181", "b1:3181", "b4:3181"]
    moved = placement_moves(striped, 2, domains, SIX)
    assert len(moved) == 2
    after = list(striped)
    spare = [b for b in SIX if b not in striped]
    for bookie, target in zip(moved, spare, strict=False):
        after[after.index(bookie)] = target
    assert quorum_racks_short(after, 2, domains) == []


def test_client_config_checks_placement_names_and_locations() -> None:
    assert ClientConfig().placement == "rackaware"
    with pytest.raises(ConfigError, match="placement: 'rack' is not one of random"):
        ClientConfig(placement="rack")
    with pytest.raises(ConfigError, match=r"racks: location of a:1 'rack1': expected /rack"):
        ClientConfig(racks={"a:1": "rack1"})
    with pytest.raises(ConfigError, match="min_racks_per_write_quorum"):
        ClientConfig(min_racks_per_write_quorum=0)
