"""Where logs live: one node per log under ``<parent of the ledgers root>/bkeeper/logs``
(its :class:`~bkeeper.namedlog.core.log_metadata.LogMetadata`, JSON); every write a compare-and-set
on the version read."""

from __future__ import annotations

import asyncio
import contextlib

from bkeeper.common.errors import (
    ConnectionLossError,
    LogExistsError,
    LogNotFoundError,
    NodeExistsError,
    NoNodeError,
    SessionExpiredError,
)
from bkeeper.meta.events import Subscription
from bkeeper.meta.store import EventType, NodeStore, WatchEvent, WatchKind, join_path
from bkeeper.namedlog.core.config import LogSettings
from bkeeper.namedlog.core.log_metadata import LogMetadata, check_log_name, logs_root

__all__ = ["LogStore"]


class LogStore:
    """Reads and writes log metadata nodes; every write is a compare-and-set."""

    def __init__(self, store: NodeStore, ledgers_root: str) -> None:
        self._store = store
        self.root = logs_root(ledgers_root)

    def path(self, name: str) -> str:
        return join_path(self.root, check_log_name(name))

    async def create(
        self, name: str, ctime_ms: int, settings: LogSettings | None = None
    ) -> tuple[LogMetadata, int]:
        meta = LogMetadata(ctime_ms).with_settings(settings or LogSettings())
        try:
            await self._store.create(self.path(name), meta.encode(), make_parents=True)
        except NodeExistsError:
            raise LogExistsError(f"log {name!r} exists already") from None
        return meta, 0

    async def read(self, name: str) -> tuple[LogMetadata, int]:
        try:
            data, version = await self._store.get(self.path(name))
        except NoNodeError:
            raise LogNotFoundError(f"no log named {name!r}") from None
        return LogMetadata.decode(data, name), version

    async def watch(self, name: str) -> Subscription[WatchEvent]:
        """A persistent watch on the log's node (which need not exist): every change,
        deletion or creation of it, and ``RESET`` after a reconnection."""
        return await self._store.watch(self.path(name), WatchKind.DATA, persistent=True)

    async def wait_change(self, name: str, version: int, timeout_s: float) -> None:
        """Return once the log's metadata has moved past ``version`` (or the log is gone),
        or after ``timeout_s``: a watch on its node, so that a reader waiting for the ledger
        list to grow (a writer's roll, a Spark commit) sees the new ledger at once."""
        path = self.path(name)
        watch = await self._store.watch(path, WatchKind.DATA)
        try:
            stat = await self._store.exists(path)
            if stat is None or stat.version != version:
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    async for _event in watch:
                        return
        finally:
            watch.close()

    async def wait_deleted(self, name: str) -> None:
        """Return once the log's node is deleted: a persistent watch on it, and a look at the
        node after each event (after a reconnection's ``RESET`` too, as events may have been
        missed meanwhile). A node deleted and made again (a new log of the same name) counts
        as deleted. ``MetadataClosedError`` when the store closes first."""
        path = self.path(name)
        watch = await self._store.watch(path, WatchKind.DATA, persistent=True)
        try:
            while True:
                try:
                    if await self._store.exists(path) is None:
                        return
                except (ConnectionLossError, SessionExpiredError):
                    pass  # the store reconnects and the watch reports RESET
                if (await watch.get()).type is EventType.DELETED:
                    return
        finally:
            watch.close()

    async def write(self, name: str, meta: LogMetadata, version: int) -> int:
        """The new version; ``MetadataVersionError`` when ``version`` is stale."""
        try:
            return await self._store.set(self.path(name), meta.encode(), version)
        except NoNodeError:
            raise LogNotFoundError(f"no log named {name!r}") from None

    async def delete(self, name: str, version: int) -> None:
        try:
            await self._store.delete(self.path(name), version)
        except NoNodeError:
            raise LogNotFoundError(f"no log named {name!r}") from None

    async def names(self) -> list[str]:
        try:
            return await self._store.children(self.root)
        except NoNodeError:
            return []
