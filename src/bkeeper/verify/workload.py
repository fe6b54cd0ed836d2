"""The ledger workload: writers, a fencer and readers on one cluster, every operation recorded.

* ``writers`` tasks each create a ledger (E3/Qw3/Qa2), append a random number of entries
  (``entries_per_ledger``) with ``in_flight`` unanswered at most, close it, and start again;
  an append or close that fails ends that ledger (left open: the final read recovers it).
  Each append's ``invoke`` is recorded when it is sent (with its entry id and the digest of
  its payload), its ``ok`` or ``info`` when it completes.
* a fencer, every ``fence_every_s``, opens one ledger a writer is still appending to with
  recovery (a new leader taking over): the writer is fenced out; the ledger's sealed end is
  recorded.
* ``readers`` tasks open ledgers without recovery and read entries up to the LAC they see,
  recording each entry's digest;
* with ``client_process_log`` set, two more writers run in a client process of their own
  (:mod:`bkeeper.verify.client_process`), which the ``client-kill`` nemesis kills and
  starts again.

Everything but the final read is bounded by ``op_timeout_s``; a timeout is recorded as
``info`` (it may have happened). :func:`read_final` reads every created ledger at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from bkeeper.client import BookKeeper
from bkeeper.client.config import ClientConfig
from bkeeper.client.write_handle import WriteHandle
from bkeeper.common.clock import Clock
from bkeeper.common.errors import BKeeperError, ConfigError
from bkeeper.verify.check import FinalLedger
from bkeeper.verify.client_process import ClientProcess
from bkeeper.verify.history import History

__all__ = [
    "PASSWORD",
    "LedgerWorkload",
    "WorkloadConfig",
    "bounded",
    "digest",
    "read_final",
    "start_client",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

PASSWORD = b"bkeeper-verify"

#: How long a client start (connecting to ZooKeeper) is retried before the run fails: longer
#: than any ZooKeeper fault of a schedule (a zk-pause holds up to 16 s) plus a restart of
#: ZooKeeper on a loaded machine.
CLIENT_START_TIMEOUT_S = 60.0
#: The pause between two tries at starting a client.
CLIENT_START_RETRY_S = 1.0

#: Entries one reader reads per ledger it opens, at most.
READ_ENTRIES_MAX = 64


def digest(payload: bytes | memoryview) -> str:
    return hashlib.blake2b(payload, digest_size=8).hexdigest()


@dataclass(frozen=True)
class WorkloadConfig:
    writers: int = 4
    readers: int = 2
    in_flight: int = 16
    entries_per_ledger: tuple[int, int] = (20, 400)
    entry_bytes: int = 200
    fence_every_s: tuple[float, float] = (1.0, 4.0)
    op_timeout_s: float = 30.0
    #: A writer's pause after each append it sends (0: none; the simulator paces its
    #: writers, whose appends would otherwise take no virtual time).
    append_pause_s: float = 0.0
    #: A reader's pause between two reads (seconds, drawn between the two).
    read_every_s: tuple[float, float] = (0.05, 0.5)
    #: Where a client process of two more writers logs (None: no client process); the
    #: ``client-kill`` nemesis kills it (:mod:`bkeeper.verify.client_process`).
    client_process_log: str | None = None

    def __post_init__(self) -> None:
        for name in ("writers", "in_flight", "entry_bytes"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}: must be at least 1, got {getattr(self, name)}")
        if self.readers < 0:
            raise ConfigError(f"readers: must be 0 or more, got {self.readers}")


class LedgerWorkload:
    """The workload of one run (module doc); :meth:`run` until ``stop`` is set."""

    def __init__(
        self,
        uri: str,
        history: History,
        seed: int,
        config: WorkloadConfig,
        clock: Clock | None = None,
    ) -> None:
        self.uri = uri
        #: The clients' clock (None: the system's; the simulator's virtual one)
        self.clock = clock
        self.history = history
        self.seed = seed
        self.config = config
        self.created: list[int] = []
        #: Every ledger id a create was sent for, answered or not (a client process killed
        #: during a create leaves a ledger nobody heard of): what a run deletes at the end.
        self.create_sent: list[int] = []
        self._open: dict[int, WriteHandle] = {}
        self.client_process: ClientProcess | None = None
        self._client_generation = 0
        self._client_changes = asyncio.Lock()  # a start, kill or stop at a time
        self._on_first_append: Callable[[], None] | None = None
        client = ClientConfig(
            pending_adds_max=config.in_flight,
            add_timeout_ms=5_000,
            read_timeout_ms=5_000,
        )
        self._client_config = client

    async def run(self, stop: asyncio.Event) -> None:
        if self.config.client_process_log is not None:
            await self.restart_client_process()
        try:
            async with (
                await start_client(self.uri, self._client_config, self.clock) as writers_bk,
                await start_client(self.uri, self._client_config, self.clock) as others_bk,
                asyncio.TaskGroup() as group,
            ):
                for w in range(self.config.writers):
                    group.create_task(self._writer(writers_bk, w, stop))
                group.create_task(self._fencer(others_bk, stop))
                for r in range(self.config.readers):
                    group.create_task(self._reader(others_bk, r, stop))
        finally:
            async with self._client_changes:
                if self.client_process is not None:
                    await self.client_process.stop()

    async def run_writers(
        self, stop: asyncio.Event, started: Callable[[], None] = lambda: None
    ) -> None:
        """The writers alone (a client process's work: :mod:`bkeeper.verify.client_process`);
        ``started()`` once the first append was sent (the process is writing)."""
        self._on_first_append = started
        async with (
            await start_client(self.uri, self._client_config, self.clock) as bk,
            asyncio.TaskGroup() as group,
        ):
            for w in range(self.config.writers):
                group.create_task(self._writer(bk, w, stop))

    async def run_others(self, stop: asyncio.Event) -> None:
        """The fencer and the readers alone, on a client of their own (the simulator runs
        them as a node apart from the writers', so that a partition can cut one off and
        not the other)."""
        async with (
            await start_client(self.uri, self._client_config, self.clock) as bk,
            asyncio.TaskGroup() as group,
        ):
            group.create_task(self._fencer(bk, stop))
            for r in range(self.config.readers):
                group.create_task(self._reader(bk, r, stop))

    async def kill_client_process(self) -> None:
        """SIGKILL the client process (``client-kill``); its ledgers stay open. A process
        still starting is killed once it is connected (one change at a time)."""
        if self.config.client_process_log is None:
            raise ConfigError("this workload runs no client process (client_process_log)")
        async with self._client_changes:
            if self.client_process is None:
                raise ConfigError("the client process failed to start: nothing to kill")
            await self.client_process.kill()

    async def restart_client_process(self) -> None:
        """Start the next client process (the first, or one after a ``client-kill``); one
        still running is killed first, so that no process is left unattended."""
        log_path = self.config.client_process_log
        if log_path is None:
            raise ConfigError("this workload runs no client process (client_process_log)")
        async with self._client_changes:
            if self.client_process is not None:
                await self.client_process.kill()  # (a no-op for one killed already)
                self.client_process = None
            generation = self._client_generation
            self._client_generation += 1
            process = ClientProcess(
                self.uri,
                self.seed * 100 + generation,
                f"client-{generation}",
                self.history,
                log_path,
                on_created=self.created.append,
                on_create_sent=self.create_sent.append,
            )
            try:
                await process.start()
            except BaseException:
                await process.kill()
                raise
            self.client_process = process

    # -- writers -------------------------------------------------------------------------
    async def _writer(self, bk: BookKeeper, w: int, stop: asyncio.Event) -> None:
        rng = random.Random(self.seed * 1_000 + w)
        name = f"writer-{w}"
        while not stop.is_set():
            try:
                # The id first, on record before the create is sent: a client process killed
                # during the create leaves a ledger the run can still find and delete.
                ledger_id = await bounded(
                    bk.cluster.id_generator.generate(), self.config.op_timeout_s
                )
            except (BKeeperError, TimeoutError) as exc:
                self.history.add(name, "invoke", "create")
                self.history.add(name, "info", "create", error=_why(exc))
                await _pause(stop, 0.2)
                continue
            self.history.add(name, "invoke", "create", ledger=ledger_id)
            self.create_sent.append(ledger_id)
            try:
                wh = await bounded(
                    bk.create_ledger(3, 3, 2, password=PASSWORD, ledger_id=ledger_id),
                    self.config.op_timeout_s,
                )
            except (BKeeperError, TimeoutError) as exc:
                self.history.add(name, "info", "create", error=_why(exc))
                await _pause(stop, 0.2)
                continue
            self.history.add(name, "ok", "create", ledger=wh.ledger_id)
            self.created.append(wh.ledger_id)
            self._open[wh.ledger_id] = wh
            try:
                await self._fill(wh, name, rng, stop)
            finally:
                self._open.pop(wh.ledger_id, None)

    async def _fill(
        self, wh: WriteHandle, name: str, rng: random.Random, stop: asyncio.Event
    ) -> None:
        ledger_id, timeout = wh.ledger_id, self.config.op_timeout_s
        completions: list[asyncio.Future[int]] = []
        target = rng.randint(*self.config.entries_per_ledger)
        for entry_id in range(target):
            if stop.is_set():
                break
            payload = b"%s:%d:%d:" % (name.encode(), ledger_id, entry_id) + rng.randbytes(
                self.config.entry_bytes
            )
            value = digest(payload)
            # Recorded before it is sent: a client process killed a moment later has it on
            # record (the entry may be in the ledger at the end: a writer sent it).
            self.history.add(
                name, "invoke", "append", ledger=ledger_id, entry=entry_id, value=value
            )
            try:
                future = await bounded(wh.append_async(payload), timeout)
            except (BKeeperError, TimeoutError) as exc:  # not sent: this ledger is done
                self.history.add(
                    name, "fail", "append", ledger=ledger_id, entry=entry_id, error=_why(exc)
                )
                break
            first_append, self._on_first_append = self._on_first_append, None
            if first_append is not None:
                first_append()
            future.add_done_callback(
                functools.partial(self._appended, name, ledger_id, entry_id, value)
            )
            completions.append(future)
            if self.config.append_pause_s:
                await _pause(stop, self.config.append_pause_s)
        if completions:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait(completions, timeout=timeout)
        self.history.add(name, "invoke", "close", ledger=ledger_id)
        try:
            await bounded(wh.close(), timeout)
        except (BKeeperError, TimeoutError) as exc:
            self.history.add(name, "info", "close", ledger=ledger_id, error=_why(exc))
            return
        self.history.add(name, "ok", "close", ledger=ledger_id, entry=wh.metadata.last_entry_id)

    def _appended(
        self, name: str, ledger_id: int, entry_id: int, value: str, future: asyncio.Future[int]
    ) -> None:
        if future.cancelled():
            self.history.add(
                name, "info", "append", ledger=ledger_id, entry=entry_id, error="cancelled"
            )
            return
        error = future.exception()
        if error is None and future.result() == entry_id:
            self.history.add(name, "ok", "append", ledger=ledger_id, entry=entry_id, value=value)
        elif error is None:  # the client numbered it otherwise: the checker would be wrong
            self.history.add(
                name,
                "info",
                "append",
                ledger=ledger_id,
                entry=entry_id,
                error=f"acknowledged as entry {future.result()}",
            )
        else:
            self.history.add(
                name, "info", "append", ledger=ledger_id, entry=entry_id, error=_why(error)
            )

    # -- fencer --------------------------------------------------------------------------
    async def _fencer(self, bk: BookKeeper, stop: asyncio.Event) -> None:
        rng = random.Random(self.seed * 1_000 + 999)
        while not stop.is_set():
            await _pause(stop, rng.uniform(*self.config.fence_every_s))
            if stop.is_set() or not self._open:
                continue
            ledger_id = rng.choice(sorted(self._open))
            self.history.add("fencer", "invoke", "fence", ledger=ledger_id)
            try:
                rh = await bounded(
                    bk.open_ledger(ledger_id, PASSWORD, recovery=True), self.config.op_timeout_s
                )
            except (BKeeperError, TimeoutError) as exc:
                self.history.add("fencer", "info", "fence", ledger=ledger_id, error=_why(exc))
                continue
            self.history.add(
                "fencer", "ok", "fence", ledger=ledger_id, entry=rh.metadata.last_entry_id
            )
            await rh.close()

    # -- readers -------------------------------------------------------------------------
    async def _reader(self, bk: BookKeeper, r: int, stop: asyncio.Event) -> None:
        rng = random.Random(self.seed * 1_000 + 500 + r)
        name = f"reader-{r}"
        while not stop.is_set():
            await _pause(stop, rng.uniform(*self.config.read_every_s))
            if stop.is_set() or not self.created:
                continue
            ledger_id = rng.choice(self.created[-20:])
            try:
                await bounded(self._read_some(bk, name, ledger_id, rng), self.config.op_timeout_s)
            except (BKeeperError, TimeoutError) as exc:
                self.history.add(name, "info", "read", ledger=ledger_id, error=_why(exc))

    async def _read_some(
        self, bk: BookKeeper, name: str, ledger_id: int, rng: random.Random
    ) -> None:
        rh = await bk.open_ledger(ledger_id, PASSWORD, recovery=False)
        try:
            last = rh.metadata.last_entry_id if rh.metadata.is_closed else None
            if last is None:
                last = await rh.read_last_add_confirmed()
            if last < 0:
                return
            first = rng.randint(0, last)
            async for entry in rh.read(first, min(last, first + READ_ENTRIES_MAX - 1)):
                self.history.add(
                    name,
                    "ok",
                    "read",
                    ledger=ledger_id,
                    entry=entry.entry_id,
                    value=digest(entry.payload),
                )
        finally:
            await rh.close()


async def read_final(
    uri: str,
    ledger_ids: list[int],
    *,
    attempts: int = 10,
    timeout_s: float = 60.0,
    clock: Clock | None = None,
) -> dict[int, FinalLedger]:
    """Every ledger opened with recovery and read whole; a ledger that fails is tried again
    (``attempts`` times, a second apart: the cluster may still be settling)."""
    final: dict[int, FinalLedger] = {}
    config = ClientConfig(read_timeout_ms=5_000, add_timeout_ms=5_000)
    async with await start_client(uri, config, clock) as bk:
        for ledger_id in ledger_ids:
            error = ""
            for attempt in range(attempts):
                try:
                    final[ledger_id] = await bounded(_read_whole(bk, ledger_id), timeout_s)
                    break
                except (BKeeperError, TimeoutError) as exc:
                    error = _why(exc)
                    if attempt + 1 < attempts:
                        await asyncio.sleep(1.0)
            else:
                final[ledger_id] = FinalLedger(error=error)
    return final


async def start_client(
    uri: str, config: ClientConfig | None = None, clock: Clock | None = None
) -> BookKeeper:
    """A started client. A cluster still settling or under a ZooKeeper fault (ZooKeeper
    paused, killed, restarting; the machine loaded) is tried again every
    ``CLIENT_START_RETRY_S`` for up to ``CLIENT_START_TIMEOUT_S``; then the last error."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + CLIENT_START_TIMEOUT_S
    attempt = 1
    while True:
        try:
            return await BookKeeper(uri, config, clock=clock).start()
        except ConfigError:
            raise  # a bad URI or option: no wait makes it right
        except BKeeperError as exc:
            if loop.time() + CLIENT_START_RETRY_S >= deadline:
                raise
            log.warning("client start failed (attempt %d): %s", attempt, exc)
        await asyncio.sleep(CLIENT_START_RETRY_S)
        attempt += 1


async def _read_whole(bk: BookKeeper, ledger_id: int) -> FinalLedger:
    rh = await bk.open_ledger(ledger_id, PASSWORD, recovery=True)
    try:
        last = rh.metadata.last_entry_id
        digests = {}
        if last >= 0:
            async for entry in rh.read(0, last):
                digests[entry.entry_id] = digest(entry.payload)
        return FinalLedger(last, digests)
    finally:
        await rh.close()


async def bounded(work: Awaitable[T], timeout_s: float) -> T:
    """``asyncio.wait_for(work, timeout_s)``, keeping a cancellation that arrives as the work
    completes: on Python 3.11 ``wait_for`` returns the result then and loses it, and a
    cancelled workload went on to finish its ledgers on a stopped cluster, waiting out every
    timeout (a campaign's stop took 20 to 40 s). (The work still runs as a task of its own,
    as the workloads' pace has always had it.)"""
    result = await asyncio.wait_for(work, timeout_s)  # noqa: TID251 (the cancellation: below)
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        if isinstance(result, asyncio.Future):
            # An append's future, dropped here: when the client closes under the stopped
            # workload it fails, and unretrieved, asyncio would print "Future exception was
            # never retrieved" (three of them on a Ctrl-C before).
            result.add_done_callback(_retrieve)
        raise asyncio.CancelledError
    return result


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


async def _pause(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await bounded(stop.wait(), seconds)


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
