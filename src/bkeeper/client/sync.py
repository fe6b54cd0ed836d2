"""A blocking facade over the asyncio client, for scripts and Spark executors.

One background thread per ``BookKeeper`` runs an event loop; every call submits a coroutine
to it and waits for the result (bounded by ``call_timeout_s``). Handles mirror the asyncio
ones. ``read`` returns an iterator that fetches entries in batches.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator, Mapping
from typing import Any, TypeVar

from bkeeper.client.bookkeeper import BookKeeper as AsyncBookKeeper
from bkeeper.client.config import ClientConfig
from bkeeper.client.read_handle import ReadHandle as AsyncReadHandle
from bkeeper.client.write_handle import WriteHandle as AsyncWriteHandle
from bkeeper.meta.ledger_metadata import LedgerMetadata
from bkeeper.wire.digest import Entry

__all__ = ["BookKeeper", "ReadHandle", "WriteHandle"]

T = TypeVar("T")

_BATCH = 1000


class _LoopThread:
    def __init__(self) -> None:
        try:
            import uvloop

            self.loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
        except ImportError:  # pragma: no cover
            self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="bkeeper-client", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def call(self, coro: Coroutine[Any, Any, T], timeout_s: float | None) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self.loop.close()


class WriteHandle:
    def __init__(self, runner: _LoopThread, handle: AsyncWriteHandle, timeout_s: float | None):
        self._runner, self._handle, self._timeout = runner, handle, timeout_s
        self.ledger_id = handle.ledger_id

    def append(self, data: bytes) -> int:
        return self._runner.call(self._handle.append(data), self._timeout)

    def append_many(self, records: list[bytes]) -> list[int]:
        """Append records pipelined; returns their entry ids in order."""

        async def run() -> list[int]:
            futures = [await self._handle.append_async(r) for r in records]
            return list(await asyncio.gather(*futures))

        return self._runner.call(run(), self._timeout)

    @property
    def last_add_confirmed(self) -> int:
        return self._handle.last_add_confirmed

    def close(self) -> None:
        self._runner.call(self._handle.close(), self._timeout)


class ReadHandle:
    def __init__(self, runner: _LoopThread, handle: AsyncReadHandle, timeout_s: float | None):
        self._runner, self._handle, self._timeout = runner, handle, timeout_s
        self.ledger_id = handle.ledger_id

    @property
    def metadata(self) -> LedgerMetadata:
        return self._handle.metadata

    @property
    def last_add_confirmed(self) -> int:
        return self._handle.last_add_confirmed

    def read(self, first: int = 0, last: int | None = None) -> Iterator[Entry]:
        end = self._handle.last_add_confirmed if last is None else last
        position = first
        while position <= end:
            batch_end = min(end, position + _BATCH - 1)

            async def fetch(a: int = position, b: int = batch_end) -> list[Entry]:
                return [e async for e in self._handle.read(a, b)]

            yield from self._runner.call(fetch(), self._timeout)
            position = batch_end + 1

    def read_last_add_confirmed(self) -> int:
        return self._runner.call(self._handle.read_last_add_confirmed(), self._timeout)

    def close(self) -> None:
        self._runner.call(self._handle.close(), self._timeout)


class BookKeeper:
    """Blocking client: ``with bkeeper.sync.BookKeeper(uri) as bk: ...``."""

    def __init__(
        self,
        metadata_uri: str,
        config: ClientConfig | None = None,
        call_timeout_s: float | None = 120.0,
    ) -> None:
        self._runner = _LoopThread()
        self._timeout = call_timeout_s

        async def start() -> AsyncBookKeeper:
            return await AsyncBookKeeper(metadata_uri, config).start()

        try:
            self._bk = self._runner.call(start(), call_timeout_s)
        except BaseException:
            self._runner.stop()
            raise

    def __enter__(self) -> BookKeeper:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def create_ledger(
        self,
        ensemble_size: int = 3,
        write_quorum: int = 2,
        ack_quorum: int = 2,
        digest: str = "crc32c",
        password: bytes = b"",
        custom_metadata: Mapping[str, bytes] | None = None,
    ) -> WriteHandle:
        handle = self._runner.call(
            self._bk.create_ledger(
                ensemble_size, write_quorum, ack_quorum, digest, password, custom_metadata
            ),
            self._timeout,
        )
        return WriteHandle(self._runner, handle, self._timeout)

    def open_ledger(
        self, ledger_id: int, password: bytes = b"", *, recovery: bool = True
    ) -> ReadHandle:
        handle = self._runner.call(
            self._bk.open_ledger(ledger_id, password, recovery=recovery), self._timeout
        )
        return ReadHandle(self._runner, handle, self._timeout)

    def delete_ledger(self, ledger_id: int) -> None:
        self._runner.call(self._bk.delete_ledger(ledger_id), self._timeout)

    def ledger_metadata(self, ledger_id: int) -> LedgerMetadata:
        return self._runner.call(self._bk.ledger_metadata(ledger_id), self._timeout)

    def list_ledgers(self) -> list[int]:
        async def run() -> list[int]:
            return [i async for i in self._bk.list_ledgers()]

        return self._runner.call(run(), self._timeout)

    def close(self) -> None:
        try:
            self._runner.call(self._bk.close(), self._timeout)
        finally:
            self._runner.stop()
