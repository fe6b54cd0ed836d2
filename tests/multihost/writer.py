"""A steady writer for the multi-host tests: :class:`PacedWriter` appends to one ledger at a
fixed rate from a thread of its own (its own event loop and ``BookKeeper`` client, in this
process's namespace), while the test's main thread restarts and kills the cluster's
processes (so that they are started from the main thread: their parent-death signal is tied
to the thread that forks them).

Entry ``s`` of the writer's sequence carries :func:`payload` ``(s)``; every acknowledgement
is kept (entry id -> sequence number), every failure too. :func:`read_ledger` reads a ledger
back with a client of its own, for the check that no acknowledged entry was lost.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import TypeVar

from bkeeper.client import BookKeeper, ClientConfig, WriteHandle

T = TypeVar("T")

PASSWORD = b"multihost"
#: How often the writer looks at its schedule (each look sends what is due).
TICK_S = 0.005
#: How long the writer has to create its ledger, and to drain and close it when stopped.
WRITER_START_S = 30.0
WRITER_STOP_S = 60.0


def payload(sequence: int, size: int = 100) -> bytes:
    head = b"%010d" % sequence
    return head + b"x" * (size - len(head))


@dataclass
class WriterResult:
    ledger_id: int
    appended: int
    #: entry id -> sequence number, for every acknowledged append.
    acknowledged: dict[int, int] = field(default_factory=dict)
    #: "append <sequence>: <error>" (or "close: ..."), for every append that failed.
    failures: list[str] = field(default_factory=list)
    #: The longest time between two acknowledgements while appends were due.
    longest_gap_s: float = 0.0


class PacedWriter:
    """Appends ``rate_per_s`` entries a second to a new ledger (E/Qw/Qa ``quorum``) until
    :meth:`stop`; module doc."""

    def __init__(
        self,
        metadata_uri: str,
        rate_per_s: int,
        quorum: tuple[int, int, int] = (3, 2, 2),
        config: ClientConfig | None = None,
    ) -> None:
        self.metadata_uri = metadata_uri
        self.rate_per_s = rate_per_s
        self.quorum = quorum
        self.config = config
        self._changed = threading.Condition()
        self._stopping = threading.Event()
        self._result: WriterResult | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: BookKeeper | None = None
        self._error: BaseException | None = None
        self._last_ack = 0.0
        self._thread = threading.Thread(target=self._main, name="paced-writer", daemon=True)

    @property
    def acknowledged(self) -> int:
        with self._changed:
            return 0 if self._result is None else len(self._result.acknowledged)

    def start(self) -> None:
        """Start the thread; return once the ledger exists and appends are under way."""
        self._thread.start()
        with self._changed:
            ready = self._changed.wait_for(
                lambda: self._result is not None or self._error is not None, WRITER_START_S
            )
        if self._error is not None:
            raise AssertionError(f"the writer could not start: {self._error!r}")
        if not ready:
            raise AssertionError(f"the writer had no ledger within {WRITER_START_S:g} s")

    def wait_acknowledged(self, count: int, timeout_s: float, what: str) -> float:
        """Wait until ``count`` appends in all were acknowledged; the seconds it took.
        ``AssertionError`` saying ``what`` was waited for, after ``timeout_s`` or at the
        writer's first failure."""
        began = time.monotonic()
        with self._changed:
            done = self._changed.wait_for(
                lambda: (
                    self._result is not None
                    and (len(self._result.acknowledged) >= count or bool(self._result.failures))
                ),
                timeout_s,
            )
            assert self._result is not None
            failures, acknowledged = list(self._result.failures), len(self._result.acknowledged)
        assert not failures, f"waiting for {what}: appends failed: {failures[:3]}"
        assert done, f"{what}: {acknowledged} of {count} appends acknowledged after {timeout_s:g} s"
        return time.monotonic() - began

    def run(self, call: Callable[[BookKeeper], Awaitable[T]], timeout_s: float) -> T:
        """``call(client)`` on the writer's loop, with its client (its metadata session)."""
        assert self._loop is not None and self._client is not None
        client = self._client

        async def on_loop() -> T:
            return await call(client)

        future = asyncio.run_coroutine_threadsafe(on_loop(), self._loop)
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise AssertionError(
                f"a call on the writer's client took over {timeout_s:g} s"
            ) from None

    def stop(self) -> WriterResult:
        """Stop appending, wait for every append in flight, close the ledger; the result."""
        self._stopping.set()
        self._thread.join(WRITER_STOP_S)
        assert not self._thread.is_alive(), f"the writer did not stop within {WRITER_STOP_S:g} s"
        if self._error is not None:
            raise AssertionError(f"the writer failed: {self._error!r}") from self._error
        assert self._result is not None
        return self._result

    def _main(self) -> None:
        try:
            asyncio.run(self._write())
        except BaseException as exc:  # handed to the test's thread
            with self._changed:
                self._error = exc
                self._changed.notify_all()

    async def _write(self) -> None:
        self._loop = asyncio.get_running_loop()
        ensemble, write_quorum, ack_quorum = self.quorum
        async with BookKeeper(self.metadata_uri, self.config) as client:
            self._client = client
            handle = await client.create_ledger(
                ensemble_size=ensemble, write_quorum=write_quorum, ack_quorum=ack_quorum,
                password=PASSWORD,
            )  # fmt: skip
            with self._changed:
                self._last_ack = time.monotonic()
                self._result = WriterResult(handle.ledger_id, 0)
                self._changed.notify_all()
            pending = await self._append_until_stopped(handle)
            await asyncio.gather(*pending, return_exceptions=True)
            try:
                await handle.close()
            except Exception as exc:
                self._record_failure(f"close: {exc!r}")

    async def _append_until_stopped(self, handle: WriteHandle) -> list[asyncio.Future[int]]:
        assert self._result is not None
        loop = asyncio.get_running_loop()
        began, sent = loop.time(), 0
        pending: list[asyncio.Future[int]] = []
        while not self._stopping.is_set():
            due = int((loop.time() - began) * self.rate_per_s)
            while sent < due:
                try:
                    future = await handle.append_async(payload(sent))
                except Exception as exc:
                    self._record_failure(f"append {sent}: {exc!r}")
                    return pending
                future.add_done_callback(self._on_done(sent))
                pending.append(future)
                sent += 1
                self._result.appended = sent
            pending = [f for f in pending if not f.done()]
            await asyncio.sleep(TICK_S)
        return pending

    def _on_done(self, sequence: int) -> Callable[[asyncio.Future[int]], None]:
        def done(future: asyncio.Future[int]) -> None:
            if future.cancelled():
                self._record_failure(f"append {sequence}: cancelled")
            elif (error := future.exception()) is not None:
                self._record_failure(f"append {sequence}: {error!r}")
            else:
                self._record_ack(future.result(), sequence)

        return done

    def _record_ack(self, entry_id: int, sequence: int) -> None:
        now = time.monotonic()
        with self._changed:
            assert self._result is not None
            self._result.acknowledged[entry_id] = sequence
            self._result.longest_gap_s = max(self._result.longest_gap_s, now - self._last_ack)
            self._last_ack = now
            self._changed.notify_all()

    def _record_failure(self, failure: str) -> None:
        with self._changed:
            assert self._result is not None
            self._result.failures.append(failure)
            self._changed.notify_all()


async def read_ledger(metadata_uri: str, ledger_id: int) -> dict[int, bytes]:
    """Every entry of the (closed) ledger, read by a client of its own: entry id -> data."""
    async with BookKeeper(metadata_uri) as client:
        handle = await client.open_ledger(ledger_id, password=PASSWORD)
        return {entry.entry_id: entry.data async for entry in handle.read(0)}


def run_in_thread(make: Callable[[], Coroutine[object, object, T]]) -> T:
    """``asyncio.run(make())`` in a thread of its own (the test's thread keeps no loop)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(make())).result()


def check_all_read_back(metadata_uri: str, result: WriterResult) -> int:
    """Read the writer's ledger back (a client of its own, in a thread of its own) and fail
    naming the first acknowledged entry missing or different; the number of entries read."""
    entries = run_in_thread(lambda: read_ledger(metadata_uri, result.ledger_id))
    missing = [e for e in sorted(result.acknowledged) if e not in entries]
    assert not missing, f"{len(missing)} acknowledged entries lost, the first: {missing[:5]}"
    wrong = [e for e, s in sorted(result.acknowledged.items()) if entries[e] != payload(s)]
    assert not wrong, f"{len(wrong)} entries read back differ, the first: {wrong[:5]}"
    return len(entries)
