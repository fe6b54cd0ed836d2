"""Where bookies are: network locations (failure domains) and their stored format (pure).

A network location is a path of one or two names, ``/rack`` or ``/region/rack``, as Apache
BookKeeper's network topology writes them (its DNS-to-switch mapping answers such paths;
``/default-rack`` and ``/default-region/default-rack`` for a bookie it cannot place).

The locations of a cluster live in one node, ``<parent of the ledgers root>/bookies`` (for the
root ``/ledgers``: ``/bookies``), holding the JSON of Pulsar's ``BookiesRackConfiguration``:
``{"<group>": {"<bookie id>": {"rack": "/region/rack", "hostname": "..."}}}``. Pulsar's
``ZkBookieRackAffinityMapping`` reads that node, and ``pulsar-admin bookies set-bookie-rack``
writes it, so a Pulsar broker on the same ZooKeeper and bkeeper agree on every bookie's
rack. bkeeper writes its entries in the group ``default``; it reads every group (a bookie
named in two groups: the first group in the node's order wins).

Writers: a bookie started with a location (``network_location``) puts its own entry there at
start; an operator sets or removes entries (``bkeeper shell setrack`` / ``deleterack``). Every
change is a compare-and-set of the whole node, so two bookies starting at once do not lose
each other's entry. Readers: clients and auto-recovery (placement), through
:meth:`RackStore.locations`.

This module is the pure part (no I/O: client configurations import it);
:class:`bkeeper.meta.racks.RackStore` reads and writes the node. The node holds at most
:data:`RACK_ENTRIES_MAX` bookies.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from bkeeper.common.errors import ConfigError, ProtocolError

__all__ = [
    "DEFAULT_GROUP",
    "LOCATION_LEVELS_MAX",
    "LOCATION_MAP_BYTES_MAX",
    "RACK_ENTRIES_MAX",
    "RACK_NODE",
    "RackEntry",
    "check_location",
    "decode",
    "encode",
    "locations_of",
    "parse_location_map",
    "with_location",
]

#: The node's name, beside the ledgers root.
RACK_NODE = "bookies"
#: The group bkeeper writes to (Pulsar's default group).
DEFAULT_GROUP = "default"
#: Bookies the node may hold (a cluster's worth; the node stays well under ZooKeeper's 1 MiB).
RACK_ENTRIES_MAX = 5_000
#: Levels of a location: ``/rack`` or ``/region/rack``.
LOCATION_LEVELS_MAX = 2

_NAME = re.compile(r"[A-Za-z0-9._:-]+")


#: A mapping file larger than this is refused (a host list, not data).
LOCATION_MAP_BYTES_MAX = 1024 * 1024


def parse_location_map(text: str, where: str) -> dict[str, str]:
    """A mapping file's ``name location`` lines (a bookie id, host name or address, then
    ``/rack`` or ``/region/rack``; ``#`` starts a comment), as Apache BookKeeper's table
    mapping and Pulsar's topology files write them; ``ConfigError`` naming ``where`` and the
    line for anything else, and for a name given twice."""
    found: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) != 2:
            raise ConfigError(f"{where}, line {number}: expected 'name location', got {line!r}")
        name, location = words
        check_location(location, f"{where}, line {number}: location")
        if name in found:
            raise ConfigError(f"{where}, line {number}: {name} is mapped twice")
        found[name] = location
    return found


def check_location(location: str, what: str = "network location") -> str:
    """``location`` if it is ``/name`` or ``/name/name`` (letters, digits, ``._:-``), else
    ``ConfigError`` saying what is wrong."""
    parts = location.split("/")
    if (
        not location.startswith("/")
        or not 2 <= len(parts) <= LOCATION_LEVELS_MAX + 1
        or not all(_NAME.fullmatch(part) for part in parts[1:])
    ):
        raise ConfigError(
            f"{what} {location!r}: expected /rack or /region/rack (names of letters, digits, "
            "'.', '_', ':' or '-')"
        )
    return location


@dataclass(frozen=True)
class RackEntry:
    """One bookie's entry: its location and, optionally, its host name."""

    rack: str
    hostname: str = ""


def decode(data: bytes, where: str) -> dict[str, dict[str, RackEntry]]:
    """The groups of the node's JSON (an empty node: none); ``ProtocolError`` naming
    ``where`` when it is not the format of the module doc. An entry with no valid location
    is kept with an empty one (a Pulsar tool may write what we do not read): readers skip it."""
    if not data.strip():
        return {}
    try:
        document = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"{where}: not JSON ({exc})") from None
    if not isinstance(document, dict):
        raise ProtocolError(f"{where}: expected a JSON object of groups")
    groups: dict[str, dict[str, RackEntry]] = {}
    for group, bookies in document.items():
        if not isinstance(bookies, dict):
            raise ProtocolError(f"{where}: group {group!r} is not an object of bookies")
        entries: dict[str, RackEntry] = {}
        for bookie, info in bookies.items():
            if not isinstance(info, dict):
                raise ProtocolError(f"{where}: bookie {bookie!r} of group {group!r}: not an object")
            rack, hostname = info.get("rack", ""), info.get("hostname", "")
            if not isinstance(rack, str) or not isinstance(hostname, str):
                raise ProtocolError(f"{where}: bookie {bookie!r}: rack and hostname are strings")
            try:
                check_location(rack)
            except ConfigError:
                rack = ""
            entries[bookie] = RackEntry(rack, hostname)
        groups[group] = entries
    return groups


def encode(groups: Mapping[str, Mapping[str, RackEntry]]) -> bytes:
    """The node's JSON for ``groups`` (keys sorted: the same groups, the same bytes)."""
    document = {
        group: {
            bookie: {"rack": entry.rack, **({"hostname": entry.hostname} if entry.hostname else {})}
            for bookie, entry in sorted(bookies.items())
        }
        for group, bookies in groups.items()
    }
    return json.dumps(document, sort_keys=True, indent=1).encode()


def locations_of(groups: Mapping[str, Mapping[str, RackEntry]]) -> dict[str, str]:
    """Bookie id -> location, over every group (the first group naming a bookie wins)."""
    found: dict[str, str] = {}
    for bookies in groups.values():
        for bookie, entry in bookies.items():
            if entry.rack and bookie not in found:
                found[bookie] = entry.rack
    return found


def with_location(
    groups: Mapping[str, Mapping[str, RackEntry]], bookie: str, entry: RackEntry | None
) -> dict[str, dict[str, RackEntry]] | None:
    """``groups`` with ``bookie``'s entry set (``entry`` None: removed from every group);
    None when that changes nothing. A new bookie goes to :data:`DEFAULT_GROUP`, an existing
    one is changed where it is. ``ConfigError`` past :data:`RACK_ENTRIES_MAX`."""
    result = {group: dict(bookies) for group, bookies in groups.items()}
    holding = [group for group, bookies in result.items() if bookie in bookies]
    if entry is None:
        if not holding:
            return None
        for group in holding:
            del result[group][bookie]
        return result
    if holding and all(result[group][bookie] == entry for group in holding):
        return None
    for group in holding or [DEFAULT_GROUP]:
        result.setdefault(group, {})[bookie] = entry
    if sum(len(bookies) for bookies in result.values()) > RACK_ENTRIES_MAX:
        raise ConfigError(f"rack information holds {RACK_ENTRIES_MAX} bookies already")
    return result
