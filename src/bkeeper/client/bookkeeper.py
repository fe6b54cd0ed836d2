"""``BookKeeper``: the client entry point — create, open, delete and list ledgers.

The client talks to the metadata store on create, open, close, ensemble change and delete,
and straight to bookies for data. After ``close`` every call fails with
:class:`ClientClosedError`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from types import TracebackType

from bkeeper.client.config import ClientConfig
from bkeeper.client.context import ClientContext
from bkeeper.client.handshake import client_security
from bkeeper.client.ledger_recovery import check_password, recover_ledger
from bkeeper.client.metadata import MetadataRetry, ReconnectingLedgers
from bkeeper.client.metrics import ClientMetrics
from bkeeper.client.placement import Domains
from bkeeper.client.pool import BookiePool, TcpTransport, Transport
from bkeeper.client.read_handle import ReadHandle
from bkeeper.client.write_handle import WriteHandle
from bkeeper.common.clock import Clock, default_clock
from bkeeper.common.errors import ClientClosedError, ConfigError, NoNodeError, ProtocolError
from bkeeper.common.validate import check_int_in_range, check_quorum
from bkeeper.meta.bookie_info import Endpoint
from bkeeper.meta.cluster import ClusterMetadata, MetadataConfig
from bkeeper.meta.ledger_metadata import LedgerMetadata, LedgerState
from bkeeper.meta.store import StoreConfig, Versioned
from bkeeper.wire.digest import DigestType

__all__ = ["BookKeeper"]

log = logging.getLogger(__name__)


class BookKeeper:
    """An asyncio client of a bkeeper (or Apache BookKeeper) cluster.

    ``async with BookKeeper("zk://127.0.0.1:2181/ledgers") as bk: ...``
    """

    def __init__(
        self,
        metadata_uri: str | None = None,
        config: ClientConfig | None = None,
        *,
        cluster: ClusterMetadata | None = None,
        transport: Transport | None = None,
        clock: Clock | None = None,
    ) -> None:
        if metadata_uri is None and cluster is None:
            raise ConfigError("BookKeeper needs a metadata URI (e.g. zk://127.0.0.1:2181/ledgers)")
        self._uri = metadata_uri
        self.config = config or ClientConfig()
        self._cluster = cluster
        self._owns_cluster = cluster is None
        self._transport = transport
        self._ctx: ClientContext | None = None
        self._writable: frozenset[str] = frozenset()
        self._racks_unreadable = ""  # the rack information's last decoding error
        self._clock: Clock = clock or default_clock()
        self._retry = MetadataRetry(self.config.metadata_reconnect_timeout_ms, self._clock)
        #: The client's metrics, with ``ClientConfig.metrics`` (else None).
        self.metrics = ClientMetrics(self._clock) if self.config.metrics else None

    @property
    def clock(self) -> Clock:
        """The clock of this client's timeouts and ages (given at creation; the system's by
        default); named logs and state machines built on the client take it too."""
        return self._clock

    async def start(self) -> BookKeeper:
        """Open the metadata session; ``ClusterNotFoundError`` if the URI's root holds no
        cluster. A client started already is returned as it is (``async with`` on a started
        client reads no metadata: it may be away for a while)."""
        if self._ctx is not None and not self._ctx.closed:
            return self
        if self._cluster is None:
            assert self._uri is not None
            store = StoreConfig(session_timeout_ms=self.config.metadata_session_timeout_ms)
            self._cluster = await ClusterMetadata.open(
                self._uri, MetadataConfig(store=store), require_cluster=True
            )
        else:
            await self._cluster.require_formatted()
        cluster = self._cluster
        transport = self._transport or TcpTransport(
            self._resolve,
            self.config.connect_timeout_ms / 1000.0,
            self.config.connection_requests_pending_max,
            self.config.connection_write_buffer_bytes_max,
            client_security(self.config),
            self.config.max_frame_bytes,
        )
        pool = BookiePool(transport, self.config.protocol)
        ledgers = ReconnectingLedgers(cluster.ledgers, self._retry)
        self._ctx = ClientContext(
            self.config,
            pool,
            ledgers,
            self._writable_bookies,
            metrics=self.metrics,
            mark_underreplicated=cluster.underreplication.mark_underreplicated,
            clock=self._clock,
            locations=self._locations,
        )
        return self

    async def __aenter__(self) -> BookKeeper:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def cluster(self) -> ClusterMetadata:
        if self._cluster is None:
            raise ClientClosedError("the client is not started")
        return self._cluster

    @property
    def pool(self) -> BookiePool:
        """The client's connections to bookies, for tools that send requests of their own
        (auto-recovery's recovery adds); ``ClientClosedError`` once closed."""
        return self._context().pool

    def _context(self) -> ClientContext:
        if self._ctx is None or self._ctx.closed:
            raise ClientClosedError("the client is closed")
        return self._ctx

    async def _resolve(self, bookie_id: str) -> Endpoint | tuple[str, int]:
        """The bookie's registered endpoint (with what it requires of clients), else its id
        read as ``host:port``."""
        registry = self.cluster.registry
        try:
            info = await self._retry(
                f"looking up bookie {bookie_id}", lambda: registry.service_info(bookie_id)
            )
            endpoint = info.endpoint()
        except NoNodeError:
            endpoint = None
        if endpoint is not None:
            return endpoint
        host, _, port = bookie_id.rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError(f"bookie id {bookie_id!r} is not registered and not host:port")
        return host, int(port)

    async def _locations(self) -> dict[str, str]:
        """The registered locations; none while the node is unreadable (said once per
        change of its content, the choice goes on as if no bookie had a location)."""
        racks = self.cluster.racks
        try:
            found = await self._retry("reading the bookies' network locations", racks.locations)
        except ProtocolError as exc:
            if str(exc) != self._racks_unreadable:
                self._racks_unreadable = str(exc)
                log.warning("%s: placement goes on without the registered locations", exc)
            return {}
        self._racks_unreadable = ""
        return found

    async def domains(self) -> Domains | None:
        """Where the bookies are, as this client's placement sees them now (None: random
        placement): registered locations, ``ClientConfig.racks`` winning (auto-recovery and
        the placement check use the same)."""
        return await self._context().domains()

    async def _writable_bookies(self) -> frozenset[str]:
        registry = self.cluster.registry
        bookies = await self._retry("listing the bookies", registry.bookies)
        return frozenset(bookies.writable)

    # -- ledgers -------------------------------------------------------------------------
    async def create_ledger(
        self,
        ensemble_size: int = 3,
        write_quorum: int = 2,
        ack_quorum: int = 2,
        digest: str | DigestType = "crc32c",
        password: bytes = b"",
        custom_metadata: Mapping[str, bytes] | None = None,
        ledger_id: int | None = None,
        bookies: Sequence[str] | None = None,
        explicit_lac_interval_ms: int | None = None,
    ) -> WriteHandle:
        """Create a ledger on ``ensemble_size`` writable bookies and return its writer.

        ``bookies``: the ensemble to start with, in order, instead of one chosen among the
        writable bookies (``ensemble_size`` of them, all different); a bookie that fails an
        add is still replaced as usual (ensemble change). ``explicit_lac_interval_ms``: this
        ledger's instead of ``ClientConfig.explicit_lac_interval_ms`` (None: the client's)."""
        ctx = self._context()
        check_quorum(ensemble_size, write_quorum, ack_quorum)
        if explicit_lac_interval_ms is not None:
            check_int_in_range("explicit_lac_interval_ms", explicit_lac_interval_ms, 0, 2**31 - 1)
        digest_type = DigestType.parse(digest)
        if bookies is None:
            ensemble = await ctx.new_ensemble(ensemble_size, write_quorum)
        elif len(bookies) != ensemble_size or len(set(bookies)) != len(bookies):
            raise ConfigError(
                f"bookies: {list(bookies)} is not {ensemble_size} different bookies (ensemble_size)"
            )
        else:
            ensemble = tuple(bookies)
        meta = LedgerMetadata.new(
            ensemble,
            write_quorum,
            ack_quorum,
            digest_type,
            password,
            ctime_ms=ctx.clock.wall_ms(),
            custom_metadata=custom_metadata,
            store_password=self.config.store_password_in_metadata,
        )
        new_id, versioned = await ctx.ledgers.create(meta, ledger_id)
        log.debug("created ledger %d on %s", new_id, ensemble)
        return WriteHandle(
            ctx, new_id, versioned, password, explicit_lac_interval_ms=explicit_lac_interval_ms
        )

    async def open_ledger(
        self,
        ledger_id: int,
        password: bytes = b"",
        *,
        recovery: bool = True,
        metadata: Versioned[LedgerMetadata] | None = None,
    ) -> ReadHandle:
        """Open for reading; with ``recovery`` (the default) fence the writer and seal it.
        Without recovery, ``metadata`` just read by the caller saves reading it again."""
        ctx = self._context()
        if recovery:
            versioned = await recover_ledger(ctx, ledger_id, password)
        else:
            versioned = metadata if metadata is not None else await ctx.ledgers.read(ledger_id)
            check_password(ledger_id, versioned.value, password)
        handle = ReadHandle(ctx, ledger_id, versioned, password)
        return handle

    async def delete_ledger(self, ledger_id: int, *, fence: bool = True) -> None:
        """Delete the ledger's metadata; bookies reclaim its data later.

        A ledger that is not CLOSED is first recovered (fenced and sealed), so that a writer
        still appending to it cannot acknowledge anything more: its next add fails with
        :class:`LedgerFencedError` instead of being acknowledged into a deleted ledger.
        ``fence=False`` skips that, for a ledger whose bookies are gone for good.
        """
        ctx = self._context()
        if fence:
            meta = (await ctx.ledgers.read(ledger_id)).value
            if meta.state is not LedgerState.CLOSED:
                await recover_ledger(ctx, ledger_id, meta.password)
        await ctx.ledgers.delete(ledger_id)

    async def ledger_metadata(self, ledger_id: int) -> LedgerMetadata:
        return (await self._context().ledgers.read(ledger_id)).value

    async def list_ledgers(self) -> AsyncIterator[int]:
        async for ledger_id in self._context().ledgers.ledger_ids():
            yield int(ledger_id)

    def metrics_text(self) -> bytes:
        """The client's metrics in Prometheus text format 0.0.4 (``ClientConfig.metrics``)."""
        return self._client_metrics().text()

    def start_metrics_server(self, port: int = 0, host: str = "127.0.0.1") -> int:
        """Serve the metrics as ``http://host:port/metrics`` until :meth:`close` (port 0:
        any free port); returns the port."""
        return self._client_metrics().start_server(port, host)

    def _client_metrics(self) -> ClientMetrics:
        if self.metrics is None:
            raise ConfigError("metrics: this client keeps none (ClientConfig(metrics=True))")
        return self.metrics

    async def close(self) -> None:
        """Close connections and the metadata session; later calls raise ClientClosedError."""
        if self.metrics is not None:
            self.metrics.stop_server()
        if self._ctx is not None:
            self._ctx.closed = True
            for handle in list(self._ctx.handles):
                await handle.abort(ClientClosedError("the client is closed"))
            for view in list(self._ctx.followers):
                view.stop()
            await self._ctx.pool.aclose()
        if self._cluster is not None and self._owns_cluster:
            cluster, self._cluster = self._cluster, None
            await cluster.aclose()
        await asyncio.sleep(0)
