"""The bookie process: ordered start and shutdown around storage, listener and monitors.

Start: cookie check (refuse on mismatch) -> storage open (journal replay, on a worker thread)
-> listener -> background tasks (checkpoints, disk monitor). Shutdown (``aclose``): stop
accepting -> wait (bounded) for in-flight requests to drain -> close connections -> close
storage (drains the journal, checkpoints). Every background task belongs to the bookie's
``TaskGroup``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import shutil
import time
from collections.abc import Callable

from bkeeper.common.errors import ConfigError
from bkeeper.server.config import BookieConfig
from bkeeper.server.connection import BookieConnection
from bkeeper.server.connections import LISTEN_BACKLOG, ConnectionTable
from bkeeper.server.cookie_check import check_or_stamp_cookie
from bkeeper.server.handlers import BookieState, RequestHandlers
from bkeeper.server.registration import ClusterMembership
from bkeeper.storage import FileSystem, Storage, StorageConfig

__all__ = ["Bookie"]

log = logging.getLogger(__name__)

#: Each wait between checkpoints is the interval times a random factor within 1 +- this.
CHECKPOINT_JITTER = 0.25


class Bookie:
    """One bookie: ``await start()``, serve, ``await aclose()``."""

    def __init__(
        self,
        config: BookieConfig,
        storage_config: StorageConfig | None = None,
        fs: FileSystem | None = None,
        instance_id: str = "",
    ) -> None:
        self.config = config
        self.storage_config = storage_config or StorageConfig(data_dir=config.data_dir)
        if self.storage_config.data_dir != config.data_dir:
            raise ConfigError("storage data_dir must equal the bookie's data_dir")
        self._fs = fs
        self._instance_id = instance_id
        self.state = BookieState(readonly=config.readonly)
        self.storage: Storage | None = None
        self._handlers: RequestHandlers | None = None
        self._server: asyncio.Server | None = None
        self.connections = ConnectionTable(config)
        self._tasks: asyncio.TaskGroup | None = None
        self._task_group_cm: asyncio.TaskGroup | None = None
        self._stopping = asyncio.Event()
        self._readonly_listeners: list[Callable[[bool], None]] = []
        self._membership: ClusterMembership | None = None
        self.port = config.port

    @property
    def bookie_id(self) -> str:
        return self.config.bookie_id or f"{self.config.host}:{self.port}"

    def add_readonly_listener(self, listener: Callable[[bool], None]) -> None:
        """Call ``listener(readonly)`` whenever the bookie switches mode."""
        self._readonly_listeners.append(listener)

    # -- start -------------------------------------------------------------------------
    async def start(self) -> None:
        config = self.config
        loop = asyncio.get_running_loop()
        handlers_box: list[RequestHandlers] = []

        def new_connection() -> BookieConnection:
            return self._new_connection(handlers_box[0])

        # Bind first (without serving) so that port 0 resolves to the real port, which is
        # part of the bookie id the cookie checks.
        self._server = await loop.create_server(
            new_connection,
            config.host,
            config.port,
            reuse_address=True,
            backlog=LISTEN_BACKLOG,
            start_serving=False,
        )
        sockets = self._server.sockets
        if sockets:
            self.port = sockets[0].getsockname()[1]
        try:
            if config.metadata_uri:
                self._membership = await ClusterMembership.open(config.metadata_uri, self.bookie_id)
                self._instance_id = self._membership.instance_id
            local_cookie = check_or_stamp_cookie(config, self._instance_id, self.bookie_id)
            if self._membership is not None:
                await self._membership.check_cookie(local_cookie)

            def on_durable(tokens: list[object], error: BaseException | None) -> None:
                handlers_box[0].on_durable_threadsafe(tokens, error)

            self.storage = await asyncio.to_thread(
                Storage.open, self.storage_config, self._fs, on_durable
            )
        except BaseException:
            self._server.close()
            if self._membership is not None:
                await self._membership.aclose()
            raise
        self._handlers = RequestHandlers(config, self.storage, self.state)
        handlers_box.append(self._handlers)
        await self._server.start_serving()
        self.check_disk()  # settle the mode before registering
        self._task_group_cm = asyncio.TaskGroup()
        self._tasks = await self._task_group_cm.__aenter__()
        self._tasks.create_task(self._checkpoint_loop())
        self._tasks.create_task(self._disk_monitor_loop())
        self._tasks.create_task(self.connections.run(self._stopping))
        if self._membership is not None:
            await self._membership.register(config.host, self.port, self.state.readonly)
        log.info(
            "bookie %s listening on %s:%d (%s, at most %d connections)",
            self.bookie_id,
            config.host,
            self.port,
            "read-only" if self.state.readonly else "writable",
            self.connections.connections_max,
        )

    def _new_connection(self, handlers: RequestHandlers) -> BookieConnection:
        # Admission (the connection limit) happens in connection_made, once the peer is known.
        return BookieConnection(self.config, self.connections, handlers.dispatch, handlers.add_v2)

    # -- background --------------------------------------------------------------------
    async def _checkpoint_loop(self) -> None:
        interval = self.config.checkpoint_interval_ms / 1000.0
        while not self._stopping.is_set():
            # Jitter keeps bookies started together from checkpointing together: with an
            # ack quorum below the write quorum, one bookie's checkpoint then costs no add
            # any latency.
            wait = interval * random.uniform(1 - CHECKPOINT_JITTER, 1 + CHECKPOINT_JITTER)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), wait)
            if self._stopping.is_set() or self.storage is None:
                return
            try:
                await asyncio.to_thread(self.storage.checkpoint)
            except Exception:
                log.exception("checkpoint failed")

    async def _disk_monitor_loop(self) -> None:
        interval = self.config.disk_check_interval_ms / 1000.0
        while not self._stopping.is_set():
            self.check_disk()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), interval)

    def check_disk(self, used_fraction: float | None = None) -> bool:
        """Switch read-only mode by disk usage; returns whether the bookie is read-only."""
        if used_fraction is None:
            usage = shutil.disk_usage(self.config.data_dir)
            used_fraction = 1.0 - usage.free / usage.total if usage.total else 1.0
        if self.config.readonly:
            return self._set_readonly(True)
        if used_fraction > self.config.disk_usage_threshold:
            return self._set_readonly(True)
        if used_fraction < self.config.disk_usage_lwm_threshold:
            return self._set_readonly(False)
        return self.state.readonly

    def _set_readonly(self, readonly: bool) -> bool:
        if readonly != self.state.readonly:
            self.state.readonly = readonly
            log.warning(
                "bookie %s is now %s", self.bookie_id, "read-only" if readonly else "writable"
            )
            for listener in self._readonly_listeners:
                listener(readonly)
            if self._membership is not None and self._tasks is not None:
                self._tasks.create_task(self._switch_registration(readonly))
        return readonly

    async def _switch_registration(self, readonly: bool) -> None:
        assert self._membership is not None
        try:
            await self._membership.set_read_only(readonly)
        except Exception:
            log.exception("could not switch the registration of %s", self.bookie_id)

    # -- stop --------------------------------------------------------------------------
    async def wait_stopped(self) -> None:
        await self._stopping.wait()

    def request_stop(self) -> None:
        self._stopping.set()

    async def aclose(self) -> None:
        """Drain in-flight requests, checkpoint and stop; safe to call twice."""
        self._stopping.set()
        if self._membership is not None:
            try:
                await self._membership.unregister()
            except Exception:
                log.exception("could not unregister %s", self.bookie_id)
        if self._server is not None:
            self._server.close()
        deadline = time.monotonic() + self.config.shutdown_drain_timeout_ms / 1000.0
        while time.monotonic() < deadline and any(c.busy for c in self.connections.connections):
            await asyncio.sleep(0.01)
        for conn in self.connections.connections:
            conn.close()
        if self._task_group_cm is not None:
            cm, self._task_group_cm = self._task_group_cm, None
            await cm.__aexit__(None, None, None)
        if self._server is not None:
            server, self._server = self._server, None
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 2.0)
        if self.storage is not None:
            storage, self.storage = self.storage, None
            await asyncio.to_thread(storage.close)
        if self._membership is not None:
            membership, self._membership = self._membership, None
            await membership.aclose()
        log.info("bookie %s stopped", self.bookie_id)
