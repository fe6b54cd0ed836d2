"""A bookie's place in the cluster metadata: instance id, ZooKeeper cookie, registration.

At start (before serving): open the metadata store, read the cluster's instance id (refuse
when the cluster is not formatted), check the bookie's cookie in ``<root>/cookies/<bookieId>``
against the local one (write it when absent; refuse with a message naming the difference
when it differs). A bookie with no local cookie whose id has one stored lost its data
(formatted, a new disk): it is refused before it stamps a new cookie, as Apache BookKeeper
refuses it, because serving empty it would answer "no such entry" for entries it
acknowledged; deleting the stored cookie (``bkeeper shell cookie_delete``) lets it join as a
new bookie. After the listener serves: register as writable or read-only under
``<root>/available``, switching when the mode changes, and again after a session expiry
(``BookieRegistration`` does that). At stop: unregister first, so clients stop choosing the
bookie before it drains.

The registration says what the bookie requires of clients (:func:`published_info`): its
auth plugin and TLS markers on the ``bookie-rpc`` endpoint, ``https`` for the admin HTTP
endpoint when TLS is on (``bkeeper.meta.bookie_info``). Clients read them to say what they
lack before they connect.

The address registered is the one the bookie listens on (``--host``): clients connect to it.
:func:`unreachable_address_warning` says when that address fails clients on other machines
(a loopback or wildcard address while ZooKeeper is reached from elsewhere); the bookie logs
it once at start.
"""

from __future__ import annotations

import ipaddress
import logging

from bkeeper.common.auth import AUTH_DISABLED_PLUGIN, ServerAuthConfig
from bkeeper.common.errors import (
    ClusterNotFoundError,
    ConfigError,
    CookieMismatchError,
    NoNodeError,
)
from bkeeper.common.ids import BookieId
from bkeeper.common.tls import TlsServerConfig
from bkeeper.meta.bookie_info import (
    TLS_CLIENT_CERT_EXTENSION,
    TLS_EXTENSION,
    TLS_REQUIRED_EXTENSION,
    BookieServiceInfo,
)
from bkeeper.meta.cluster import ClusterMetadata, MetadataConfig
from bkeeper.meta.cookie import Cookie
from bkeeper.meta.registry import BookieRegistration
from bkeeper.meta.store import StoreConfig
from bkeeper.meta.uri import MetadataUri
from bkeeper.server.cookie_check import read_local_cookie
from bkeeper.storage import FileSystem

__all__ = ["ClusterMembership", "published_info", "unreachable_address_warning"]

log = logging.getLogger(__name__)


def published_info(
    host: str,
    port: int,
    http: tuple[str, int] | None = None,
    tls: TlsServerConfig | None = None,
    auth: ServerAuthConfig | None = None,
) -> BookieServiceInfo:
    """What a bookie at ``host:port`` (admin HTTP at ``http``) with ``tls`` and ``auth``
    registers: its endpoints and what it requires (module doc)."""
    plugins: tuple[str, ...] = ()
    if auth is not None and auth.plugin != AUTH_DISABLED_PLUGIN:
        plugins = (auth.plugin,)
    extensions: list[str] = []
    if tls is not None:
        extensions.append(TLS_EXTENSION)
        if tls.required:
            extensions.append(TLS_REQUIRED_EXTENSION)
        if tls.client_auth:
            extensions.append(TLS_CLIENT_CERT_EXTENSION)
    http_host, http_port = (None, None) if http is None else http
    return BookieServiceInfo.for_bookie(
        host, port, http_port=http_port, http_host=http_host, auth=plugins,
        extensions=tuple(extensions),
    )  # fmt: skip


def unreachable_address_warning(host: str, port: int, metadata_uri: str) -> str | None:
    """Why clients on other machines cannot use the address ``host:port`` a bookie registers,
    or None when they can, or when every client must be on this machine anyway.

    Registering a loopback address (``127.0.0.0/8``, ``::1``, ``localhost``) or a wildcard
    (``0.0.0.0``, ``::``) tells every client to connect there: from another machine (a Spark
    executor, a writer) that is itself, and the connection fails. That only matters when
    ZooKeeper is reached at an address other machines can use too: with ZooKeeper on loopback
    (a sandbox, the tests, one-machine set-ups) or in memory, no client can be elsewhere, so
    nothing is said. Addresses are judged as written, without name lookups."""
    if not _this_machine_only(host):
        return None
    try:
        uri = MetadataUri.parse(metadata_uri)
    except ConfigError:
        return None
    zookeeper = [_host_of(host_port) for host_port in uri.hosts]
    if not zookeeper or all(_this_machine_only(name) for name in zookeeper):
        return None
    return (
        f"this bookie registers {_address(host, port)}, an address clients on other machines "
        f"cannot connect to, while ZooKeeper ({uri.connect_string}) is reached from elsewhere: "
        "Spark executors and other clients there will fail to reach it; start it with --host "
        "set to an address they can reach (docs/spark.md, Running on a cluster)"
    )


def _this_machine_only(host: str) -> bool:
    """A loopback or wildcard address, written as an IP address or ``localhost``."""
    name = host.strip("[]").lower()
    if name in ("", "localhost") or name.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False  # a host name: not looked up here
    return address.is_loopback or address.is_unspecified


def _host_of(host_port: str) -> str:
    """The host of ``host:port`` (``[v6]:port`` too)."""
    return host_port.rpartition(":")[0] or host_port


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class ClusterMembership:
    """The metadata session of one bookie."""

    def __init__(self, cluster: ClusterMetadata, bookie_id: str, instance_id: str) -> None:
        self.cluster = cluster
        self.bookie_id = bookie_id
        self.instance_id = instance_id
        self._registration: BookieRegistration | None = None

    @classmethod
    async def open(
        cls, uri: str, bookie_id: str, connect_timeout_ms: int = StoreConfig().connect_timeout_ms
    ) -> ClusterMembership:
        # A bookie waits the whole connect timeout for ZooKeeper (started with it, or during
        # a ZooKeeper restart), not the client's early give-up when every host refuses.
        wait = StoreConfig(
            connect_timeout_ms=connect_timeout_ms, unreachable_timeout_ms=connect_timeout_ms
        )
        cluster = await ClusterMetadata.open(uri, MetadataConfig(store=wait), require_cluster=True)
        try:
            instance_id = await cluster.instance_id()
            if instance_id is None:
                raise ClusterNotFoundError(f"the cluster at {uri} lost its INSTANCEID")
        except BaseException:
            await cluster.aclose()
            raise
        return cls(cluster, bookie_id, instance_id)

    async def refuse_if_data_lost(self, data_dir: str, fs: FileSystem | None = None) -> None:
        """``CookieMismatchError`` when ``data_dir`` has no cookie but the metadata store
        holds one for this bookie id (module doc). Call it before the cookie is stamped."""
        if read_local_cookie(data_dir, fs) is not None:
            return
        try:
            await self.cluster.cookies.read(self.bookie_id)
        except NoNodeError:
            return
        raise CookieMismatchError(
            f"bookie {self.bookie_id} has a cookie in the metadata store but none in "
            f"{data_dir}: its data is gone (formatted or lost), and it would answer 'no such "
            "entry' for entries it acknowledged; start it on its old data, or delete its "
            "cookie (bkeeper shell cookie_delete) to join as a new, empty bookie"
        )

    async def check_cookie(self, local: Cookie) -> None:
        """Compare the cookie stored in the metadata with ``local``; write it when absent."""
        try:
            stored = await self.cluster.cookies.read(self.bookie_id)
        except NoNodeError:
            await self.cluster.cookies.write(self.bookie_id, local)
            log.info("wrote the cookie of %s to the metadata store", self.bookie_id)
            return
        stored.value.verify(local, f"the metadata store ({self.bookie_id})")

    async def publish_location(self, location: str, hostname: str) -> None:
        """Write this bookie's network location to the cluster's rack information
        (:mod:`bkeeper.meta.racks`) unless it is there already; before registering, so that
        no client sees the bookie without its rack."""
        if await self.cluster.racks.set(self.bookie_id, location, hostname):
            log.info("network location of %s set to %s", self.bookie_id, location)

    async def register(
        self,
        host: str,
        port: int,
        read_only: bool,
        http: tuple[str, int] | None = None,
        security: tuple[TlsServerConfig | None, ServerAuthConfig | None] = (None, None),
    ) -> None:
        """Register as writable or read-only, publishing the bookie port, the admin HTTP
        server's ``(host, port)`` (endpoint ``httpserver``) if it has one, and what the
        bookie's ``security`` (TLS, auth) requires of clients (:func:`published_info`)."""
        info = published_info(host, port, http, *security)
        self._registration = BookieRegistration(
            self.cluster.registry, self.cluster.store, BookieId(self.bookie_id), info, read_only
        )
        await self._registration.start()
        log.info("registered %s as %s", self.bookie_id, "read-only" if read_only else "writable")

    async def set_read_only(self, read_only: bool) -> None:
        if self._registration is not None:
            await self._registration.set_read_only(read_only)

    async def unregister(self) -> None:
        if self._registration is not None:
            registration, self._registration = self._registration, None
            await registration.aclose()

    async def aclose(self) -> None:
        await self.unregister()
        await self.cluster.aclose()
