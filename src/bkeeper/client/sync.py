"""A blocking facade over the asyncio client, for scripts and Spark executors.

One background thread per ``BookKeeper`` runs an event loop; every call submits a coroutine
to it and waits for the result (bounded by ``call_timeout_s``). Handles mirror the asyncio
ones. ``read_batches`` and ``read`` return iterators that fetch one batch of entries per
round trip to the loop thread, while the loop keeps the next batch requests in flight.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator, Coroutine, Generator, Iterator, Mapping
from typing import Any, TypeVar

from bkeeper.client.bookkeeper import BookKeeper as AsyncBookKeeper
from bkeeper.client.config import ClientConfig
from bkeeper.client.read_handle import ReadHandle as AsyncReadHandle
from bkeeper.client.write_handle import WriteHandle as AsyncWriteHandle
from bkeeper.meta.ledger_metadata import LedgerMetadata
from bkeeper.wire.digest import Entry

__all__ = ["BookKeeper", "LoopThread", "ReadHandle", "WriteHandle"]

T = TypeVar("T")


class LoopThread:
    """An event loop (uvloop when installed) on a daemon thread; ``call`` runs a coroutine
    on it and waits for the result."""

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

    def on_loop_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def call(self, coro: Coroutine[Any, Any, T], timeout_s: float | None) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self.loop.close()


class WriteHandle:
    def __init__(self, runner: LoopThread, handle: AsyncWriteHandle, timeout_s: float | None):
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
    def __init__(self, runner: LoopThread, handle: AsyncReadHandle, timeout_s: float | None):
        self._runner, self._handle, self._timeout = runner, handle, timeout_s
        self.ledger_id = handle.ledger_id

    @property
    def metadata(self) -> LedgerMetadata:
        return self._handle.metadata

    @property
    def last_add_confirmed(self) -> int:
        return self._handle.last_add_confirmed

    def read(self, first: int = 0, last: int | None = None) -> Iterator[Entry]:
        """Entries ``first..last`` (default: up to the LAC); never beyond the LAC."""
        for batch in self.read_batches(first, last):
            yield from batch

    def read_batches(
        self, first: int = 0, last: int | None = None, *, unconfirmed: bool = False
    ) -> Generator[list[Entry], None, None]:
        """As the asyncio ``read_batches``: lists of entries, one per loop round trip."""
        batches = self._handle.read_batches(first, last, unconfirmed=unconfirmed)
        try:
            while (batch := self._runner.call(_next_or_none(batches), self._timeout)) is not None:
                yield batch
        finally:
            # A stopped loop would never run aclose; on the loop thread (garbage collection)
            # waiting would deadlock: the loop's async-generator finalizer closes it then.
            if self._runner.loop.is_running() and not self._runner.on_loop_thread():
                self._runner.call(batches.aclose(), self._timeout)

    def read_last_add_confirmed(self) -> int:
        return self._runner.call(self._handle.read_last_add_confirmed(), self._timeout)

    def close(self) -> None:
        self._runner.call(self._handle.close(), self._timeout)


async def _next_or_none(iterator: AsyncGenerator[T, None]) -> T | None:
    try:
        return await anext(iterator)
    except StopAsyncIteration:
        return None


class BookKeeper:
    """Blocking client: ``with bkeeper.sync.BookKeeper(uri) as bk: ...``."""

    def __init__(
        self,
        metadata_uri: str,
        config: ClientConfig | None = None,
        call_timeout_s: float | None = 120.0,
    ) -> None:
        self._runner = LoopThread()
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

    def delete_ledger(self, ledger_id: int, *, fence: bool = True) -> None:
        self._runner.call(self._bk.delete_ledger(ledger_id, fence=fence), self._timeout)

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
