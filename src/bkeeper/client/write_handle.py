"""The writer of one ledger: pipelined quorum adds, in-order completion, ensemble changes.

Rules (BookKeeper's):

* Entry ``e`` is sent to the write set ``(e + i) mod E``, ``i < Qw``, of the current ensemble,
  with the writer's LAC piggybacked in its header. It completes once ``Qa`` of its write set
  acknowledged it AND every lower entry completed; the LAC is then ``e``.
* A bookie that errs or does not answer within ``add_timeout_ms`` is replaced (time during
  which this client's event loop did not run does not count: a blocked or stopped client
  must not blame its bookies): a new segment
  starting at LAC + 1 is written to the metadata by compare-and-set, acks from the replaced
  bookie are forgotten, and pending entries are re-sent to its replacement. No add completes
  while the change is in progress. A lost CAS re-reads the metadata: if the ledger is no longer
  OPEN (a reader is recovering it) every pending add fails with ``LedgerFencedError``.
* EFENCED from any bookie fails every pending and later add with ``LedgerFencedError``;
  EUA with ``UnauthorizedAccessError``.
* ``close`` waits for pending adds, then sets CLOSED with last entry = LAC and the length up
  to it. If the metadata changed under it: already CLOSED at the same entry is success,
  anything else an error.

Limits: at most ``pending_adds_max`` adds in flight (``append`` waits for a slot);
``ensemble_changes_max`` changes per handle; ``metadata_retries_max`` lost CAS per change.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections import deque
from typing import Any

from bkeeper.client.context import ClientContext
from bkeeper.client.distribution import write_sets
from bkeeper.client.pool import Connection
from bkeeper.common.errors import (
    BKeeperError,
    BookieError,
    ClientClosedError,
    LedgerClosedError,
    LedgerFencedError,
    MetadataError,
    MetadataVersionError,
    UnauthorizedAccessError,
)
from bkeeper.meta.ledger_metadata import LedgerMetadata, LedgerState
from bkeeper.meta.store import Versioned
from bkeeper.wire import v2
from bkeeper.wire.codes import Protocol, StatusCode
from bkeeper.wire.digest import DigestManager, master_key
from bkeeper.wire.messages import AddRequest, ForceLedgerRequest, WriteLacRequest

__all__ = ["WriteHandle"]

log = logging.getLogger(__name__)


class _PendingAdd:
    """One add in flight. ``data`` is the v2 ADD frame (the same bytes for every bookie) or,
    over v3, the entry body."""

    __slots__ = ("acked", "data", "entry_id", "future", "length", "sent_at")

    def __init__(
        self, entry_id: int, data: bytes, length: int, future: asyncio.Future[int], now: float
    ) -> None:
        self.entry_id = entry_id
        self.data = data
        self.length = length
        self.future = future
        self.sent_at = now
        self.acked: set[str] = set()


class WriteHandle:
    """Appends to one ledger. Made by ``BookKeeper.create_ledger``."""

    def __init__(
        self,
        ctx: ClientContext,
        ledger_id: int,
        metadata: Versioned[LedgerMetadata],
        password: bytes,
    ) -> None:
        self._ctx = ctx
        self._config = ctx.config
        self.ledger_id = ledger_id
        self._versioned = metadata
        meta = metadata.value
        self._digest = DigestManager(ledger_id, meta.digest_type, password)
        self._master_key = master_key(password)
        self._e, self._qw, self._qa = meta.ensemble_size, meta.write_quorum, meta.ack_quorum
        # One write set when Qw == E, else E of them: entry e uses _write_sets[e % len].
        self._write_sets = write_sets(self._e, self._qw)
        self._ensemble: tuple[str, ...] = tuple(meta.last_ensemble)
        self.last_add_pushed = -1
        self.last_add_confirmed = -1
        self.length = 0
        self._confirmed_length = 0
        self._pending: deque[_PendingAdd] = deque()
        self._pending_max = self._config.pending_adds_max
        self._slot_waiters: deque[asyncio.Future[None]] = deque()
        self._error: BaseException | None = None
        self._closed = False
        self._changing = False
        self._failed: set[str] = set()
        self._ever_failed: set[str] = set()
        self._ensemble_changes = 0
        self._loop = asyncio.get_running_loop()
        self._v3 = self._config.protocol is Protocol.V3
        # v2: the connection of each ensemble position, with this ledger's listeners on it.
        self._conns: list[Connection | None] = [None] * self._e
        self._tasks: set[asyncio.Task[Any]] = set()
        ctx.handles.add(self)
        self._spawn(self._check_timeouts())
        if self._config.explicit_lac_interval_ms:
            self._spawn(self._write_lac_periodically())

    # -- public --------------------------------------------------------------------------
    @property
    def metadata(self) -> LedgerMetadata:
        return self._versioned.value

    @property
    def ensemble(self) -> tuple[str, ...]:
        return self._ensemble

    @property
    def pending_adds(self) -> int:
        return len(self._pending)

    async def append(self, data: bytes) -> int:
        """Append ``data``; returns its entry id once an ack quorum made it durable."""
        future = await self.append_async(data)
        return await future

    async def append_async(self, data: bytes) -> asyncio.Future[int]:
        """Wait for a pipeline slot, send ``data``; the future completes with its entry id."""
        self._check_open()
        if len(self._pending) >= self._pending_max:
            await self._wait_for_slot()
        entry_id = self.last_add_pushed + 1
        self.last_add_pushed = entry_id
        self.length += len(data)
        if self._v3:
            wire = self._digest.encode_entry(entry_id, self.last_add_confirmed, self.length, data)
        else:
            header, digest = self._digest.entry_parts(
                entry_id, self.last_add_confirmed, self.length, data
            )
            wire = v2.add_request_frame(
                self._master_key,
                (header, digest, data),
                len(header) + len(digest) + len(data),
            )
        add = _PendingAdd(
            entry_id, wire, self.length, self._loop.create_future(), self._ctx.clock.monotonic()
        )
        self._pending.append(add)
        self._send(add, self._write_sets[entry_id % len(self._write_sets)])
        return add.future

    async def _wait_for_slot(self) -> None:
        while len(self._pending) >= self._pending_max:
            waiter: asyncio.Future[None] = self._loop.create_future()
            self._slot_waiters.append(waiter)
            try:
                await waiter
            finally:
                if not waiter.done():
                    waiter.cancel()
            self._check_open()

    def _wake_slot_waiters(self) -> None:
        free = self._pending_max - len(self._pending)
        waiters = self._slot_waiters
        while waiters and free > 0:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                free -= 1

    async def force(self) -> int:
        """Ask every bookie of the ensemble to make this ledger durable; returns the LAC."""
        lac = self.last_add_confirmed
        responses = await asyncio.gather(
            *(
                self._ctx.pool.send(b, ForceLedgerRequest(self.ledger_id), Protocol.V3)
                for b in self._ensemble
            )
        )
        for response in responses:
            if response.status is not StatusCode.EOK:
                raise BookieError(f"ledger {self.ledger_id}: force failed: {response.status.name}")
        return lac

    async def close(self) -> None:
        """Wait for pending adds, then seal the ledger at its LAC."""
        if self._closed:
            return
        self._closed = True
        pending = [add.future for add in self._pending]
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        self._detach()
        await self._stop_tasks()
        if isinstance(self._error, LedgerFencedError):
            raise LedgerFencedError(f"ledger {self.ledger_id} was fenced by a recovering reader")
        await self._seal()

    async def abort(self, error: BaseException) -> None:
        """Fail what is pending with ``error`` and stop background work (client closing)."""
        self._closed = True
        self._fail_all(error)
        self._detach()
        await self._stop_tasks()

    # -- sending -------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._ctx.closed:
            raise ClientClosedError("the client is closed")
        if self._error is not None:
            raise self._error
        if self._closed:
            raise LedgerClosedError(f"ledger {self.ledger_id} is closed")

    def _send(self, add: _PendingAdd, positions: tuple[int, ...]) -> None:
        if self._v3:
            self._send_v3(add, positions)
            return
        conns = self._conns
        for position in positions:
            conn = conns[position]
            if conn is None or not conn.connected:
                conn = self._attach(position)
                if conn is None:
                    self._spawn(self._connect_and_send(add, self._ensemble[position]))
                    continue
            try:
                conn.send_add_frame(add.data)
            except BKeeperError:
                self._bookie_failed(self._ensemble[position])

    def _attach(self, position: int) -> Connection | None:
        """The live connection for ``position`` with this ledger's listeners, if any."""
        bookie = self._ensemble[position]
        conn = self._ctx.pool.connection_nowait(bookie)
        if conn is not None:
            conn.listen_adds(
                self.ledger_id,
                functools.partial(self._on_add, bookie),
                functools.partial(self._on_lost, bookie),
            )
        self._conns[position] = conn
        return conn

    def _detach(self) -> None:
        for position, conn in enumerate(self._conns):
            if conn is not None:
                conn.forget_adds(self.ledger_id)
                self._conns[position] = None

    def _send_v3(self, add: _PendingAdd, positions: tuple[int, ...]) -> None:
        pool = self._ctx.pool
        for position in positions:
            bookie = self._ensemble[position]
            conn = pool.connection_nowait(bookie)
            if conn is None:
                self._spawn(self._connect_and_send(add, bookie))
                continue
            request = AddRequest(
                self.ledger_id, add.entry_id, self._master_key, add.data, txn_id=conn.next_txn_id()
            )
            try:
                future = conn.send(request)
            except BKeeperError:
                self._bookie_failed(bookie)
                continue
            future.add_done_callback(functools.partial(self._on_response, add, bookie))

    async def _connect_and_send(self, add: _PendingAdd, bookie: str) -> None:
        try:
            await self._ctx.pool.connection(bookie)
        except BKeeperError as exc:
            log.warning("ledger %d: bookie %s unreachable: %s", self.ledger_id, bookie, exc)
            self._bookie_failed(bookie)
            return
        if not add.future.done() and bookie in self._ensemble:
            position = self._ensemble.index(bookie)
            if position in self._write_sets[add.entry_id % len(self._write_sets)]:
                self._send(add, (position,))

    def _on_add(self, bookie: str, status: StatusCode, entry_id: int) -> None:
        """v2 listener: ``bookie`` answered the add of ``entry_id``."""
        pending = self._pending
        if not pending:
            return
        index = entry_id - pending[0].entry_id
        if index < 0 or index >= len(pending):
            return  # completed already, or failed
        add = pending[index]
        if status is StatusCode.EOK:
            if bookie in self._ensemble:
                acked = add.acked
                acked.add(bookie)
                if index == 0 and len(acked) >= self._qa:
                    self._complete()
            return
        self._add_failed(bookie, status, None)

    def _on_lost(self, bookie: str, error: BaseException) -> None:
        for position, conn in enumerate(self._conns):
            if conn is not None and self._ensemble[position] == bookie:
                self._conns[position] = None
        if self._pending:
            log.info("ledger %d: connection to %s lost: %s", self.ledger_id, bookie, error)
            self._bookie_failed(bookie)

    def _on_response(self, add: _PendingAdd, bookie: str, future: asyncio.Future[Any]) -> None:
        """v3: ``bookie`` answered ``add``. Whether the add is still in the pipeline is what
        counts, not its future: a caller that stopped waiting (a cancelled ``append``) has
        cancelled that, and every later entry waits for this one to complete."""
        if future.cancelled():
            return
        exc = future.exception()
        pending = self._pending
        if not pending or add.entry_id < pending[0].entry_id:
            return  # completed already, or failed
        status = StatusCode.EIO if exc is not None else future.result().status
        if status is StatusCode.EOK:
            if bookie in self._ensemble:
                add.acked.add(bookie)
                if len(add.acked) >= self._qa and pending[0] is add:
                    self._complete()
            return
        self._add_failed(bookie, status, exc)

    def _add_failed(self, bookie: str, status: StatusCode, exc: BaseException | None) -> None:
        if status is StatusCode.EFENCED:
            self._fail_all(LedgerFencedError(f"ledger {self.ledger_id} is fenced"))
        elif status is StatusCode.EUA:
            self._fail_all(UnauthorizedAccessError(f"ledger {self.ledger_id}: wrong password"))
        else:
            log.info("ledger %d: bookie %s failed add: %s", self.ledger_id, bookie, exc or status)
            self._bookie_failed(bookie)

    def _complete(self) -> None:
        if self._changing:
            return
        pending, qa = self._pending, self._qa
        while pending and len(pending[0].acked) >= qa:
            add = pending.popleft()
            self.last_add_confirmed = add.entry_id
            self._confirmed_length = add.length
            if not add.future.done():
                add.future.set_result(add.entry_id)
        if self._slot_waiters:
            self._wake_slot_waiters()

    def _fail_all(self, error: BaseException) -> None:
        if self._error is None:
            self._error = error
        while self._pending:
            add = self._pending.popleft()
            if not add.future.done():
                add.future.set_exception(error)
        while self._slot_waiters:
            waiter = self._slot_waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the waiter raises the error itself

    # -- ensemble changes ----------------------------------------------------------------
    def _bookie_failed(self, bookie: str) -> None:
        if bookie not in self._ensemble or self._error is not None:
            return
        self._failed.add(bookie)
        self._ever_failed.add(bookie)
        if not self._changing:
            self._changing = True
            self._spawn(self._change_ensemble())

    async def _change_ensemble(self) -> None:
        try:
            while self._failed & set(self._ensemble):
                self._ensemble_changes += 1
                if self._ensemble_changes > self._config.ensemble_changes_max:
                    raise LedgerClosedError(
                        f"ledger {self.ledger_id}: more than "
                        f"{self._config.ensemble_changes_max} ensemble changes"
                    )
                await self._replace_failed()
        except BKeeperError as exc:
            log.warning("ledger %d: ensemble change failed: %s", self.ledger_id, exc)
            self._changing = False
            self._fail_all(exc)
            return
        except Exception as exc:
            log.exception("ledger %d: ensemble change failed", self.ledger_id)
            self._changing = False
            self._fail_all(exc)
            return
        self._changing = False
        self._complete()

    async def _replace_failed(self) -> None:
        failed = self._failed & set(self._ensemble)
        first = self.last_add_confirmed + 1
        log.info("ledger %d: replacing %s from entry %d", self.ledger_id, failed, first)
        new = list(self._ensemble)
        for position, bookie in enumerate(self._ensemble):
            if bookie in failed:
                new[position] = await self._ctx.replacement(
                    tuple(new), position, self._qw, self._ever_failed
                )
        log.info("ledger %d: new ensemble %s", self.ledger_id, new)
        await self._write_segment(first, tuple(new))
        replaced = {old: new[i] for i, old in enumerate(self._ensemble) if old in failed}
        log.info("ledger %d: ensemble change at entry %d: %s", self.ledger_id, first, replaced)
        self._ensemble = tuple(new)
        self._failed -= failed
        fresh = {i for i, b in enumerate(new) if b in replaced.values()}
        for position in fresh:
            conn = self._conns[position]
            if conn is not None:
                conn.forget_adds(self.ledger_id)
                self._conns[position] = None
        for add in self._pending:
            add.acked -= failed
            add.sent_at = self._ctx.clock.monotonic()
            positions = self._write_sets[add.entry_id % len(self._write_sets)]
            again = tuple(p for p in positions if p in fresh)
            if again:
                self._send(add, again)

    async def _write_segment(self, first: int, ensemble: tuple[str, ...]) -> None:
        for _ in range(self._config.metadata_retries_max):
            meta = self._versioned.value.with_new_segment(first, ensemble)
            try:
                self._versioned = await self._ctx.ledgers.write(
                    self.ledger_id, meta, self._versioned.version
                )
                return
            except MetadataVersionError:
                current = await self._ctx.ledgers.read(self.ledger_id)
                if current.value.state is not LedgerState.OPEN:
                    raise LedgerFencedError(
                        f"ledger {self.ledger_id} is {current.value.state.name}: "
                        "another client is recovering it"
                    ) from None
                self._versioned = current
        raise MetadataError(f"ledger {self.ledger_id}: metadata kept changing during a change")

    # -- close ---------------------------------------------------------------------------
    async def _seal(self) -> None:
        lac, length = self.last_add_confirmed, self._confirmed_length
        for _ in range(self._config.metadata_retries_max):
            meta = self._versioned.value
            if meta.state is LedgerState.CLOSED:
                if meta.last_entry_id == lac:
                    return
                raise LedgerClosedError(
                    f"ledger {self.ledger_id} was closed by another client at entry "
                    f"{meta.last_entry_id}, this writer confirmed {lac}"
                )
            if meta.state is LedgerState.IN_RECOVERY:
                raise LedgerFencedError(f"ledger {self.ledger_id} is being recovered")
            try:
                self._versioned = await self._ctx.ledgers.write(
                    self.ledger_id, meta.closed(lac, length), self._versioned.version
                )
                return
            except MetadataVersionError:
                self._versioned = await self._ctx.ledgers.read(self.ledger_id)
        raise MetadataError(f"ledger {self.ledger_id}: could not close, metadata kept changing")

    # -- background ----------------------------------------------------------------------
    def _spawn(self, coro: Any) -> None:
        task = self._loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _stop_tasks(self) -> None:
        current = asyncio.current_task()
        tasks = [t for t in self._tasks if t is not current]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _check_timeouts(self) -> None:
        interval = self._config.timeout_check_interval_ms / 1000.0
        timeout = self._config.add_timeout_ms / 1000.0
        clock = self._ctx.clock
        due = clock.monotonic() + interval
        while True:
            await asyncio.sleep(interval)
            now = clock.monotonic()
            stalled, due = now - due, now + interval
            if stalled > interval:
                # This loop did not run for a while (the caller blocked it, the process was
                # stopped): answers may be waiting unread, and frames may not even have left.
                # No bookie can be blamed for that time, so it does not count.
                self._discount_stall(stalled)
                continue
            if self._changing or not self._pending:
                continue
            deadline = now - timeout
            for add in list(self._pending):
                if add.sent_at > deadline:
                    break
                positions = self._write_sets[add.entry_id % len(self._write_sets)]
                for position in positions:
                    bookie = self._ensemble[position]
                    if bookie not in add.acked:
                        log.warning(
                            "ledger %d: bookie %s did not acknowledge entry %d in time",
                            self.ledger_id,
                            bookie,
                            add.entry_id,
                        )
                        self._bookie_failed(bookie)

    def _discount_stall(self, stalled_s: float) -> None:
        log.debug("ledger %d: event loop stalled %.3f s", self.ledger_id, stalled_s)
        for add in self._pending:
            add.sent_at += stalled_s

    async def _write_lac_periodically(self) -> None:
        interval = self._config.explicit_lac_interval_ms / 1000.0
        sent = -1
        while True:
            await asyncio.sleep(interval)
            lac = self.last_add_confirmed
            if lac == sent or self._pending:
                continue
            body = self._digest.encode_lac(lac)
            request = WriteLacRequest(self.ledger_id, lac, self._master_key, body)
            results = await asyncio.gather(
                *(self._ctx.pool.send(b, request, Protocol.V3) for b in self._ensemble),
                return_exceptions=True,
            )
            if all(not isinstance(r, BaseException) for r in results):
                sent = lac
