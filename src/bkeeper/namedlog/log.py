"""Named logs: an ordered list of ledgers that one writer at a time appends to.

Writer (:meth:`NamedLog.open_writer`): recovers (fences and seals) the last ledger of the
list, creates a new ledger and appends it to the list by compare-and-set. A lost CAS means
another writer got there first: the new ledger is deleted and the whole step runs again, so
the last writer to open wins and every earlier one is fenced (its next append fails with
:class:`LogFencedError`; nothing it wrote after the fencing is visible, as recovery seals
the ledger at its acknowledged end). The writer rolls to a new ledger when the current one
reaches ``roll_bytes`` or ``roll_age_ms``.

Reader (:meth:`NamedLog.reader`): reads sealed ledgers in order, then tails the open one
with long-poll LAC reads, never fencing; it notices a roll or a new writer when the ledger
it tails is closed or gets a successor, re-reading the list at least every ``tail_poll_ms``.
A reader left behind by truncation skips to the earliest record still there.

Limits: ``metadata_retries_max`` lost CAS per step; ``tail_poll_ms`` per long poll.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bkeeper.client.bookkeeper import BookKeeper
from bkeeper.client.read_handle import ReadHandle
from bkeeper.client.write_handle import WriteHandle
from bkeeper.common.errors import (
    BKeeperError,
    ConfigError,
    LedgerFencedError,
    LedgerNotFoundError,
    LogError,
    LogFencedError,
    LogNotFoundError,
    MetadataError,
    MetadataVersionError,
    SessionExpiredError,
)
from bkeeper.meta.ledger_metadata import LedgerState
from bkeeper.namedlog.metadata import (
    LogLedger,
    LogMetadata,
    LogStore,
    WriterCommit,
    check_log_name,
    check_writer_id,
)
from bkeeper.namedlog.records import Position, Record, decode_record, encode_record

__all__ = ["EARLIEST", "LATEST", "LogConfig", "LogReader", "LogWriter", "NamedLog", "NamedLogs"]

log = logging.getLogger(__name__)

#: Entries past the LAC a "latest" reader checks for (appended but not yet confirmed).
_LATEST_PROBES_MAX = 1_000

EARLIEST = "earliest"
LATEST = "latest"


@dataclass(frozen=True)
class LogConfig:
    """How logs store their ledgers, roll and tail.

    ``roll_bytes`` / ``roll_age_ms``: a writer starts a new ledger once the current one holds
    this many payload bytes or is this old (0: never by age). ``tail_poll_ms``: the longest a
    tailing reader waits before it re-reads the ledger list. ``retention_age_ms`` /
    ``retention_bytes`` (0: keep everything): at each roll the writer truncates whole sealed
    ledgers whose records are all older than the age, or that lie beyond the newest
    ``retention_bytes`` of sealed ledgers.
    """

    ensemble_size: int = 3
    write_quorum: int = 3
    ack_quorum: int = 2
    digest: str = "crc32c"
    password: bytes = b""
    roll_bytes: int = 256 * 1024 * 1024
    roll_age_ms: int = 0
    tail_poll_ms: int = 1_000
    metadata_retries_max: int = 20
    retention_age_ms: int = 0
    retention_bytes: int = 0

    def __post_init__(self) -> None:
        if not self.ensemble_size >= self.write_quorum >= self.ack_quorum >= 1:
            raise ConfigError(
                "need ensemble_size >= write_quorum >= ack_quorum >= 1, got "
                f"{self.ensemble_size}/{self.write_quorum}/{self.ack_quorum}"
            )
        for name in ("roll_bytes", "tail_poll_ms", "metadata_retries_max"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"{name}: must be a positive integer, got {value!r}")
        for name in ("roll_age_ms", "retention_age_ms", "retention_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"{name}: must be an integer >= 0, got {value!r}")


def _now_ms() -> int:
    return int(time.time() * 1000)


class NamedLogs:
    """The named logs of one cluster, through a started :class:`BookKeeper` client."""

    def __init__(self, bk: BookKeeper, config: LogConfig | None = None) -> None:
        self.bk = bk
        self.config = config or LogConfig()
        self.store = LogStore(bk.cluster.store, bk.cluster.root)

    async def create(self, name: str) -> NamedLog:
        await self.store.create(name, _now_ms())
        return self.log(name)

    def log(self, name: str) -> NamedLog:
        return NamedLog(self, check_log_name(name))

    async def names(self) -> list[str]:
        return await self.store.names()

    async def delete(self, name: str) -> int:
        """Delete the log and every ledger of it; the number of ledgers deleted.

        The log's unsealed ledgers are sealed first, fencing a writer that is still open:
        its next append fails (``LogNotFoundError``) instead of being acknowledged into a
        ledger that is about to go. A writer that rolls meanwhile changes the list, so the
        delete's compare-and-set fails and it seals again.
        """
        named = self.log(name)
        for _ in range(self.config.metadata_retries_max):
            meta, version = await self.store.read(name)
            await named.seal_unsealed(meta)
            try:
                await self.store.delete(name, version)
            except MetadataVersionError:
                continue
            for ledger in meta.ledgers:
                with contextlib.suppress(LedgerNotFoundError):
                    await self.bk.delete_ledger(ledger.ledger_id, fence=False)
            return len(meta.ledgers)
        raise MetadataError(f"log {name!r}: could not delete, its metadata kept changing")


class NamedLog:
    """One named log. Made by :meth:`NamedLogs.log` or :meth:`NamedLogs.create`."""

    def __init__(self, logs: NamedLogs, name: str) -> None:
        self.logs = logs
        self.name = name

    async def metadata(self) -> LogMetadata:
        return (await self.logs.store.read(self.name))[0]

    async def open_writer(self) -> LogWriter:
        """Become the log's only writer, fencing any earlier one."""
        logs, config = self.logs, self.logs.config
        for _ in range(config.metadata_retries_max):
            meta, version = await logs.store.read(self.name)
            await self.seal_unsealed(meta)
            handle = await _create_ledger(logs)
            try:
                new_meta = meta.with_ledger(handle.ledger_id, _now_ms())
                version = await logs.store.write(self.name, new_meta, version)
            except (MetadataVersionError, ConfigError):
                await _discard(logs, handle)
                continue
            log.debug("log %s: writer on ledger %d", self.name, handle.ledger_id)
            return LogWriter(self, handle, new_meta, version)
        raise LogError(f"log {self.name!r}: could not open a writer, the list kept changing")

    async def seal_unsealed(self, meta: LogMetadata) -> None:
        """Recover (fence and seal) the ledgers at the end of the list that are not CLOSED:
        the last one, and the one before it when a writer died in the middle of a roll."""
        logs = self.logs
        for ledger in reversed(meta.ledgers):
            try:
                state = (await logs.bk.ledger_metadata(ledger.ledger_id)).state
                if state is LedgerState.CLOSED:
                    return
                await logs.bk.open_ledger(ledger.ledger_id, logs.config.password, recovery=True)
            except LedgerNotFoundError:
                continue

    async def open_reader(self, start: str | Position | int = EARLIEST) -> LogReader:
        """Records from ``start``: ``"earliest"``, ``"latest"`` (only records appended from
        now on), a :class:`Position` (that record and later ones) or an ``int`` timestamp in
        ms (the first record appended at or after it, and later ones). The starting point
        is fixed when this returns."""
        reader = LogReader(self, start)
        await reader.seek()
        return reader

    async def last_position(self) -> Position | None:
        """The position of the log's last record now (None when it has none). Records past
        the LAC of an open ledger count (see ``open_reader(LATEST)``)."""
        reader = await self.open_reader(LATEST)
        end = await reader.seek()
        await reader.close()
        if end.entry_id > 0:
            return Position(end.ledger_id, end.entry_id - 1)
        meta = await self.metadata()
        for ledger in reversed(meta.ledgers):
            if ledger.ledger_id >= end.ledger_id:
                continue
            try:
                handle = await self.logs.bk.open_ledger(
                    ledger.ledger_id, self.logs.config.password, recovery=False
                )
            except LedgerNotFoundError:
                continue
            if handle.is_closed and handle.metadata.last_entry_id >= 0:
                return Position(ledger.ledger_id, handle.metadata.last_entry_id)
        return None

    async def append_ledgers(
        self,
        ledger_ids: Sequence[int],
        *,
        writer_id: str | None = None,
        batch_id: int | None = None,
    ) -> bool:
        """Append sealed ledgers (written by someone else, e.g. Spark tasks) to the log, in
        the order given, in one compare-and-set; False when ``writer_id`` already committed
        ``batch_id`` or a later batch (a replay: nothing is appended and the caller should
        delete its ledgers).

        Like ``open_writer`` this seals the log's unsealed ledgers first, fencing the
        current writer. A ledger whose id is not above the log's last one (another writer
        rolled meanwhile) is copied into a new ledger, which is appended instead, and the
        original deleted; readers see every appended ledger at once or none of them.
        """
        if (writer_id is None) != (batch_id is None):
            raise ConfigError("append_ledgers: give both writer_id and batch_id, or neither")
        if writer_id is not None:
            check_writer_id(writer_id)
        logs = self.logs
        ids = list(ledger_ids)
        copied: list[int] = []  # originals replaced by copies, deleted once appended
        for _ in range(logs.config.metadata_retries_max):
            meta, version = await logs.store.read(self.name)
            if writer_id is not None and batch_id is not None:
                last = meta.last_batch(writer_id)
                if last is not None and last >= batch_id:
                    return False
            await self.seal_unsealed(meta)
            floor = meta.ledgers[-1].ledger_id if meta.ledgers else -1
            for index, ledger_id in enumerate(ids):
                if ledger_id <= floor:
                    ids[index] = await self._copy_ledger(ledger_id)
                    copied.append(ledger_id)
                floor = ids[index]
            now = _now_ms()
            commit = None
            if writer_id is not None and batch_id is not None:
                commit = WriterCommit(writer_id, batch_id, now)
            new_meta = meta.with_ledgers(tuple(LogLedger(i, now) for i in ids), commit)
            try:
                await logs.store.write(self.name, new_meta, version)
            except MetadataVersionError:
                continue
            for ledger_id in copied:
                with contextlib.suppress(LedgerNotFoundError):
                    await logs.bk.delete_ledger(ledger_id)
            return True
        raise MetadataError(f"log {self.name!r}: could not append ledgers, the list kept changing")

    async def _copy_ledger(self, ledger_id: int) -> int:
        """A new ledger holding the entries of the sealed ledger ``ledger_id``."""
        logs = self.logs
        source = await logs.bk.open_ledger(ledger_id, logs.config.password, recovery=False)
        if not source.is_closed:
            raise LogError(f"ledger {ledger_id} is not sealed; only sealed ledgers are appended")
        target = await _create_ledger(logs)
        try:
            pending = []
            async for entry in source.read():
                pending.append(await target.append_async(entry.data))
            await asyncio.gather(*pending)
            await target.close()
        except BaseException:
            await _discard(logs, target)
            raise
        return target.ledger_id

    async def truncate(self, before: Position) -> int:
        """Delete the ledgers that hold only records before ``before`` (never the last
        ledger); the number of ledgers deleted."""
        store = self.logs.store
        for _ in range(self.logs.config.metadata_retries_max):
            meta, version = await store.read(self.name)
            new_meta, dropped = meta.truncated(before)
            try:
                await store.write(self.name, new_meta, version)
            except MetadataVersionError:
                continue
            for ledger_id in dropped:
                with contextlib.suppress(LedgerNotFoundError):
                    await self.logs.bk.delete_ledger(ledger_id)
            return len(dropped)
        raise MetadataError(f"log {self.name!r}: could not truncate, the list kept changing")


async def _create_ledger(logs: NamedLogs) -> WriteHandle:
    config = logs.config
    return await logs.bk.create_ledger(
        config.ensemble_size,
        config.write_quorum,
        config.ack_quorum,
        digest=config.digest,
        password=config.password,
    )


async def _discard(logs: NamedLogs, handle: WriteHandle) -> None:
    """Close and delete a ledger that never made it into the list."""
    with contextlib.suppress(BKeeperError):
        await handle.close()
    with contextlib.suppress(BKeeperError):
        await logs.bk.delete_ledger(handle.ledger_id)


class LogWriter:
    """The only writer of a named log (until another one opens). Made by ``open_writer``."""

    def __init__(
        self, named: NamedLog, handle: WriteHandle, meta: LogMetadata, version: int
    ) -> None:
        self._log = named
        self._logs = named.logs
        self._config = named.logs.config
        self._handle = handle
        self._meta = meta
        self._version = version
        self._opened_at = time.monotonic()
        self._roll_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()
        self._error: LogError | None = None
        self._error_explained = False
        self._closed = False

    @property
    def ledger_id(self) -> int:
        """The ledger appends go to now."""
        return self._handle.ledger_id

    async def append(
        self,
        payload: bytes,
        *,
        key: bytes | None = None,
        properties: Mapping[str, bytes] | None = None,
    ) -> Position:
        """Append one record; its position once an ack quorum has it."""
        future = await self.append_async(payload, key=key, properties=properties)
        return await future

    async def append_async(
        self,
        payload: bytes,
        *,
        key: bytes | None = None,
        properties: Mapping[str, bytes] | None = None,
    ) -> asyncio.Future[Position]:
        """Send one record (pipelined); the future completes with its position.

        Once the writer's ledger was fenced, this raises ``LogNotFoundError`` if the log
        was deleted, else ``LogFencedError`` (another writer took over)."""
        if self._error is not None:
            raise await self._gone(self._error)
        self._check_open()
        if self._should_roll():
            await self._roll()
        handle = self._handle
        data = encode_record(payload, _now_ms(), key, properties)
        try:
            inner = await handle.append_async(data)
        except LedgerFencedError as exc:
            raise await self._gone(exc) from exc
        loop = asyncio.get_running_loop()
        outer: asyncio.Future[Position] = loop.create_future()
        ledger_id = handle.ledger_id

        def done(future: asyncio.Future[int]) -> None:
            if outer.done():
                return
            if future.cancelled():
                outer.cancel()
            elif isinstance(exc := future.exception(), LedgerFencedError):
                self._spawn(self._fail_gone(outer, exc))  # says why after asking the metadata
            elif exc is not None:
                outer.set_exception(exc)
            else:
                outer.set_result(Position(ledger_id, future.result()))

        inner.add_done_callback(done)
        return outer

    async def close(self) -> None:
        """Seal the current ledger (pending appends complete first)."""
        if self._closed:
            return
        self._closed = True
        try:
            await self._handle.close()
        except LedgerFencedError as exc:
            raise await self._gone(exc) from exc
        finally:
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)

    async def __aenter__(self) -> LogWriter:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _check_open(self) -> None:
        if self._error is not None:
            raise self._error
        if self._closed:
            raise LogError(f"the writer of log {self._log.name!r} is closed")

    def _fenced(self, cause: BaseException) -> LogError:
        """The error of appends that were in flight when the ledger was fenced."""
        if self._error is None:
            self._error = LogFencedError(
                f"log {self._log.name!r}: this writer was fenced: another writer took over, "
                f"or the log was deleted ({cause})"
            )
        return self._error

    async def _fail_gone(self, outer: asyncio.Future[Position], cause: BaseException) -> None:
        try:
            error: BaseException = await self._gone(cause)
        except BKeeperError as exc:  # the metadata cannot say: the fence is all we know
            error = self._fenced(exc)
        if not outer.done():
            outer.set_exception(error)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _gone(self, cause: BaseException) -> LogError:
        """Why this writer can append no more, its ledger fenced: the log was deleted, or
        another writer took over (asked of the metadata once)."""
        if self._error is None or not self._error_explained:
            self._error_explained = True
            name = self._log.name
            try:
                await self._logs.store.read(name)
            except LogNotFoundError:
                self._error = LogNotFoundError(
                    f"log {name!r} was deleted while this writer was open ({cause})"
                )
            else:
                self._error = LogFencedError(f"log {name!r}: another writer took over ({cause})")
        assert self._error is not None
        return self._error

    def _should_roll(self) -> bool:
        config = self._config
        if self._handle.length >= config.roll_bytes:
            return True
        age_ms = (time.monotonic() - self._opened_at) * 1000.0
        return bool(config.roll_age_ms) and age_ms >= config.roll_age_ms

    async def _roll(self) -> None:
        async with self._roll_lock:
            if not self._should_roll():
                return  # another append rolled while this one waited
            old = self._handle
            new = await _create_ledger(self._logs)
            for _ in range(self._config.metadata_retries_max):
                meta = self._meta
                if not meta.ledgers or meta.ledgers[-1].ledger_id != old.ledger_id:
                    await _discard(self._logs, new)
                    raise self._fenced(RuntimeError("the ledger list moved on"))
                try:
                    new_meta = meta.with_ledger(new.ledger_id, _now_ms())
                    self._version = await self._logs.store.write(
                        self._log.name, new_meta, self._version
                    )
                except MetadataVersionError:
                    self._meta, self._version = await self._logs.store.read(self._log.name)
                    continue
                self._meta = new_meta
                break
            else:
                await _discard(self._logs, new)
                raise LogError(f"log {self._log.name!r}: could not roll, the list kept changing")
            self._handle = new
            self._opened_at = time.monotonic()
            log.debug(
                "log %s: rolled from ledger %d to %d", self._log.name, old.ledger_id, new.ledger_id
            )
            self._spawn(self._seal(old))
        if self._config.retention_age_ms or self._config.retention_bytes:
            try:
                await self._apply_retention()
            except BKeeperError as exc:  # retention is best effort; the next roll retries
                log.warning("log %s: retention: %s", self._log.name, exc)

    async def _apply_retention(self) -> None:
        """Truncate sealed ledgers past the retention age or size (see ``LogConfig``)."""
        config, ledgers = self._config, self._meta.ledgers
        keep_from = 0
        if config.retention_age_ms:
            horizon = _now_ms() - config.retention_age_ms
            # Ledger i's records are all older than ledger i+1's creation.
            for index in range(len(ledgers) - 1):
                if ledgers[index + 1].ctime_ms < horizon:
                    keep_from = index + 1
        if config.retention_bytes:
            total = 0
            for index in range(len(ledgers) - 2, -1, -1):  # sealed ledgers, newest first
                total += (await self._logs.bk.ledger_metadata(ledgers[index].ledger_id)).length
                if total > config.retention_bytes:
                    keep_from = max(keep_from, index + 1)
                    break
        keep_from = min(keep_from, len(ledgers) - 2)  # never the current or the one sealing
        if keep_from > 0:
            await self._log.truncate(Position(ledgers[keep_from].ledger_id, 0))
            self._meta, self._version = await self._logs.store.read(self._log.name)

    async def _seal(self, handle: WriteHandle) -> None:
        try:
            await handle.close()
        except BKeeperError as exc:
            log.warning("log %s: closing ledger %d: %s", self._log.name, handle.ledger_id, exc)


class LogReader:
    """An async iterator of :class:`Record`; see the module docstring. ``close`` ends it."""

    def __init__(self, named: NamedLog, start: str | Position | int) -> None:
        if not isinstance(start, Position | int) and start not in (EARLIEST, LATEST):
            raise ConfigError(f"reader start {start!r}: use earliest, latest, a position or ms")
        self._log = named
        self._logs = named.logs
        self._config = named.logs.config
        self._start = start
        self._records: AsyncIterator[list[Record]] | None = None
        self._pending: asyncio.Future[list[Record]] | None = None
        #: Records read but not returned yet (one batch read's worth at most).
        self._buffer: collections.deque[Record] = collections.deque()
        self._closed = False
        self._first: Position | None = None
        self._first_meta: LogMetadata | None = None
        #: Ledgers skipped because truncation removed them before this reader got there.
        self.skipped_ledgers = 0
        #: The position after the last record returned.
        self.position: Position | None = None

    async def seek(self) -> Position:
        """Fix the starting point now (``open_reader`` does); the first position to read."""
        if self._first is None:
            self._first_meta = await self._meta()
            self._first = await self._starting_point(self._first_meta)
        return self._first

    def __aiter__(self) -> LogReader:
        return self

    def _next_task(self) -> asyncio.Future[list[Record]]:
        """The read of the next batch of records, shared by every caller until it completes
        (so a caller that times out or is cancelled never breaks the reader)."""
        if self._pending is None:
            if self._records is None:
                self._records = self._run()
            self._pending = asyncio.ensure_future(self._records.__anext__())
        return self._pending

    def _take(self) -> Record:
        record = self._buffer.popleft()
        self.position = Position(record.position.ledger_id, record.position.entry_id + 1)
        return record

    async def __anext__(self) -> Record:
        if self._closed:
            raise StopAsyncIteration
        while not self._buffer:
            task = self._next_task()
            try:
                batch = await asyncio.shield(task)
            finally:
                if task.done():
                    self._pending = None
            self._buffer.extend(batch)
        return self._take()

    async def next(self, timeout_s: float | None = None) -> Record | None:
        """The next record, or None when none comes within ``timeout_s`` (the read goes
        on, and a later call gets its record)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not self._buffer:
            if self._closed:
                return None
            task = self._next_task()
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            done, _ = await asyncio.wait({task}, timeout=wait)
            if not done:
                return None
            self._pending = None
            try:
                self._buffer.extend(task.result())
            except StopAsyncIteration:
                return None
        return self._take()

    async def close(self) -> None:
        self._closed = True
        self._buffer.clear()
        if self._pending is not None:
            self._pending.cancel()
            with contextlib.suppress(BaseException):
                await self._pending
            self._pending = None
        if self._records is not None:
            records, self._records = self._records, None
            with contextlib.suppress(BaseException):
                await records.aclose()  # type: ignore[attr-defined]

    # -- the tailing state machine -----------------------------------------------------
    async def _meta(self) -> LogMetadata:
        return (await self._logs.store.read(self._log.name))[0]

    async def _open(self, ledger_id: int) -> ReadHandle | None:
        try:
            return await self._logs.bk.open_ledger(ledger_id, self._config.password, recovery=False)
        except LedgerNotFoundError:
            return None

    async def _starting_point(self, meta: LogMetadata) -> Position:
        start = self._start
        if start == EARLIEST or not meta.ledgers:
            return Position(meta.ledgers[0].ledger_id if meta.ledgers else 0, 0)
        if isinstance(start, Position):
            return start
        if start == LATEST:
            return await self._after_last(meta)
        assert isinstance(start, int)
        return await self._position_at_time(meta, start)

    async def _position_at_time(self, meta: LogMetadata, timestamp_ms: int) -> Position:
        """The first record at or after ``timestamp_ms``: skip whole ledgers whose last
        record is older, then scan the first ledger that is not."""
        for ledger in meta.ledgers:
            handle = await self._open(ledger.ledger_id)
            if handle is None:
                continue
            last = (
                handle.metadata.last_entry_id
                if handle.is_closed
                else await handle.read_last_add_confirmed()
            )
            if last < 0:
                continue
            tail = await handle.read_entry(last)
            record = decode_record(tail.payload, Position(ledger.ledger_id, last))
            if record.timestamp_ms < timestamp_ms and handle.is_closed:
                continue
            async for entry in handle.read(0, last):
                position = Position(ledger.ledger_id, entry.entry_id)
                if decode_record(entry.payload, position).timestamp_ms >= timestamp_ms:
                    return position
        return await self._after_last(meta)

    async def _after_last(self, meta: LogMetadata) -> Position:
        """The position after the last record appended so far (``"latest"``)."""
        last = meta.ledgers[-1].ledger_id
        handle = await self._open(last)
        if handle is None or handle.is_closed:
            return Position(last + 1, 0)
        end = await handle.read_last_add_confirmed() + 1
        # Entries past the LAC that bookies hold were appended already (their LAC arrives
        # with the next append): they are not "latest".
        for _ in range(_LATEST_PROBES_MAX):
            try:
                await handle.read_entry(end)
            except BKeeperError:
                break
            end += 1
        return Position(last, end)

    async def _run(self) -> AsyncIterator[list[Record]]:
        """Tail from the starting point in batches, riding out store and bookie failures
        that may pass (session expiry, lost connections, unavailable bookies) from the last
        record read."""
        position = await self.seek()
        meta: LogMetadata | None = self._first_meta
        while not self._closed:
            try:
                async for batch in self._tail(position, meta):
                    yield batch
                return
            except BKeeperError as exc:
                if not (exc.retriable or isinstance(exc, SessionExpiredError)):
                    raise
                log.info("log %s: reader retrying after: %s", self._log.name, exc)
                await asyncio.sleep(self._config.tail_poll_ms / 1000.0)
                # The generator runs only once the buffer is empty, so the position after
                # the last record returned is also the one after the last record fetched.
                if self.position is not None:
                    position = max(position, self.position)
                meta = None

    async def _tail(
        self, position: Position, meta: LogMetadata | None
    ) -> AsyncIterator[list[Record]]:
        config = self._config
        if meta is None:
            meta = await self._meta()
        while not self._closed:
            index = next(
                (i for i, x in enumerate(meta.ledgers) if x.ledger_id >= position.ledger_id),
                None,
            )
            if index is None:  # past the last ledger: wait for the list to grow
                await asyncio.sleep(config.tail_poll_ms / 1000.0)
                meta = await self._meta()
                continue
            ledger_id = meta.ledgers[index].ledger_id
            if ledger_id != position.ledger_id:
                position = Position(ledger_id, 0)
            handle = await self._open(ledger_id)
            if handle is None:  # deleted under us: truncation passed this reader
                meta = await self._meta()
                if meta.index_of(ledger_id) is None:
                    self.skipped_ledgers += 1
                    position = Position(ledger_id + 1, 0)
                continue
            if handle.is_closed:
                async for batch in self._read(handle, position.entry_id):
                    yield batch
                position = Position(ledger_id + 1, 0)
                continue
            # The ledger is open: tail it until it is sealed, rolled away from or deleted.
            lac = await handle.read_last_add_confirmed()
            while not self._closed:
                if position.entry_id <= lac:
                    async for batch in self._read(handle, position.entry_id, lac):
                        position = Position(ledger_id, batch[-1].position.entry_id + 1)
                        yield batch
                rolled = meta.index_of(ledger_id) != len(meta.ledgers) - 1
                wait_ms = min(config.tail_poll_ms, 50) if rolled else config.tail_poll_ms
                new_lac = await handle.wait_last_add_confirmed(lac, wait_ms)
                if new_lac > lac:
                    lac = new_lac
                    continue
                # Quiet: did the writer roll, or a new writer seal this ledger?
                meta = await self._meta()
                if meta.index_of(ledger_id) != len(meta.ledgers) - 1:
                    break
                try:
                    state = (await self._logs.bk.ledger_metadata(ledger_id)).state
                except LedgerNotFoundError:
                    break
                if state is LedgerState.CLOSED:
                    break

    async def _read(
        self, handle: ReadHandle, first: int, last: int | None = None
    ) -> AsyncIterator[list[Record]]:
        """Records ``first..last`` of the ledger (``last``: its LAC or last entry), a batch
        read at a time."""
        end = handle.last_add_confirmed if last is None else last
        if first > end:
            return
        ledger_id = handle.ledger_id
        async for entries in handle.read_batches(first, end):
            batch = [decode_record(e.payload, Position(ledger_id, e.entry_id)) for e in entries]
            yield batch
