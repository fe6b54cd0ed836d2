"""Green threads (bkeeper.sim.green): the threads port on one OS thread under the event loop.

First the primitives on their own (scheduling, timers on the loop's clock, FIFO wake-ups,
waits on the loop's own greenlet, failures), then the storage engine on the in-memory
filesystem with green threads: adds become durable in order, reads come back, close drains
the journal, abort and a crash lose only what was not synced, the group-commit window is a
timer on the loop, compaction passes, no OS thread is started, and a run replays exactly.
Last, a bookie opens its storage on green threads.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import struct
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bkeeper.common.errors import NoSuchEntryError
from bkeeper.sim.green import GreenDeadlockError, GreenThreads, GreenWorker, WorkerState
from bkeeper.storage import GroupTokens, MemoryFileSystem, Storage, StorageConfig
from bkeeper.storage.entry_log import entry_log_id
from bkeeper.testing.virtual_time import LoopClock, on_virtual_time

KEY = b"k" * 20
_HEAD = struct.Struct(">qqqq")


def body(ledger_id: int, entry_id: int, size: int = 0) -> bytes:
    payload = f"entry {ledger_id}/{entry_id}".encode().ljust(size, b".")
    return _HEAD.pack(ledger_id, entry_id, -1, len(payload)) + payload


def config(**overrides: Any) -> StorageConfig:
    settings: dict[str, Any] = {
        "data_dir": "/data",
        "journal_max_group_wait_ms": 0.0,
        "journal_file_bytes_max": 16 * 1024,
        "write_cache_bytes_max": 64 * 1024,
        "read_cache_bytes_max": 8 * 1024,
        "entry_log_bytes_max": 24 * 1024,
    }
    settings.update(overrides)
    return StorageConfig(**settings)


class Acks:
    """Records ``on_durable`` calls with the loop's time; coroutines wait for them."""

    def __init__(self) -> None:
        self.tokens: list[object] = []
        self.groups: list[list[object]] = []
        self.times: list[float] = []
        self.errors: list[BaseException] = []
        self.then: Callable[[GroupTokens], None] | None = None
        self._changed = asyncio.Event()

    def __call__(self, tokens: GroupTokens, error: BaseException | None) -> None:
        if error is not None:
            self.errors.append(error)
        self.tokens.extend(tokens)
        self.groups.append(list(tokens))
        self.times.append(asyncio.get_running_loop().time())
        self._changed.set()
        if self.then is not None:
            self.then(tokens)

    async def wait_count(self, count: int) -> None:
        async with asyncio.timeout(30):  # virtual seconds: a hang fails at once
            while len(self.tokens) < count:
                self._changed.clear()
                await self._changed.wait()


async def open_storage(
    fs: MemoryFileSystem, threads: GreenThreads, acks: Acks | None = None, **overrides: Any
) -> Storage:
    return Storage.open(config(**overrides), fs, acks, clock=LoopClock(), threads=threads)


def new_os_threads(before: list[threading.Thread]) -> list[str]:
    """The names of the OS threads running now that were not in ``before``."""
    return [thread.name for thread in threading.enumerate() if thread not in before]


async def settle() -> None:
    """Let the loop run every step that is ready (no time passes on its own for these)."""
    for _ in range(20):
        await asyncio.sleep(0)


# -- the primitives ----------------------------------------------------------------------
@on_virtual_time
async def test_start_and_notify_only_schedule():
    threads = GreenThreads(asyncio.get_running_loop())
    lock = threading.Lock()
    cond = threads.condition(lock)
    steps: list[str] = []

    def run() -> None:
        steps.append("started")
        with cond:
            steps.append(f"woken {cond.wait()}")

    worker = threads.thread(run, "w")
    worker.start()
    assert steps == [] and worker.state is WorkerState.READY and worker.is_alive()
    await settle()
    assert steps == ["started"] and worker.state is WorkerState.WAITING
    assert threads.describe() == "green: w waits on condition.wait(timeout=None) (no timer)"
    with cond:
        cond.notify()
        assert steps == ["started"]  # the notifier holds the lock: nothing runs now
    assert worker.state is WorkerState.READY
    await settle()
    assert steps == ["started", "woken True"] and not worker.is_alive()
    assert threads.workers == () and threads.errors == []


@on_virtual_time
async def test_a_timeout_is_a_timer_on_the_loop_and_a_notify_cancels_it():
    loop = asyncio.get_running_loop()
    threads = GreenThreads(loop)
    cond = threads.condition(threading.Lock())
    results: list[tuple[bool, float]] = []

    def run() -> None:
        with cond:
            results.append((cond.wait(2.5), loop.time()))
            results.append((cond.wait(100.0), loop.time()))

    start = loop.time()
    threads.thread(run, "w").start()
    await asyncio.sleep(3)  # virtual: the first wait times out at 2.5 s
    assert results == [(False, start + 2.5)]
    assert threads.workers[0].waits_on_timer
    with cond:
        cond.notify()
    await settle()
    assert results[1] == (True, start + 3)
    await asyncio.sleep(1000)
    assert not [timer for timer in loop._scheduled if not timer.cancelled()]  # type: ignore[attr-defined]


@on_virtual_time
async def test_wake_ups_are_first_in_first_out():
    threads = GreenThreads(asyncio.get_running_loop())
    cond = threads.condition(threading.Lock())
    event = threads.event()
    order: list[str] = []

    def waiter(name: str) -> Callable[[], None]:
        def run() -> None:
            with cond:
                cond.wait()
            order.append(f"{name} notified")
            event.wait()
            order.append(f"{name} set")

        return run

    for name in ("a", "b", "c", "d"):
        threads.thread(waiter(name), name).start()
    await settle()
    with cond:
        cond.notify(2)
    await settle()
    with cond:
        cond.notify_all()
    await settle()
    event.set()
    await settle()
    assert order == [
        *(f"{name} notified" for name in "abcd"),
        *(f"{name} set" for name in "abcd"),
    ]
    assert event.wait(0) and event.wait()  # set: no wait at all, on the loop too


@on_virtual_time
async def test_an_exception_in_a_worker_is_logged_and_recorded(caplog):
    threads = GreenThreads(asyncio.get_running_loop(), name="bookie-1")
    failure = ValueError("boom")

    def run() -> None:
        raise failure

    worker = threads.thread(run, "bkeeper-flusher")
    with caplog.at_level(logging.ERROR, logger="bkeeper.sim.green"):
        worker.start()
        await settle()
    assert threads.errors == [failure]
    assert "bookie-1: green thread bkeeper-flusher failed" in caplog.text
    assert "ValueError: boom" in caplog.text
    assert not worker.is_alive()
    worker.join()  # ended: returns at once


@on_virtual_time
async def test_a_join_on_the_loop_runs_the_workers_it_waits_for():
    threads = GreenThreads(asyncio.get_running_loop())
    event = threads.event()
    done: list[str] = []

    def first() -> None:
        event.wait()
        done.append("first")

    def second() -> None:
        event.set()
        done.append("second")

    one, two = threads.thread(first, "one"), threads.thread(second, "two")
    one.start()
    two.start()
    one.join()  # on the loop's greenlet: runs both, in the order they were scheduled
    assert done == ["second", "first"] and threads.workers == ()


@on_virtual_time
async def test_a_wait_on_the_loop_that_cannot_end_raises():
    threads = GreenThreads(asyncio.get_running_loop(), name="bookie-2")
    never = threads.event()
    cond = threads.condition(threading.Lock())

    def forever() -> None:
        never.wait()

    def on_a_timer() -> None:
        with cond:
            cond.wait(5.0)

    waits, sleeps = threads.thread(forever, "waits"), threads.thread(on_a_timer, "sleeps")
    waits.start()
    sleeps.start()
    with pytest.raises(GreenDeadlockError) as raised:
        waits.join()
    message = str(raised.value)
    assert message == (
        "join(waits) on the event loop itself cannot end without the loop running: bookie-2: "
        "waits waits on event.wait(timeout=None) (no timer); "
        "sleeps waits on condition.wait(timeout=5.0) (a timer set)"
    )
    with pytest.raises(GreenDeadlockError, match=r"event\.wait"):
        never.wait()
    never.set()
    await asyncio.sleep(6)
    assert threads.workers == ()


@on_virtual_time
async def test_a_lock_held_by_the_loop_while_it_joins_is_a_deadlock_not_a_hang():
    threads = GreenThreads(asyncio.get_running_loop())
    lock = threading.Lock()
    cond = threads.condition(lock)

    def run() -> None:
        with cond:
            cond.wait()

    worker = threads.thread(run, "w")
    worker.start()
    await settle()
    with cond:
        cond.notify()
        with pytest.raises(GreenDeadlockError, match="w cannot take its lock again"):
            worker.join()  # with real threads: a deadlock for ever


@on_virtual_time
async def test_only_the_loops_os_thread_may_use_them():
    threads = GreenThreads(asyncio.get_running_loop())
    worker = threads.thread(lambda: None, "w")
    with pytest.raises(RuntimeError, match="another OS thread"):
        await asyncio.to_thread(worker.start)
    worker.start()
    with pytest.raises(RuntimeError, match="only be started once"):
        worker.start()
    worker.join()


# -- the storage engine on green threads ------------------------------------------------
@on_virtual_time
async def test_adds_become_durable_in_order_and_read_back_without_an_os_thread():
    os_threads = threading.enumerate()
    threads = GreenThreads(asyncio.get_running_loop())
    fs, acks = MemoryFileSystem(), Acks()
    storage = await open_storage(fs, threads, acks)
    assert [worker.describe() for worker in threads.workers] == [
        "bkeeper-journal ready",
        "bkeeper-flusher ready",
    ]
    tokens = []
    for entry_id in range(300):  # enough to fill the write cache: the flusher flushes
        storage.add_entry(7, entry_id, KEY, body(7, entry_id, 400), token=entry_id)
        tokens.append(entry_id)
        if entry_id % 50 == 49:
            await acks.wait_count(len(tokens))
    assert acks.tokens == tokens and acks.errors == []
    assert len(acks.groups) == 6  # each burst: the journal took it as one group
    assert new_os_threads(os_threads) == []
    logs = [name for name in fs.list_dir("/data/current/ledgers") if entry_log_id(name) is not None]
    assert logs != []  # the flusher's thread flushed the write cache
    storage.checkpoint()
    assert storage.read_entry(7, 123) == body(7, 123, 400)
    storage.close()
    assert threads.workers == () and threads.errors == []
    reopened = await open_storage(fs, GreenThreads(asyncio.get_running_loop()))
    assert reopened.list_entries(7) == tokens
    assert reopened.read_entry(7, 299) == body(7, 299, 400)
    reopened.close()
    assert new_os_threads(os_threads) == []


@on_virtual_time
async def test_close_writes_everything_queued_on_the_loop():
    loop = asyncio.get_running_loop()
    threads = GreenThreads(loop)
    fs, acks = MemoryFileSystem(), Acks()
    storage = await open_storage(fs, threads, acks, journal_max_group_wait_ms=500.0)
    storage.add_entry(1, 0, KEY, body(1, 0), token=0)
    await acks.wait_count(1)
    journal = threads.workers[0]
    at = loop.time()
    for entry_id in range(1, 10):
        storage.add_entry(1, entry_id, KEY, body(1, entry_id), token=entry_id)
    assert acks.tokens == [0] and journal.state is WorkerState.READY
    storage.close()  # no await: the journal runs inside close, on the loop's greenlet
    assert acks.tokens == list(range(10)) and acks.groups[1:] == [list(range(1, 10))]
    assert acks.times[1] == at and loop.time() == at
    assert threads.workers == ()
    again = await open_storage(fs.crash(), GreenThreads(loop))  # all of it was synced
    assert again.list_entries(1) == list(range(10))
    again.close()


@on_virtual_time
async def test_abort_and_a_crash_lose_only_what_was_not_synced():
    loop = asyncio.get_running_loop()
    threads = GreenThreads(loop)
    fs, acks = MemoryFileSystem(), Acks()
    storage = await open_storage(fs, threads, acks)
    for entry_id in range(5):
        storage.add_entry(3, entry_id, KEY, body(3, entry_id), token=entry_id)
    await acks.wait_count(5)
    for entry_id in range(5, 10):
        storage.add_entry(3, entry_id, KEY, body(3, entry_id), token=entry_id)
    storage.abort()  # process death: the journal and the flusher stop, nothing more written
    assert threads.workers == () and acks.tokens == list(range(5))
    await settle()
    assert acks.tokens == list(range(5)) and threads.errors == []
    after = await open_storage(fs.crash(), GreenThreads(loop))
    assert after.list_entries(3) == list(range(5))
    with pytest.raises(NoSuchEntryError):
        after.read_entry(3, 5)
    after.close()


@on_virtual_time
async def test_the_group_commit_window_is_a_timer_on_the_loop():
    loop = asyncio.get_running_loop()
    threads = GreenThreads(loop)
    acks = Acks()
    storage = await open_storage(MemoryFileSystem(), threads, acks, journal_max_group_wait_ms=50)

    def add_next(tokens: GroupTokens) -> None:
        # Records queued while the journal works (here: from its own callback) wait for the
        # window that began when the previous group started.
        if tokens[-1] < 3:
            entry_id = tokens[-1] + 1
            storage.add_entry(2, entry_id, KEY, body(2, entry_id), token=entry_id)

    acks.then = add_next
    await settle()  # the journal waits, idle
    start = loop.time()
    storage.add_entry(2, 0, KEY, body(2, 0), token=0)
    await acks.wait_count(4)
    assert acks.groups == [[0], [1], [2], [3]]
    assert acks.times == pytest.approx([start, start + 0.05, start + 0.1, start + 0.15], abs=1e-9)
    assert storage.stats().journal_groups_cut == {"idle": 1, "window": 3}
    storage.close()


async def _fill_for_compaction(storage: Storage, acks: Acks) -> None:
    """Six ledgers interleaved in every entry log, then four of them deleted."""
    tokens = 0
    for entry_id in range(40):
        for ledger_id in range(1, 7):
            storage.add_entry(ledger_id, entry_id, KEY, body(ledger_id, entry_id, 200))
        storage.force_ledger(1, token=tokens)
        tokens += 1
        if entry_id % 5 == 4:
            await acks.wait_count(tokens)
            storage.checkpoint()
    for ledger_id in range(1, 5):
        storage.delete_ledger(ledger_id, token=tokens)
        tokens += 1
    await acks.wait_count(tokens)


class _NamingThreads(GreenThreads):
    """Green threads that note the name of every thread made."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self.names: list[str] = []

    def thread(
        self, target: Callable[[], None], name: str, *, lower_priority: bool = False
    ) -> GreenWorker:
        self.names.append(name)
        return super().thread(target, name, lower_priority=lower_priority)


@on_virtual_time
async def test_a_compaction_pass_runs_on_a_green_thread():
    loop = asyncio.get_running_loop()
    threads = _NamingThreads(loop)
    acks = Acks()
    storage = await open_storage(
        MemoryFileSystem(),
        threads,
        acks,
        compaction_rate_bytes_per_s=0,
        write_cache_bytes_max=256 * 1024,
    )
    await _fill_for_compaction(storage, acks)
    # Unthrottled, the pass's thread never waits on a timer: it can run from the loop itself.
    result = storage.collect_garbage(minor=True, major=True)
    assert threads.names == ["bkeeper-flusher", "bkeeper-journal", "bkeeper-compaction"]
    assert result.logs_removed + result.logs_compacted > 0 and result.error == ""
    assert storage.list_entries(5) == list(range(40)) and storage.list_entries(6) == list(range(40))
    assert storage.read_entry(6, 17) == body(6, 17, 200)
    storage.close()
    assert threads.errors == []


@on_virtual_time
async def test_a_throttled_compaction_pass_waits_on_the_loops_clock():
    loop = asyncio.get_running_loop()
    threads = GreenThreads(loop)
    acks = Acks()
    storage = await open_storage(
        MemoryFileSystem(),
        threads,
        acks,
        compaction_rate_bytes_per_s=10_000,
        write_cache_bytes_max=256 * 1024,
    )
    await _fill_for_compaction(storage, acks)
    # Throttled, the pass's thread waits on timers: the loop must run meanwhile, so the pass
    # is run from a green thread of its own (on the loop's greenlet: GreenDeadlockError).
    outcome: list[Any] = []

    def collect() -> None:
        outcome.append(storage.collect_garbage(minor=True, major=True))

    start = loop.time()
    collector = threads.thread(collect, "collector")
    collector.start()
    async with asyncio.timeout(600):
        while collector.is_alive():
            await asyncio.sleep(0.1)
    [result] = outcome
    assert result.bytes_copied > 0
    assert loop.time() - start >= result.bytes_copied / 10_000  # paced on virtual time
    assert storage.list_entries(5) == list(range(40))
    storage.close()
    assert threads.errors == []


def _trace_of_a_run() -> list[tuple[float, list[object]]]:
    @on_virtual_time
    async def run() -> list[tuple[float, list[object]]]:
        threads = GreenThreads(asyncio.get_running_loop())
        acks = Acks()
        storage = await open_storage(MemoryFileSystem(), threads, acks, journal_max_group_wait_ms=3)
        entry_ids = dict.fromkeys(range(1, 5), 0)

        async def writer(ledger_id: int) -> None:
            for _ in range(30):
                entry_id = entry_ids[ledger_id]
                entry_ids[ledger_id] += 1
                token = (ledger_id, entry_id)
                storage.add_entry(
                    ledger_id, entry_id, KEY, body(ledger_id, entry_id, 900), token=token
                )
                await asyncio.sleep(0.001 * ledger_id)

        await asyncio.gather(*(writer(ledger_id) for ledger_id in entry_ids))
        await acks.wait_count(120)
        storage.close()
        return list(zip(acks.times, acks.groups, strict=True))

    return run()


def test_a_run_replays_exactly():
    first = _trace_of_a_run()
    assert len(first) > 4
    assert _trace_of_a_run() == first


# -- a bookie --------------------------------------------------------------------------
class _InlineExecutor(concurrent.futures.ThreadPoolExecutor):
    """Runs what is handed to it at once, on the caller's thread (as the simulator's loop
    does): the storage opens and closes on the loop's OS thread, where green threads are."""

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:
            future.set_exception(exc)
        return future


def test_a_bookie_opens_its_storage_on_green_threads(tmp_path: Path):
    from bkeeper.client.bookie_client import BookieClient
    from bkeeper.server import Bookie, BookieConfig
    from bkeeper.wire.codes import Protocol, StatusCode
    from bkeeper.wire.digest import DigestManager, DigestType, master_key
    from bkeeper.wire.messages import AddRequest, ReadRequest

    key = master_key(b"pw")

    def entry(entry_id: int) -> bytes:
        return DigestManager(9, DigestType.CRC32C, b"pw").encode_entry(
            entry_id, -1, 10 * (entry_id + 1), b"0123456789"
        )

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(_InlineExecutor())
        threads = GreenThreads(loop)
        directory = str(tmp_path / "bookie")
        bookie = Bookie(
            BookieConfig(data_dir=directory, port=0),
            StorageConfig(data_dir=directory),
            MemoryFileSystem(),
            threads=threads,
        )
        os_threads = threading.enumerate()
        await bookie.start()
        try:
            assert [worker.name for worker in threads.workers] == [
                "bkeeper-journal",
                "bkeeper-flusher",
            ]
            client = await BookieClient.connect("127.0.0.1", bookie.port, Protocol.V3)
            try:
                added = await asyncio.gather(
                    *(client.send(AddRequest(9, e, key, entry(e))) for e in range(20))
                )
                assert [r.status for r in added] == [StatusCode.EOK] * 20
                read = await client.request(ReadRequest(9, 13))
                assert read.status == StatusCode.EOK
            finally:
                await client.aclose()
            assert new_os_threads(os_threads) == []
        finally:
            await bookie.aclose()
        assert threads.workers == () and threads.errors == []

    asyncio.run(main())
