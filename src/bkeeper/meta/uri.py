"""Metadata service URIs and the driver each one selects.

Accepted forms (the path is the ledgers root, ``/ledgers`` when absent):

* ``zk://host:port[,host:port...]/ledgers`` and Apache BookKeeper's
  ``zk+hierarchical://h1:2181;h2:2181/ledgers`` (``zk+null`` too): the ZooKeeper driver with
  the hierarchical ledger layout. Hosts may be separated by ``,`` or ``;``.
* ``memory://name[/root]``: the in-process driver; every store opened on one name in this
  process shares one tree.

Other ledger manager types (``flat``, ``longhierarchical``, ``ms``) are refused: bkeeper
reads and writes only the hierarchical layout.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from bkeeper.common.errors import ConfigError, MetadataError
from bkeeper.meta.store import NodeStore, StoreConfig, check_path

__all__ = ["DEFAULT_ROOT", "MetadataUri", "open_node_store"]

DEFAULT_ROOT = "/ledgers"

_ZK_SCHEMES = ("zk", "zk+hierarchical", "zk+null")
_MEMORY_SCHEME = "memory"


@dataclass(frozen=True)
class MetadataUri:
    """A parsed metadata service URI: which driver, where, and the ledgers root path."""

    scheme: str
    hosts: tuple[str, ...]
    name: str
    root: str

    @classmethod
    def parse(cls, uri: str) -> MetadataUri:
        """Parse ``uri``; ``ConfigError`` naming the problem."""
        scheme, sep, rest = uri.partition("://")
        if not sep:
            raise ConfigError(f"metadata URI {uri!r}: expected zk://hosts/root or memory://name")
        scheme = scheme.lower()
        if scheme == _MEMORY_SCHEME:
            return cls._parse_memory(uri, rest)
        if scheme in _ZK_SCHEMES:
            return cls._parse_zk(uri, rest)
        raise ConfigError(
            f"metadata URI {uri!r}: scheme {scheme!r} is not supported "
            f"(use one of {', '.join((*_ZK_SCHEMES, _MEMORY_SCHEME))})"
        )

    @classmethod
    def _parse_memory(cls, uri: str, rest: str) -> MetadataUri:
        name, slash, path = rest.partition("/")
        if not name:
            raise ConfigError(f"metadata URI {uri!r}: memory:// needs a name")
        return cls("memory", (), name, _root(uri, slash + path))

    @classmethod
    def _parse_zk(cls, uri: str, rest: str) -> MetadataUri:
        authority, slash, path = rest.partition("/")
        hosts = tuple(h.strip() for h in authority.replace(";", ",").split(",") if h.strip())
        if not hosts:
            raise ConfigError(f"metadata URI {uri!r}: no ZooKeeper hosts")
        for host in hosts:
            port = _port(host)
            if port is None or not 0 < port < 65536:
                raise ConfigError(f"metadata URI {uri!r}: bad host:port {host!r}")
        return cls("zk", hosts, "", _root(uri, slash + path))

    @property
    def connect_string(self) -> str:
        """ZooKeeper's "h1:p1,h2:p2" form of the hosts."""
        return ",".join(self.hosts)

    def __str__(self) -> str:
        where = self.name if self.scheme == "memory" else self.connect_string
        return f"{self.scheme}://{where}{self.root}"


async def open_node_store(uri: str | MetadataUri, config: StoreConfig | None = None) -> NodeStore:
    """Open a node store (a new session) with the driver ``uri`` names."""
    parsed = uri if isinstance(uri, MetadataUri) else MetadataUri.parse(uri)
    if parsed.scheme == "memory":
        from bkeeper.meta.memory import MemoryNodeStore

        return MemoryNodeStore.open(parsed.name, config)
    from bkeeper.meta.zk import ZkNodeStore

    return await ZkNodeStore.connect(parsed.connect_string, config)


def _root(uri: str, path: str) -> str:
    root = path.rstrip("/") or DEFAULT_ROOT
    try:
        return check_path(root)
    except MetadataError as exc:
        raise ConfigError(f"metadata URI {uri!r}: {exc}") from exc


def _port(host: str) -> int | None:
    if ":" not in host:
        return 2181
    try:
        return urlsplit(f"//{host}").port
    except ValueError:
        return None
