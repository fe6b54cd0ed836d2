"""A blocking facade over the asyncio client, for scripts and Spark executors.

One background thread per ``BookKeeper`` runs an event loop; every call submits a coroutine
to it and waits for the result, at most ``call_timeout_s``: past that the call is cancelled on
the loop and raises :class:`CallTimeoutError` (an append's outcome is then unknown, as after
any timeout). Handles mirror the asyncio ones, call for call. ``WriteHandle.append_async``
returns a :class:`concurrent.futures.Future` of the entry id, completed from the loop thread.
``read_batches``, ``read`` and ``read_unconfirmed`` return iterators that fetch one batch of
entries per round trip to the loop thread, while the loop keeps the next requests in flight.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import AsyncGenerator, Coroutine, Generator, Iterator, Mapping
from typing import Any, TypeVar

from bkeeper.client.bookkeeper import BookKeeper as AsyncBookKeeper
from bkeeper.client.config import ClientConfig
from bkeeper.client.entry import Entry
from bkeeper.client.read_handle import ReadHandle as AsyncReadHandle
from bkeeper.client.write_handle import WriteHandle as AsyncWriteHandle
from bkeeper.common.errors import CallTimeoutError
from bkeeper.meta.ledger_metadata import LedgerMetadata

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
        """Run ``coro`` on the loop and wait; :class:`CallTimeoutError` after ``timeout_s``
        (the coroutine is cancelled then)."""
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            if not future.cancel() and future.done():
                return future.result()  # it finished just as the wait ended
            what = getattr(coro, "__qualname__", "the call").split(".<locals>")[0]
            raise CallTimeoutError(
                f"{what} did not finish within {timeout_s:g} s (call_timeout_s); it was "
                "cancelled and its outcome is unknown"
            ) from None

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self.loop.close()


class WriteHandle:
    """The blocking twin of :class:`bkeeper.client.WriteHandle`."""

    def __init__(self, runner: LoopThread, handle: AsyncWriteHandle, timeout_s: float | None):
        self._runner, self._handle, self._timeout = runner, handle, timeout_s
        self.ledger_id = handle.ledger_id

    def append(self, data: bytes) -> int:
        return self._runner.call(self._handle.append(data), self._timeout)

    def append_async(self, data: bytes) -> concurrent.futures.Future[int]:
        """Wait for a pipeline slot and send ``data``; the returned future completes with
        the entry id (or the add's error) once an ack quorum made it durable."""
        result: concurrent.futures.Future[int] = concurrent.futures.Future()
        result.set_running_or_notify_cancel()

        async def send() -> None:
            future = await self._handle.append_async(data)
            future.add_done_callback(lambda done: _copy_outcome(done, result))

        self._runner.call(send(), self._timeout)
        return result

    def append_many(self, records: list[bytes]) -> list[int]:
        """Append records pipelined (``WriteHandle.append_many_async``, up to
        ``pending_adds_max`` a batch); returns their entry ids in order. An entry too large
        (``EntryTooLargeError``) is refused before any of them is sent."""
        self._handle.check_entry_sizes(records)

        async def run() -> list[int]:
            handle = self._handle
            step = handle.pending_adds_max
            batches = [
                (len(chunk), await handle.append_many_async(chunk))
                for chunk in (records[i : i + step] for i in range(0, len(records), step))
            ]
            ids: list[int] = []
            for count, future in batches:
                last = await future
                ids.extend(range(last - count + 1, last + 1))
            return ids

        return self._runner.call(run(), self._timeout)

    def force(self) -> int:
        return self._runner.call(self._handle.force(), self._timeout)

    @property
    def last_add_confirmed(self) -> int:
        return self._handle.last_add_confirmed

    @property
    def length(self) -> int:
        return self._handle.length

    @property
    def ensemble(self) -> tuple[str, ...]:
        return self._handle.ensemble

    @property
    def degraded(self) -> frozenset[str]:
        """The bookies of the ensemble that are down (degraded writes), or none."""
        return self._handle.degraded

    @property
    def metadata(self) -> LedgerMetadata:
        return self._handle.metadata

    @property
    def pending_adds(self) -> int:
        return self._handle.pending_adds

    def close(self) -> None:
        self._runner.call(self._handle.close(), self._timeout)


def _copy_outcome(done: asyncio.Future[int], result: concurrent.futures.Future[int]) -> None:
    if done.cancelled():
        result.cancel()
    elif (error := done.exception()) is not None:
        result.set_exception(error)
    else:
        result.set_result(done.result())


class ReadHandle:
    """The blocking twin of :class:`bkeeper.client.ReadHandle`."""

    def __init__(self, runner: LoopThread, handle: AsyncReadHandle, timeout_s: float | None):
        self._runner, self._handle, self._timeout = runner, handle, timeout_s
        self.ledger_id = handle.ledger_id

    @property
    def metadata(self) -> LedgerMetadata:
        return self._handle.metadata

    @property
    def is_closed(self) -> bool:
        return self._handle.is_closed

    @property
    def last_add_confirmed(self) -> int:
        return self._handle.last_add_confirmed

    @property
    def length(self) -> int:
        return self._handle.length

    def read(self, first: int = 0, last: int | None = None) -> Iterator[Entry]:
        """Entries ``first..last`` (default: up to the LAC); never beyond the LAC."""
        for batch in self.read_batches(first, last):
            yield from batch

    def read_unconfirmed(self, first: int, last: int) -> Iterator[Entry]:
        """Entries ``first..last`` even beyond the LAC (they may not be durable yet)."""
        for batch in self.read_batches(first, last, unconfirmed=True):
            yield from batch

    def read_entry(self, entry_id: int) -> Entry:
        return self._runner.call(self._handle.read_entry(entry_id), self._timeout)

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

    def wait_last_add_confirmed(self, previous: int, timeout_ms: int | None = None) -> int:
        """Long poll: once the LAC passes ``previous``, or the current LAC at the timeout."""
        return self._runner.call(
            self._handle.wait_last_add_confirmed(previous, timeout_ms), self._timeout
        )

    def read_explicit_last_add_confirmed(self) -> int:
        return self._runner.call(self._handle.read_explicit_last_add_confirmed(), self._timeout)

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
