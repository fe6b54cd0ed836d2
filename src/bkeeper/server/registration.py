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
"""

from __future__ import annotations

import logging

from bkeeper.common.auth import AUTH_DISABLED_PLUGIN, ServerAuthConfig
from bkeeper.common.errors import ClusterNotFoundError, CookieMismatchError, NoNodeError
from bkeeper.common.ids import BookieId
from bkeeper.common.tls import TlsServerConfig
from bkeeper.meta.bookie_info import (
    TLS_CLIENT_CERT_EXTENSION,
    TLS_EXTENSION,
    TLS_REQUIRED_EXTENSION,
    BookieServiceInfo,
)
from bkeeper.meta.cluster import ClusterMetadata
from bkeeper.meta.cookie import Cookie
from bkeeper.meta.registry import BookieRegistration
from bkeeper.server.cookie_check import read_local_cookie

__all__ = ["ClusterMembership", "published_info"]

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


class ClusterMembership:
    """The metadata session of one bookie."""

    def __init__(self, cluster: ClusterMetadata, bookie_id: str, instance_id: str) -> None:
        self.cluster = cluster
        self.bookie_id = bookie_id
        self.instance_id = instance_id
        self._registration: BookieRegistration | None = None

    @classmethod
    async def open(cls, uri: str, bookie_id: str) -> ClusterMembership:
        cluster = await ClusterMetadata.open(uri, require_cluster=True)
        try:
            instance_id = await cluster.instance_id()
            if instance_id is None:
                raise ClusterNotFoundError(f"the cluster at {uri} lost its INSTANCEID")
        except BaseException:
            await cluster.aclose()
            raise
        return cls(cluster, bookie_id, instance_id)

    async def refuse_if_data_lost(self, data_dir: str) -> None:
        """``CookieMismatchError`` when ``data_dir`` has no cookie but the metadata store
        holds one for this bookie id (module doc). Call it before the cookie is stamped."""
        if read_local_cookie(data_dir) is not None:
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
