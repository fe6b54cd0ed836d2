"""The bookie process: ordered start and shutdown around storage, listener and monitors.

Start: bind the listener and the admin HTTP server (if ``http_port`` is set; a port in use
is refused before anything else is touched) -> cookie check (refuse on mismatch) -> storage
open (journal replay, on a worker thread) -> serve (listener and admin) -> background tasks
(checkpoints, disk monitor, garbage collection, registration, which publishes the admin
endpoint). Shutdown (``aclose``): close the admin server -> stop accepting -> wait (bounded)
for in-flight requests to drain -> close connections -> close storage (drains the journal,
checkpoints). Every background task belongs to the bookie's
:class:`~bkeeper.common.tasks.TaskOwner`; its loops (checkpoints, disk monitor, connection
sweep, garbage collection, registration) end by themselves once a stop is asked for (a
garbage-collection pass under way ends early), and shutdown waits for them before closing the
storage. A loop that fails stops the bookie: its error is logged when it ends, and ``aclose``
raises it once the shutdown is done. A start that fails after the storage opened closes it
again. Time (the drain's deadline, the connection table's timeouts) comes from the ``Clock``
given.

Read-only mode: forced by ``BookieConfig.readonly``, or while the storage engine reports its
data disk FULL or NO_ROOM (:mod:`bkeeper.storage.disk_space`: thresholds checked as the
engine writes, and every ``disk_check_interval_ms`` here). Entering it takes effect at once,
from whichever thread saw the disk fill (the next add gets EREADONLY); the log line,
listeners and the registration under ``available/readonly`` follow on the event loop. The
bookie turns writable, and registers so, once usage is below the low-water mark.

Metrics (``metrics_enabled``, :mod:`bkeeper.server.metrics`): the bookie's metric set, and
any another component of the process adds (:meth:`Bookie.add_metric_set`), on ``/metrics``.
Garbage collection: ``garbage_collector`` (:mod:`bkeeper.server.garbage`, set once the
storage is open; with no ``metadata_uri`` it only collects entry logs); the disk is checked
after every pass, so a pass that freed enough makes the bookie writable at once.
Background loops: :mod:`bkeeper.server.bookie_loops`.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from bkeeper.common.clock import Clock, default_clock
from bkeeper.common.errors import ConfigError, StorageError
from bkeeper.common.metrics import MetricSet
from bkeeper.common.tasks import TaskOwner, within
from bkeeper.common.threads import Threads
from bkeeper.server.bookie_loops import (
    CheckpointDue,
    keep_registration,
    run_checkpoints,
    unless_stopped,
    watch_disk,
)
from bkeeper.server.config import BookieConfig, public_values
from bkeeper.server.connection import BookieConnection
from bkeeper.server.connections import LISTEN_BACKLOG, ConnectionTable
from bkeeper.server.cookie_check import check_or_stamp_cookie
from bkeeper.server.garbage import GarbageCollector
from bkeeper.server.gc_wake import LedgerDeletionWatch
from bkeeper.server.handlers import BookieState, RequestHandlers
from bkeeper.server.metrics import (
    METRICS_PATH,
    bookie_registry,
    metrics_handler,
    register_bookie_gauges,
)
from bkeeper.server.registration import ClusterMembership, unreachable_address_warning
from bkeeper.server.request_metrics import RequestMetrics
from bkeeper.server.security import BookieSecurity
from bkeeper.storage import (
    DiskState,
    FileSystem,
    GroupTokens,
    OsFileSystem,
    Storage,
    StorageConfig,
)
from bkeeper.storage.dirs import StorageLayout
from bkeeper.storage.inspect_dirs import BookieDirs

if TYPE_CHECKING:  # imported when used: see Bookie.__init__
    from bkeeper.server.admin_http import AdminHttpServer
    from bkeeper.server.admin_routes import BookieStatus

__all__ = ["Bookie"]

log = logging.getLogger(__name__)

#: Listening on these addresses means every interface: the registration names ``host``.
_ANY_ADDRESS = frozenset({"", "0.0.0.0", "::"})


class Bookie:
    """One bookie: ``await start()``, serve, ``await aclose()``."""

    def __init__(
        self,
        config: BookieConfig,
        storage_config: StorageConfig | None = None,
        fs: FileSystem | None = None,
        instance_id: str = "",
        clock: Clock | None = None,
        threads: Threads | None = None,
    ) -> None:
        """``threads``: what the storage engine's threads run on (None: OS threads)."""
        self.config = config
        self._threads = threads
        self._clock: Clock = default_clock() if clock is None else clock
        self.storage_config = storage_config or StorageConfig(data_dir=config.data_dir)
        if self.storage_config.data_dir != config.data_dir:
            raise ConfigError("storage data_dir must equal the bookie's data_dir")
        self._fs = fs
        self._instance_id = instance_id
        self.state = BookieState(readonly=config.readonly)
        self._mode_readonly = config.readonly  # the mode announced (log, listeners, registry)
        self._admin_readonly = False  # asked for through the admin API (set_read_only)
        self._mode_changed = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.storage: Storage | None = None
        self._handlers: RequestHandlers | None = None
        self._server: asyncio.Server | None = None
        self.connections = ConnectionTable(config, self._clock)
        #: TLS and auth of the bookie's connections (None: both off); built here so that a
        #: certificate that cannot be loaded fails the start with one line.
        self.security = BookieSecurity.from_config(config, self._clock)
        self._tasks = TaskOwner("bookie")
        self._loops: list[asyncio.Task[None]] = []
        self._failure: BaseException | None = None
        self._stopping = asyncio.Event()
        self._checkpoint_due: CheckpointDue | None = None
        self._readonly_listeners: list[Callable[[bool], None]] = []
        self._membership: ClusterMembership | None = None
        self.garbage_collector: GarbageCollector | None = None
        self._registered = False
        self._serving = False
        self.port = config.port
        self._admin: AdminHttpServer | None = None
        if config.http_port is not None:
            # aiohttp (a third of a bookie's start-up CPU: its client's TLS contexts) is
            # imported by a bookie that serves HTTP only.
            from bkeeper.server.admin_http import AdminHttpConfig, AdminHttpServer
            from bkeeper.server.admin_routes import add_bookie_routes

            admin_config = AdminHttpConfig(
                config.effective_http_host,
                config.http_port,
                writes_enabled=config.http_admin_writes,
                authenticate=None if self.security is None else self.security.authenticate,
                metrics_open=config.http_metrics_open,
                # TLS on the bookie port: the admin port serves HTTPS, with the same context
                # (certificate; client certificates required when the bookie requires them).
                ssl_context=None if self.security is None else self.security.ssl_context,
                tls_handshake_timeout_ms=10_000
                if config.tls is None
                else config.tls.handshake_timeout_ms,
            )
            self._admin = AdminHttpServer(admin_config)
            add_bookie_routes(self, self._admin)
        self.http_port = config.http_port
        self.metrics: MetricSet | None = None
        self._metric_sets: list[MetricSet] = []
        if config.metrics_enabled:
            self.metrics = MetricSet()
            self._metric_sets.append(self.metrics)
            register_bookie_gauges(self.metrics, self.connections, self.state)
            if self._admin is not None:
                registry = bookie_registry(self.metric_sets)
                self._admin.add_route("GET", METRICS_PATH, metrics_handler(registry))

    def metric_sets(self) -> list[MetricSet]:
        """The metric sets ``/metrics`` serves (none with ``metrics_enabled`` off)."""
        return list(self._metric_sets)

    def add_metric_set(self, metrics: MetricSet) -> None:
        """Serve another component's metrics (one running in this process) too; ignored
        when this bookie keeps no metrics."""
        if self.metrics is not None:
            self._metric_sets.append(metrics)

    def remove_metric_set(self, metrics: MetricSet) -> None:
        """Stop serving a set :meth:`add_metric_set` added (its component stopped)."""
        if metrics in self._metric_sets:
            self._metric_sets.remove(metrics)

    @property
    def admin_server(self) -> AdminHttpServer | None:
        """The admin HTTP server (None without ``http_port``): more routes are added to it
        (``add_route``) before :meth:`start`."""
        return self._admin

    @property
    def bookie_id(self) -> str:
        return self.config.bookie_id or f"{self.config.advertised_host}:{self.port}"

    def add_readonly_listener(self, listener: Callable[[bool], None]) -> None:
        """Call ``listener(readonly)`` whenever the bookie switches mode."""
        self._readonly_listeners.append(listener)

    # -- start -------------------------------------------------------------------------
    async def start(self) -> None:
        config = self.config
        loop = self._loop = asyncio.get_running_loop()
        handlers_box: list[RequestHandlers] = []

        def new_connection() -> BookieConnection:
            return self._new_connection(handlers_box[0])

        # Bind first (without serving) so that port 0 resolves to the real port, which is
        # part of the bookie id the cookie checks.
        try:
            self._server = await loop.create_server(
                new_connection,
                config.host,
                config.port,
                reuse_address=True,
                backlog=LISTEN_BACKLOG,
                start_serving=False,
            )
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise ConfigError(
                    f"cannot listen on {config.host}:{config.port}: the port is in use by "
                    "another process"
                ) from exc
            raise ConfigError(f"cannot listen on {config.host}:{config.port}: {exc}") from exc
        sockets = self._server.sockets
        if sockets:
            self.port = sockets[0].getsockname()[1]
        try:
            if self._admin is not None:
                self.http_port = await self._admin.bind()
            if config.metadata_uri:
                self._membership = await ClusterMembership.open(
                    config.metadata_uri, self.bookie_id, config.metadata_connect_timeout_ms
                )
                self._instance_id = self._membership.instance_id
                await self._membership.refuse_if_data_lost(config.data_dir, self._fs)
            local_cookie = check_or_stamp_cookie(
                config, self._instance_id, self.bookie_id, self._fs
            )
            if self._membership is not None:
                await self._membership.check_cookie(local_cookie)

            checkpoint_due = self._checkpoint_due = CheckpointDue(loop)

            def on_durable(tokens: GroupTokens, error: BaseException | None) -> None:
                handlers_box[0].on_durable_threadsafe(tokens, error)
                storage = self.storage
                if storage is not None:
                    checkpoint_due.journaled(storage)

            self.storage = await asyncio.to_thread(
                Storage.open,
                self.storage_config,
                self._fs,
                on_durable,
                self._on_disk_state,
                self._clock,
                self.metrics,
                self._threads,
            )
        except BaseException:
            self._server.close()
            if self._admin is not None:
                await self._admin.aclose()
            if self._membership is not None:
                await self._membership.aclose()
            raise
        try:
            await self._serve(handlers_box)
        except BaseException:
            await self.aclose()
            raise
        log.info(
            "bookie %s listening on %s:%d (%s, at most %d connections)%s",
            self.bookie_id,
            config.host,
            self.port,
            "read-only" if self.state.readonly else "writable",
            self.connections.connections_max,
            f"; admin on {self.admin_url}" if self.admin_url else "",
        )
        unreachable = unreachable_address_warning(
            config.advertised_host, self.port, config.metadata_uri
        )
        if unreachable is not None:
            log.warning("%s", unreachable)

    @property
    def admin_url(self) -> str | None:
        """``http://host:port`` (``https://`` with TLS) of the admin HTTP server, once bound;
        None without one."""
        if self._admin is None or self.http_port is None:
            return None
        return f"{self._admin.scheme}://{self._advertised_http_host()}:{self.http_port}"

    def _advertised_http_host(self) -> str:
        host = self.config.effective_http_host
        return self.config.advertised_host if host in _ANY_ADDRESS else host

    async def _serve(self, handlers_box: list[RequestHandlers]) -> None:
        assert self.storage is not None and self._server is not None
        request_metrics = (
            None if self.metrics is None else RequestMetrics(self.metrics, self._clock)
        )
        self._handlers = RequestHandlers(self.config, self.storage, self.state, request_metrics)
        handlers_box.append(self._handlers)
        self._apply_mode()  # settle the mode before serving and registering
        await self._server.start_serving()
        self._serving = True
        storage, stopping = self.storage, self._stopping
        interval_s = self.config.checkpoint_interval_ms / 1000.0
        assert self._checkpoint_due is not None
        checkpoints = run_checkpoints(
            storage, interval_s, self._clock, stopping, self._checkpoint_due
        )
        self._run_loop(checkpoints, "checkpoints")
        interval_s = self.config.disk_check_interval_ms / 1000.0
        monitor = watch_disk(self.check_disk, interval_s, stopping, self.bookie_id)
        self._run_loop(monitor, "disk monitor")
        self._run_loop(self.connections.run(self._stopping), "connection sweep")
        if self.security is not None and self.security.secret_reloader is not None:
            # An idle bookie notices a changed token secret file too (docs/security.md).
            self._run_loop(self.security.run(self._stopping), "token secret refresh")
        self._start_garbage_collector(self.storage)
        if self._admin is not None:  # once what it reports on (the GC too) is there
            await self._admin.start()
        if self._membership is not None:
            self._mode_changed.clear()  # a switch during the registration sets it again
            if await self._register_unless_stopped():
                registration = keep_registration(
                    self._membership, self._mode_changed, lambda: self._mode_readonly, stopping
                )
                self._run_loop(registration, "registration")

    def _start_garbage_collector(self, storage: Storage) -> None:
        metadata = deletions = None
        if self._membership is not None:
            cluster = self._membership.cluster
            metadata = cluster.ledgers
            deletions = LedgerDeletionWatch(cluster.store, cluster.root)
        collector = self.garbage_collector = GarbageCollector(
            self.config,
            storage,
            metadata,
            allowed_on_full_disk=self.storage_config.gc_allowed_on_full_disk,
            clock=self._clock,
            metrics=self.metrics,
            deletions=deletions,  # a full disk: a pass as soon as a ledger here is deleted
            after_pass=self.check_disk,  # writable at once when the pass freed enough
        )
        self._run_loop(collector.run(), "garbage collection")
        collector.on_disk_state(storage.disk_state)  # full already: collect at once

    def _run_loop(self, loop: Coroutine[Any, Any, None], name: str) -> None:
        """Run a background loop of the bookie; it ends by itself once a stop is asked for."""
        task = self._tasks.spawn(loop, name)
        self._loops.append(task)
        task.add_done_callback(self._loop_ended)

    def _loop_ended(self, task: asyncio.Task[None]) -> None:
        # The owner logs the failure with its traceback; the bookie stops, and aclose raises it.
        if task.cancelled() or task.exception() is None:
            return
        if self._failure is None:
            self._failure = task.exception()
        self.request_stop()

    async def _register_unless_stopped(self) -> bool:
        """Register; False when a stop was asked for first. Registering may wait up to
        ``stale_registration_wait_ms`` for a dead predecessor's node to go, and a SIGTERM
        meanwhile must stop the bookie then, not once the wait is over (or has failed)."""
        assert self._membership is not None
        if self.config.network_location:
            publish = self._membership.publish_location(
                self.config.network_location, self.config.advertised_host
            )
            if not await unless_stopped(self._tasks, publish, "writing its rack", self._stopping):
                return False
        http = None if self.http_port is None else (self._advertised_http_host(), self.http_port)
        security = (self.config.tls, self.config.auth)  # what registration says it requires
        register = self._membership.register(
            self.config.advertised_host, self.port, self._mode_readonly, http, security
        )
        if await unless_stopped(self._tasks, register, "registering", self._stopping):
            self._registered = True
            return True
        log.info("bookie %s: stop asked for while registering; not registered", self.bookie_id)
        return False

    def _new_connection(self, handlers: RequestHandlers) -> BookieConnection:
        # Admission (the connection limit) happens in connection_made, once the peer is known.
        return BookieConnection(
            self.config,
            self.connections,
            handlers.dispatch,
            handlers.add,
            self.security,
        )

    # -- background --------------------------------------------------------------------
    def check_disk(self) -> bool:
        """Check the data disk now and switch mode to match; whether the bookie is read-only."""
        if self.storage is not None:
            self.storage.check_disk()
        self._apply_mode()
        return self.state.readonly

    def _on_disk_state(self, state: DiskState) -> None:
        """Storage listener, called on any thread. Going read-only takes effect at once (a
        plain bool the handlers read: the next add is refused); the rest follows on the
        loop, which derives the mode again from the storage's current state."""
        if state is not DiskState.WRITABLE:
            self.state.readonly = True
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._apply_mode)
            loop.call_soon_threadsafe(self._disk_state_changed, state)

    def _disk_state_changed(self, state: DiskState) -> None:
        if self.garbage_collector is not None:
            self.garbage_collector.on_disk_state(state)

    def _apply_mode(self) -> None:
        storage = self.storage
        if storage is None:
            return
        readonly = (
            self.config.readonly
            or self._admin_readonly
            or storage.disk_state is not DiskState.WRITABLE
        )
        self.state.readonly = readonly
        if readonly == self._mode_readonly:
            return
        self._mode_readonly = readonly
        log.warning("bookie %s is now %s", self.bookie_id, "read-only" if readonly else "writable")
        for listener in self._readonly_listeners:
            listener(readonly)
        self._mode_changed.set()

    # -- what the admin endpoints read (server.admin_routes.AdminBookie) ------------------
    def status(self) -> BookieStatus:
        from bkeeper.server.admin_routes import BookieStatus  # see __init__

        storage = self.storage
        return BookieStatus.of(
            running=self._serving and storage is not None,
            stopping=self._stopping.is_set(),
            readonly=self.state.readonly,
            registering=self._membership is not None and not self._registered,
            room_for_high_priority=storage is not None and storage.room_for_high_priority,
        )

    def disk_usage(self) -> tuple[int, int]:
        """``(total, free)`` bytes of the data disk."""
        if self.storage is None:
            raise StorageError(f"bookie {self.bookie_id} has no storage open")
        return self.storage.disk_usage()

    def config_values(self) -> dict[str, object]:
        """The bookie's and its storage's configuration, by option name, as JSON values with
        every secret redacted (:func:`~bkeeper.server.config.public_values`)."""
        values = {**public_values(self.storage_config), **public_values(self.config)}
        values.pop("extra", None)  # -o options this bookie does not know: anything at all
        return values

    def set_read_only(self, read_only: bool) -> str:
        """Make the bookie read-only, or writable again (as the admin API asks); "" when it
        now is as asked, else why not (writable: its configuration or its disk)."""
        self._admin_readonly = read_only
        self._apply_mode()
        if self.state.readonly == read_only:
            return ""
        if self.config.readonly:
            return "the bookie is configured read-only (readonly)"
        if self.storage is None:
            return "the bookie has no storage open"
        return f"its data disk is {self.storage.disk_state.name} (disk_usage_threshold)"

    def disk_files(self) -> tuple[FileSystem, BookieDirs]:
        """The file system and directories of the bookie, to look at its files."""
        fs = self._fs if self._fs is not None else OsFileSystem()
        return fs, BookieDirs(StorageLayout.of(self.storage_config), None)

    # -- stop --------------------------------------------------------------------------
    async def wait_stopped(self) -> None:
        await self._stopping.wait()

    def request_stop(self) -> None:
        self._stopping.set()
        if self._checkpoint_due is not None:
            self._checkpoint_due.wake()
        if self.garbage_collector is not None:
            self.garbage_collector.request_stop()

    @property
    def stop_requested(self) -> bool:
        return self._stopping.is_set()

    async def aclose(self) -> None:
        """Drain in-flight requests, checkpoint and stop; safe to call twice. Raises the
        error of a background loop that failed (and so stopped the bookie), once stopped."""
        self.request_stop()
        self._mode_changed.set()  # ends the registration loop
        if self._admin is not None:
            await self._admin.aclose()
        if self._membership is not None:
            try:
                await self._membership.unregister()
            except Exception:
                log.exception("could not unregister %s", self.bookie_id)
        if self._server is not None:
            self._server.close()
        clock = self._clock
        deadline = clock.monotonic() + self.config.shutdown_drain_timeout_ms / 1000.0
        while clock.monotonic() < deadline and any(c.busy for c in self.connections.connections):
            await asyncio.sleep(0.01)
        for conn in self.connections.connections:
            conn.close()
        # The loops end by themselves now that the stop is set; a checkpoint under way
        # finishes before the storage closes (cancelling would leave its thread running).
        loops, self._loops = self._loops, []
        await asyncio.gather(*loops, return_exceptions=True)
        await self._tasks.aclose()
        if self._server is not None:
            server, self._server = self._server, None
            with contextlib.suppress(Exception):
                await within(server.wait_closed(), 2.0)
        if self.storage is not None:
            storage, self.storage = self.storage, None
            await asyncio.to_thread(storage.close)
        if self._membership is not None:
            membership, self._membership = self._membership, None
            await membership.aclose()
        log.info("bookie %s stopped", self.bookie_id)
        failure, self._failure = self._failure, None
        if failure is not None:
            raise failure
