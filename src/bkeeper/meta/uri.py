"""Metadata service URIs and the driver each one selects.

Accepted forms (the path is the ledgers root, ``/ledgers`` when absent):

* ``zk://host:port[,host:port...]/ledgers`` and Apache BookKeeper's
  ``zk+hierarchical://h1:2181;h2:2181/ledgers`` (``zk+null`` too): the ZooKeeper driver with
  the hierarchical ledger layout. Hosts may be separated by ``,`` or ``;``.
* ``memory://name[/root]``: the in-process driver; every store opened on one name in this
  process shares one tree.

Other ledger manager types (``flat``, ``longhierarchical``, ``ms``) are refused: bkeeper
reads and writes only the hierarchical layout.

Security (ZooKeeper only; docs/security.md): ``?digest-file=PATH`` names a file (mode 600)
holding ``user:password``. The session then authenticates with that digest identity and every
node the store creates gets an ACL for that identity alone (BookKeeper's
``zkEnableSecurity``). The URI carries the file's path, never the password, since URIs show
in process listings and logs; the file is read when a store opens (by this module: the
driver needs the credentials, and every process that opens the URI must present them).
"""

from __future__ import annotations

import dataclasses
import os
import stat
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from bkeeper.common.errors import ConfigError, MetadataError
from bkeeper.meta.store import NodeStore, StoreConfig, check_path

__all__ = ["DEFAULT_ROOT", "DIGEST_FILE_OPTION", "MetadataUri", "open_node_store"]

DEFAULT_ROOT = "/ledgers"
#: The URI option naming the ZooKeeper digest credentials file.
DIGEST_FILE_OPTION = "digest-file"
#: A digest file larger than this is refused.
DIGEST_FILE_BYTES_MAX = 4096

_ZK_SCHEMES = ("zk", "zk+hierarchical", "zk+null")
_MEMORY_SCHEME = "memory"


@dataclass(frozen=True)
class MetadataUri:
    """A parsed metadata service URI: which driver, where, and the ledgers root path."""

    scheme: str
    hosts: tuple[str, ...]
    name: str
    root: str
    digest_file: str = ""

    @classmethod
    def parse(cls, uri: str) -> MetadataUri:
        """Parse ``uri``; ``ConfigError`` naming the problem."""
        scheme, sep, rest = uri.partition("://")
        if not sep:
            raise ConfigError(f"metadata URI {uri!r}: expected zk://hosts/root or memory://name")
        rest, _, query = rest.partition("?")
        options = _options(uri, query)
        scheme = scheme.lower()
        if scheme == _MEMORY_SCHEME:
            if options:
                raise ConfigError(f"metadata URI {uri!r}: memory:// takes no options")
            return cls._parse_memory(uri, rest)
        if scheme in _ZK_SCHEMES:
            parsed = cls._parse_zk(uri, rest)
            return dataclasses.replace(parsed, digest_file=options.get(DIGEST_FILE_OPTION, ""))
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
        query = f"?{DIGEST_FILE_OPTION}={self.digest_file}" if self.digest_file else ""
        return f"{self.scheme}://{where}{self.root}{query}"

    def digest(self) -> tuple[str, str] | None:
        """The ZooKeeper digest identity (user, password) from ``digest_file``, or None;
        ``ConfigError`` if the file cannot be read, is readable by others or is not
        ``user:password``."""
        if not self.digest_file:
            return None
        path = self.digest_file
        try:
            info = os.stat(path)
            if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
                raise ConfigError(
                    f"{DIGEST_FILE_OPTION} {path}: readable by others "
                    f"(mode {stat.S_IMODE(info.st_mode):o}); chmod 600 it"
                )
            with open(path, "rb") as file:
                text = file.read(DIGEST_FILE_BYTES_MAX + 1).decode("utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{DIGEST_FILE_OPTION} {path}: cannot read it: {exc}") from exc
        user, sep, password = text.partition(":")
        if not sep or not user or not password or len(text) > DIGEST_FILE_BYTES_MAX:
            raise ConfigError(f"{DIGEST_FILE_OPTION} {path}: expected one line user:password")
        return user, password


async def open_node_store(uri: str | MetadataUri, config: StoreConfig | None = None) -> NodeStore:
    """Open a node store (a new session) with the driver ``uri`` names."""
    parsed = uri if isinstance(uri, MetadataUri) else MetadataUri.parse(uri)
    if parsed.scheme == "memory":
        from bkeeper.meta.memory import MemoryNodeStore

        return MemoryNodeStore.open(parsed.name, config)
    from bkeeper.meta.zk import ZkNodeStore

    return await ZkNodeStore.connect(parsed.connect_string, config, digest=parsed.digest())


def _options(uri: str, query: str) -> dict[str, str]:
    if not query:
        return {}
    try:
        values = parse_qs(query, keep_blank_values=True, strict_parsing=True)
    except ValueError as exc:
        raise ConfigError(f"metadata URI {uri!r}: bad options {query!r}") from exc
    for key, found in values.items():
        if key != DIGEST_FILE_OPTION:
            raise ConfigError(
                f"metadata URI {uri!r}: unknown option {key!r} (known: {DIGEST_FILE_OPTION})"
            )
        if len(found) != 1 or not found[0]:
            raise ConfigError(f"metadata URI {uri!r}: {key} needs one file path")
    return {key: found[0] for key, found in values.items()}


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
