"""The cluster's rack information node: read and written under compare-and-set.

The format and the rules are :mod:`bkeeper.meta.locations`'s; this is the store.
"""

from __future__ import annotations

from bkeeper.common.cas import cas_update
from bkeeper.common.errors import (
    ConfigError,
    MetadataError,
    MetadataVersionError,
    NodeExistsError,
    NoNodeError,
)
from bkeeper.meta.locations import (
    RACK_NODE,
    RackEntry,
    check_location,
    decode,
    encode,
    locations_of,
    with_location,
)
from bkeeper.meta.store import NodeStore, join_path, parent_path

__all__ = ["RackStore", "rack_node_path"]


def rack_node_path(ledgers_root: str) -> str:
    """The node of the locations of the cluster whose ledgers are under ``ledgers_root``."""
    return join_path(parent_path(ledgers_root), RACK_NODE)


class RackStore:
    """The locations node of one cluster (module doc)."""

    def __init__(self, store: NodeStore, ledgers_root: str) -> None:
        self._store = store
        self.path = rack_node_path(ledgers_root)

    async def groups(self) -> tuple[dict[str, dict[str, RackEntry]], int]:
        """The node's groups and its version (-1: no node)."""
        try:
            data, version = await self._store.get(self.path)
        except NoNodeError:
            return {}, -1
        return decode(data, self.path), version

    async def locations(self) -> dict[str, str]:
        """Bookie id -> network location, for every bookie that has one."""
        groups, _version = await self.groups()
        return locations_of(groups)

    async def set(self, bookie: str, location: str, hostname: str = "") -> bool:
        """Give ``bookie`` the location (CAS on the node); False when it had it already."""
        check_location(location)
        return await self._change(bookie, RackEntry(location, hostname))

    async def delete(self, bookie: str) -> bool:
        """Remove ``bookie``'s entry; False when it had none."""
        return await self._change(bookie, None)

    async def _change(self, bookie: str, entry: RackEntry | None) -> bool:
        if not bookie or "/" in bookie:
            raise ConfigError(f"bookie id {bookie!r} cannot have a rack entry")

        async def attempt(held: tuple[dict[str, dict[str, RackEntry]], int]) -> bool:
            groups, version = held
            changed = with_location(groups, bookie, entry)
            if changed is None:
                return False
            if version < 0:
                try:
                    await self._store.create(self.path, encode(changed))
                except NodeExistsError:  # created meanwhile: a lost race, read again
                    raise MetadataVersionError(f"{self.path} created meanwhile") from None
            else:
                await self._store.set(self.path, encode(changed), version)
            return True

        try:
            return await cas_update(self.groups, attempt, what=f"rack information of {bookie}")
        except NoNodeError as exc:  # the parent of the ledgers root is gone
            raise MetadataError(f"cannot write {self.path}: {exc}") from exc
