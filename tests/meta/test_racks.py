"""The rack information node: Pulsar's format, pure edits, and the store under CAS."""

from __future__ import annotations

import asyncio
import json

import pytest

from bkeeper.common.errors import ConfigError, ProtocolError
from bkeeper.meta.cluster import ClusterMetadata
from bkeeper.meta.locations import (
    RackEntry,
    check_location,
    decode,
    encode,
    locations_of,
    parse_location_map,
    with_location,
)
from bkeeper.meta.racks import rack_node_path

#: What `pulsar-admin bookies set-bookie-rack` leaves in /bookies.
PULSAR = (
    b'{"default":{"10.0.0.1:3181":{"rack":"/rack-1","hostname":"bk1.example.com"}},'
    b'"other":{"10.0.0.2:3181":{"rack":"/eu/rack-2"},"10.0.0.1:3181":{"rack":"/rack-9"}}}'
)


def test_locations_are_one_or_two_names() -> None:
    for good in ("/r1", "/eu-west/rack-1", "/a.b/c_d:e"):
        assert check_location(good) == good
    for bad in ("", "r1", "/", "/a/b/c", "/a//b", "/a b", "/a/"):
        with pytest.raises(ConfigError, match="expected /rack or /region/rack"):
            check_location(bad)


def test_pulsar_node_reads_and_the_first_group_wins() -> None:
    groups = decode(PULSAR, "/bookies")
    assert groups["default"]["10.0.0.1:3181"] == RackEntry("/rack-1", "bk1.example.com")
    assert locations_of(groups) == {"10.0.0.1:3181": "/rack-1", "10.0.0.2:3181": "/eu/rack-2"}
    assert decode(encode(groups), "x") == groups
    assert json.loads(encode(groups))["default"]["10.0.0.1:3181"]["hostname"] == "bk1.example.com"
    assert decode(b"", "x") == {}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"{", "not JSON"),
        (b"[]", "a JSON object of groups"),
        (b'{"g": 1}', "group 'g' is not an object"),
        (b'{"g": {"b": {"rack": 3}}}', "rack and hostname are strings"),
    ],
)
def test_a_bad_node_is_named(data: bytes, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        decode(data, "/bookies")


def test_a_location_we_do_not_read_is_skipped_not_fatal() -> None:
    groups = decode(b'{"default": {"b:1": {"rack": "no-slash"}}}', "x")
    assert locations_of(groups) == {}


def test_edits_change_only_what_differs() -> None:
    groups = decode(PULSAR, "x")
    assert with_location(groups, "10.0.0.2:3181", RackEntry("/eu/rack-2")) is None
    # a bookie in two groups is changed in both
    both = with_location(groups, "10.0.0.1:3181", RackEntry("/rack-1", "bk1.example.com"))
    assert both is not None and both["other"]["10.0.0.1:3181"].rack == "/rack-1"
    moved = with_location(groups, "10.0.0.2:3181", RackEntry("/eu/rack-3"))
    assert moved is not None and moved["other"]["10.0.0.2:3181"].rack == "/eu/rack-3"
    new = with_location({}, "n:1", RackEntry("/r"))
    assert new == {"default": {"n:1": RackEntry("/r")}}
    gone = with_location(groups, "10.0.0.1:3181", None)
    assert gone is not None and all("10.0.0.1:3181" not in g for g in gone.values())
    assert with_location({}, "n:1", None) is None


def test_mapping_files_name_lines_that_are_wrong() -> None:
    text = "# host rack\n10.0.0.1 /r1\nbk2:3181   /eu/r2  # the second\n\n"
    assert parse_location_map(text, "map") == {"10.0.0.1": "/r1", "bk2:3181": "/eu/r2"}
    with pytest.raises(ConfigError, match="map, line 1: expected 'name location'"):
        parse_location_map("10.0.0.1\n", "map")
    with pytest.raises(ConfigError, match="map, line 2: location 'r2'"):
        parse_location_map("a /r1\nb r2\n", "map")
    with pytest.raises(ConfigError, match="map, line 2: a is mapped twice"):
        parse_location_map("a /r1\na /r2\n", "map")


def test_node_path_is_beside_the_ledgers_root() -> None:
    assert rack_node_path("/ledgers") == "/bookies"
    assert rack_node_path("/pulsar/ledgers") == "/pulsar/bookies"


async def test_store_sets_and_deletes_under_cas_without_losing_a_concurrent_set() -> None:
    cluster = await ClusterMetadata.open("memory://racks-cas/ledgers")
    try:
        await cluster.format()
        racks = cluster.racks
        assert await racks.locations() == {}
        # twenty bookies register their racks at once: none is lost
        results = await asyncio.gather(*(racks.set(f"b{i}:1", f"/r{i % 3}") for i in range(20)))
        assert all(results)
        assert await racks.locations() == {f"b{i}:1": f"/r{i % 3}" for i in range(20)}
        assert await racks.set("b0:1", "/r0") is False  # unchanged: no write
        assert await racks.delete("b0:1") is True
        assert await racks.delete("b0:1") is False
        with pytest.raises(ConfigError, match="expected /rack"):
            await racks.set("b1:1", "rack")
        with pytest.raises(ConfigError, match="cannot have a rack entry"):
            await racks.set("a/b", "/r")
    finally:
        await cluster.aclose()
