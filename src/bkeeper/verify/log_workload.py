"""The log workload: two writers fencing each other on one named log, a tailing reader, and a
subscription consumed in sessions; every operation recorded.

* ``writers`` tasks each open the log's writer (fencing the other: the last to open wins),
  append a random number of records (``in_flight`` unanswered at most), pause, and open again;
  each append's ``invoke`` carries the digest of its unique payload, its ``ok`` the position.
* a reader tails the log from its earliest record, recording each record it reads.
* a consumer subscribes, receives and acknowledges records for a while, flushes (recorded
  with the last acknowledged position), closes, and starts a new session.

:func:`read_log` reads the whole log at the end, and the subscription's mark.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
from collections.abc import Callable, Coroutine
from typing import Any

from bkeeper.client.bookkeeper import BookKeeper
from bkeeper.client.config import ClientConfig
from bkeeper.common.errors import BKeeperError
from bkeeper.namedlog import EARLIEST, LogConfig, LogWriter, NamedLogs, Position
from bkeeper.verify.history import History
from bkeeper.verify.workload import (
    WorkloadConfig,
    _pause,
    _why,
    bounded,
    digest,
    start_client,
)

__all__ = ["LOG_NAME", "FinalLog", "LogWorkload", "read_log"]

LOG_NAME = "verify"
SUBSCRIPTION = "verify-sub"
#: Small ledgers, so that rolls (and readers moving across them) happen often.
LOG_CONFIG = LogConfig(roll_bytes=64 * 1024, tail_poll_ms=200)


class LogWorkload:
    """The workload of one run (module doc); :meth:`run` until ``stop`` is set."""

    def __init__(
        self,
        uri: str,
        history: History,
        seed: int,
        config: WorkloadConfig,
        name: str = LOG_NAME,
        log_config: LogConfig = LOG_CONFIG,
    ) -> None:
        self.uri = uri
        self.name = name
        self.log_config = log_config
        self.history = history
        self.seed = seed
        self.config = config
        self.created: list[int] = []  # ledger ids seen (the corrupt nemesis picks from them)
        self._client = ClientConfig(
            pending_adds_max=config.in_flight,
            add_timeout_ms=5_000,
            read_timeout_ms=5_000,
            explicit_lac_interval_ms=50,
        )

    async def run(self, stop: asyncio.Event) -> None:
        await self.create()
        async with asyncio.TaskGroup() as group:
            group.create_task(self.run_writers(stop))
            group.create_task(self.run_others(stop))

    async def create(self) -> None:
        """Create the log (left as it is if it exists: a harness restart)."""
        async with await start_client(self.uri, self._client) as setup:
            logs = NamedLogs(setup, self.log_config)
            with contextlib.suppress(BKeeperError):  # exists already: a harness restart
                await logs.create(self.name)

    async def run_writers(self, stop: asyncio.Event) -> None:
        """The two writers alone, each on a client of its own (the simulator runs them as a
        node apart from the readers', so that a partition can cut one off and not the other)."""
        await self._on_clients(
            2,
            lambda clients: [self._writer(self._logs(clients[w]), w, stop) for w in range(2)],
        )

    async def run_others(self, stop: asyncio.Event) -> None:
        """The tailing reader and the subscription's consumer, each on a client of its own."""
        await self._on_clients(
            2,
            lambda clients: [
                self._tail(self._logs(clients[0]), stop),
                self._consume(self._logs(clients[1]), stop),
            ],
        )

    def _logs(self, client: BookKeeper) -> NamedLogs:
        return NamedLogs(client, self.log_config)

    async def _on_clients(
        self,
        count: int,
        work: Callable[[list[BookKeeper]], list[Coroutine[Any, Any, None]]],
    ) -> None:
        clients: list[BookKeeper] = []
        try:
            for _ in range(count):
                clients.append(await start_client(self.uri, self._client))
            async with asyncio.TaskGroup() as group:
                for coro in work(clients):
                    group.create_task(coro)
        finally:
            for client in clients:
                await client.close()

    async def _writer(self, logs: NamedLogs, w: int, stop: asyncio.Event) -> None:
        rng = random.Random(self.seed * 1_000 + w)
        name, seq = f"writer-{w}", 0
        named = logs.log(self.name)
        while not stop.is_set():
            self.history.add(name, "invoke", "open")
            try:
                writer = await bounded(named.open_writer(), self.config.op_timeout_s)
            except (BKeeperError, TimeoutError) as exc:
                self.history.add(name, "info", "open", error=_why(exc))
                await _pause(stop, 0.5)
                continue
            self.history.add(name, "ok", "open", ledger=writer.ledger_id)
            self.created.append(writer.ledger_id)
            seq = await self._fill(writer, name, seq, rng, stop)
            with contextlib.suppress(BKeeperError, TimeoutError):
                await bounded(writer.close(), self.config.op_timeout_s)
            await _pause(stop, rng.uniform(0.2, 1.5))

    async def _fill(
        self, writer: LogWriter, name: str, seq: int, rng: random.Random, stop: asyncio.Event
    ) -> int:
        pending: list[asyncio.Future[Position]] = []
        for _ in range(rng.randint(*self.config.entries_per_ledger)):
            if stop.is_set():
                break
            payload = f"{name}:{seq}:".encode() + rng.randbytes(self.config.entry_bytes)
            seq += 1
            value = digest(payload)
            try:
                future = await bounded(writer.append_async(payload), self.config.op_timeout_s)
            except (BKeeperError, TimeoutError) as exc:  # fenced by the other writer, say
                self.history.add(name, "fail", "append", error=_why(exc))
                break
            self.history.add(name, "invoke", "append", value=value)

            future.add_done_callback(functools.partial(self._appended, name, value))
            pending.append(future)
            if self.config.append_pause_s:
                await _pause(stop, self.config.append_pause_s)
        if pending:
            await asyncio.wait(pending, timeout=self.config.op_timeout_s)
        return seq

    def _appended(self, name: str, value: str, future: asyncio.Future[Position]) -> None:
        if future.cancelled():
            self.history.add(name, "info", "append", value=value, error="cancelled")
            return
        error = future.exception()
        if error is not None:
            self.history.add(name, "info", "append", value=value, error=_why(error))
            return
        pos = future.result()
        self.history.add(
            name, "ok", "append", ledger=pos.ledger_id, entry=pos.entry_id, value=value
        )

    async def _tail(self, logs: NamedLogs, stop: asyncio.Event) -> None:
        reader = None
        while reader is None and not stop.is_set():
            try:
                reader = await logs.log(self.name).open_reader(EARLIEST)
            except BKeeperError as exc:
                self.history.add("tail", "info", "tail", error=_why(exc))
                await _pause(stop, 0.5)
        try:
            while not stop.is_set():
                try:
                    record = await reader.next(0.5) if reader is not None else None
                except BKeeperError as exc:
                    self.history.add("tail", "info", "tail", error=_why(exc))
                    await _pause(stop, 0.5)
                    continue
                if record is not None:
                    self.history.add(
                        "tail",
                        "ok",
                        "tail",
                        ledger=record.position.ledger_id,
                        entry=record.position.entry_id,
                        value=digest(record.payload),
                    )
        finally:
            if reader is not None:
                await reader.close()

    async def _consume(self, logs: NamedLogs, stop: asyncio.Event) -> None:
        rng = random.Random(self.seed * 1_000 + 700)
        session = 0
        named = logs.log(self.name)
        while not stop.is_set():
            name = f"consumer-{session}"
            session += 1
            try:
                consumer = await named.subscribe(SUBSCRIPTION, EARLIEST, wait_s=30.0)
            except BKeeperError as exc:
                self.history.add(name, "info", "subscribe", error=_why(exc))
                await _pause(stop, 0.5)
                continue
            last = None
            try:
                end = asyncio.get_running_loop().time() + rng.uniform(1.0, 4.0)
                while not stop.is_set() and asyncio.get_running_loop().time() < end:
                    record = await consumer.receive(0.5)
                    if record is None:
                        continue
                    self.history.add(
                        name,
                        "ok",
                        "consume",
                        ledger=record.position.ledger_id,
                        entry=record.position.entry_id,
                        value=digest(record.payload),
                    )
                    consumer.ack(record.position)
                    last = record.position
                await consumer.flush()
                if last is not None:
                    self.history.add(name, "ok", "ack", ledger=last.ledger_id, entry=last.entry_id)
            except BKeeperError as exc:
                self.history.add(name, "info", "consume", error=_why(exc))
            finally:
                with contextlib.suppress(BKeeperError):
                    await consumer.close()


FinalLog = tuple[list[tuple[tuple[int, int], str]], tuple[int, int] | None, list[int]]


async def read_log(uri: str, name: str = LOG_NAME, log_config: LogConfig = LOG_CONFIG) -> FinalLog:
    """The whole log (position, digest) in order, the subscription's mark, and the log's
    ledgers. A writer opened and closed first seals the last ledger (a record acknowledged
    past the LAC readers know is then readable)."""
    async with await start_client(uri) as bk:
        named = NamedLogs(bk, log_config).log(name)
        sealer = await named.open_writer()
        await sealer.close()
        last = await named.last_position()
        records: list[tuple[tuple[int, int], str]] = []
        if last is not None:
            reader = await named.open_reader(EARLIEST)
            try:
                while True:
                    record = await reader.next(30.0)
                    if record is None:
                        raise BKeeperError(f"the final read stopped before {last}")
                    pos = record.position
                    records.append(((pos.ledger_id, pos.entry_id), digest(record.payload)))
                    if pos >= last:
                        break
            finally:
                await reader.close()
        subs = await named.subscriptions()
        mark = subs[SUBSCRIPTION].mark if SUBSCRIPTION in subs else None
        ledgers = [x.ledger_id for x in (await named.metadata()).ledgers]
        return records, None if mark is None else (mark.ledger_id, mark.entry_id), ledgers
