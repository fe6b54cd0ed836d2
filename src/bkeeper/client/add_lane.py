"""The connections of one writer: the add lane's I/O, thin.

:class:`AddLane` holds the connection of each ensemble position of one ledger's writer, with
the ledger's listeners on it, and queues adds on them (``Connection.send_add``, v2 or v3 alike).
Every answer goes to the writer's ``on_add(bookie, status, entry id)``; a lost connection, a
bookie that cannot be reached or a send that fails to ``on_failed(bookie)``; a bookie that
refuses this client's credentials before it connects (``UnauthorizedAccessError``: the message
says what is missing) to ``on_refused(error)``, which fails the writer (as Apache BookKeeper
fails a ledger's adds on an authentication error: replacing the bookie would not help).
A position with no live connection gets one connect task per bookie (owned by the writer's
:class:`TaskOwner`), and the entries waiting for it are sent once it is up, if the pipeline
still wants them there.
At most :data:`CONNECTING_ENTRIES_MAX` entries and ``connection_write_buffer_bytes_max`` bytes
(what a connected bookie's socket may hold before writers wait for it) wait for one connection;
past that the bookie is treated as failed. The connect attempt itself is bounded by
``connect_timeout_ms``. (``pending_adds_max`` entries was the bound before: with Qa < Qw the
others' acks keep the pipeline moving, and a connection slower to set up than that many entries
take to write, a TLS handshake and AUTH exchange on a busy machine, had its bookie replaced
for nothing.) A writer that closes waits for the connects in progress (:meth:`AddLane.settle`).

But while too few bookies are connected for an ack quorum (a new client's first appends: every
connect is in progress), nothing can be acknowledged without them: appends wait for the
connects instead (:meth:`AddLane.wait_connecting`) when theirs would go past the bytes, as they
wait for a full socket; and one call's entries (an ``append_many``) are taken whole by a bookie
that holds none yet. So a burst of large entries from a new client (a chunked record) is not a
failure of every bookie.

:class:`Slots` is where appends wait for room in the pipeline (``pending_adds_max``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import deque
from collections.abc import Callable, Iterable

from bkeeper.client.adding import AddPipeline
from bkeeper.client.context import ClientContext
from bkeeper.client.pool import Connection
from bkeeper.common.errors import BKeeperError, UnauthorizedAccessError
from bkeeper.common.tasks import TaskOwner
from bkeeper.wire.codes import StatusCode

__all__ = ["CONNECTING_ENTRIES_MAX", "AddLane", "Slots"]

log = logging.getLogger(__name__)

#: Entries one writer holds for a bookie it is still connecting to (their bytes are bounded by
#: ``connection_write_buffer_bytes_max``); past either the bookie counts as failed.
CONNECTING_ENTRIES_MAX = 100_000


class AddLane:
    """Sends one writer's adds and routes their answers back (see the module doc)."""

    def __init__(
        self,
        ctx: ClientContext,
        ledger_id: int,
        master_key: bytes,
        adds: AddPipeline,
        tasks: TaskOwner,
        *,
        on_add: Callable[[str, list[tuple[StatusCode, int, int]]], None],
        on_failed: Callable[[str], None],
        on_run: Callable[[str, int, int], None] | None = None,
        on_refused: Callable[[BKeeperError], None] | None = None,
    ) -> None:
        self._ctx = ctx
        self._ledger_id = ledger_id
        self._master_key = master_key
        self._adds = adds
        self._tasks = tasks
        self._on_add = on_add
        self._on_failed = on_failed
        self._on_run = on_run
        self._on_refused = on_refused
        #: the connection of each ensemble position, with this ledger's listeners on it
        self.conns: list[Connection | None] = [None] * len(adds.ensemble)
        # bookie -> (entry id, data, position) to send once its connection is up
        self._connecting: dict[str, list[tuple[int, bytes, int]]] = {}
        self._connecting_bytes: dict[str, int] = {}  # bookie -> bytes of its waiting entries
        self._connecting_bytes_max = ctx.config.connection_write_buffer_bytes_max
        self._connects: dict[str, asyncio.Task[None]] = {}  # bookie -> its connect task

    def send_many(self, first_entry_id: int, datas: list[bytes]) -> None:
        """Queue the adds of consecutive entries from ``first_entry_id`` (``datas`` from
        ``encode_add``) to their write sets: one ``send_adds`` per connection."""
        sets = self._adds.write_sets
        if len(sets) == 1:  # E == Qw: every entry to every position
            entry_ids: range | list[int] = range(first_entry_id, first_entry_id + len(datas))
            for position in sets[0]:
                self._send_to(position, entry_ids, datas)
            return
        ids: dict[int, list[int]] = {}
        frames: dict[int, list[bytes]] = {}
        count = len(sets)
        for entry_id, data in enumerate(datas, first_entry_id):
            for position in sets[entry_id % count]:
                if position in ids:
                    ids[position].append(entry_id)
                    frames[position].append(data)
                else:
                    ids[position] = [entry_id]
                    frames[position] = [data]
        for position, entry_ids in ids.items():
            self._send_to(position, entry_ids, frames[position])

    def _send_to(self, position: int, entry_ids: range | list[int], datas: list[bytes]) -> None:
        conn = self.conns[position]
        if conn is None or not conn.connected:
            conn = self._attach(position)
            if conn is None:
                bookie = self._adds.ensemble[position]
                whole = not self._connecting.get(bookie)  # holds none: take the call's whole
                for entry_id, data in zip(entry_ids, datas, strict=True):
                    self._connect_later(bookie, entry_id, data, position, whole)
                return
        try:
            conn.send_adds(self._ledger_id, entry_ids, self._master_key, datas)
        except BKeeperError:
            self._on_failed(self._adds.ensemble[position])

    def send(self, entry_id: int, data: bytes, positions: tuple[int, ...]) -> None:
        """Queue the add of ``entry_id`` (``data`` from ``encode_add``) to ``positions``."""
        conns, ledger_id, key = self.conns, self._ledger_id, self._master_key
        for position in positions:
            conn = conns[position]
            if conn is None or not conn.connected:
                conn = self._attach(position)
                if conn is None:
                    self._connect_later(self._adds.ensemble[position], entry_id, data, position)
                    continue
            try:
                conn.send_add(ledger_id, entry_id, key, data)
            except BKeeperError:
                self._on_failed(self._adds.ensemble[position])

    async def wait_connecting(self, incoming_bytes: int, ack_quorum: int) -> None:
        """While fewer than ``ack_quorum`` bookies of the ensemble are not being connected
        to, wait until the connects in progress whose waiting entries and ``incoming_bytes``
        more would go past ``connection_write_buffer_bytes_max`` end (up, or failed: each is
        bounded by the connect timeout). With an ack quorum up, a connect that slow is a
        failure of its bookie instead (see the module docstring)."""
        if len(self._adds.ensemble) - len(self._connecting_bytes) >= ack_quorum:
            return
        for bookie, held in list(self._connecting_bytes.items()):
            task = self._connects.get(bookie)
            if task is not None and held + incoming_bytes > self._connecting_bytes_max:
                await asyncio.wait({task})  # (its outcome is the connect's own to report)

    async def wait_writable(self) -> None:
        """Wait until no connection's socket buffer is over its high-water mark."""
        for conn in self.conns:
            if conn is not None and not conn.writable:
                await conn.wait_writable()

    async def settle(self) -> None:
        """Wait for the connects in progress (each bounded by the connect timeout), so that
        the entries waiting for them are sent: a writer closing sends every entry to its
        whole write set, not only to the ack quorum that acknowledged it."""
        while self._connects:
            bookie, task = next(iter(self._connects.items()))
            await asyncio.gather(task, return_exceptions=True)
            if self._connects.get(bookie) is task:
                del self._connects[bookie]

    def detach(self, positions: Iterable[int] | None = None) -> None:
        """Take this ledger's listeners off the connections of ``positions`` (all: None)."""
        for position in range(len(self.conns)) if positions is None else positions:
            conn = self.conns[position]
            if conn is not None:
                conn.forget_adds(self._ledger_id)
                self.conns[position] = None

    def _attach(self, position: int) -> Connection | None:
        bookie = self._adds.ensemble[position]
        conn = self._ctx.pool.connection_nowait(bookie)
        if conn is not None:
            on_lost = functools.partial(self._lost, bookie)
            on_run = None if self._on_run is None else functools.partial(self._on_run, bookie)
            on_add = functools.partial(self._on_add, bookie)
            conn.listen_adds(self._ledger_id, on_add, on_lost, on_run)
        self.conns[position] = conn
        return conn

    def _lost(self, bookie: str, error: BaseException) -> None:
        ensemble = self._adds.ensemble
        self.detach([p for p, conn in enumerate(self.conns) if conn and ensemble[p] == bookie])
        if len(self._adds):
            log.info("ledger %d: connection to %s lost: %s", self._ledger_id, bookie, error)
            self._on_failed(bookie)

    @property
    def connecting(self) -> bool:
        """Entries wait for a bookie being connected to (appends check
        :meth:`wait_connecting` then)."""
        return bool(self._connecting_bytes)

    def _connect_later(
        self, bookie: str, entry_id: int, data: bytes, position: int, whole: bool = False
    ) -> None:
        waiting = self._connecting.get(bookie)
        if waiting is None:
            self._connecting[bookie] = waiting = []
            self._connects[bookie] = self._tasks.spawn(
                self._connect_and_send(bookie), f"connect to {bookie}"
            )
        held = self._connecting_bytes.get(bookie, 0) + len(data)
        if waiting and (
            len(waiting) >= CONNECTING_ENTRIES_MAX
            or (held > self._connecting_bytes_max and not whole)
        ):
            # Connecting for longer than it takes to write that much: treat it as down (the
            # ensemble change replaces it) rather than hold ever more entries for it. Not
            # ``pending_adds_max``: entries the others acknowledged meanwhile are not pending,
            # and a small pipeline would give up on a bookie that is merely slow to accept.
            log.warning(
                "ledger %d: bookie %s still connecting with %d entries (%d bytes) waiting: "
                "counted as failed",
                *(self._ledger_id, bookie, len(waiting), held - len(data)),
            )
            self._on_failed(bookie)
            return
        self._connecting_bytes[bookie] = held
        waiting.append((entry_id, data, position))

    async def _connect_and_send(self, bookie: str) -> None:
        try:
            await self._connect_and_send_now(bookie)
        finally:
            if self._connects.get(bookie) is asyncio.current_task():
                del self._connects[bookie]

    async def _connect_and_send_now(self, bookie: str) -> None:
        try:
            await self._ctx.pool.connection(bookie)
        except BKeeperError as exc:
            refused = isinstance(exc, UnauthorizedAccessError) and self._on_refused is not None
            if not refused:
                log.warning("ledger %d: bookie %s unreachable: %s", self._ledger_id, bookie, exc)
            self._connecting.pop(bookie, None)
            self._connecting_bytes.pop(bookie, None)
            if refused and self._on_refused is not None:
                self._on_refused(exc)
            else:
                self._on_failed(bookie)
            return
        lac = self._adds.last_add_confirmed
        self._connecting_bytes.pop(bookie, None)
        for entry_id, data, position in self._connecting.pop(bookie, ()):
            if entry_id <= lac:
                # Completed on the others' acks meanwhile: this bookie must still get its
                # replica (Qw copies, not Qa), unless an ensemble change has replaced it.
                if self._adds.ensemble[position] == bookie:
                    self.send(entry_id, data, (position,))
                continue
            target = self._adds.resend_target(entry_id, bookie)
            if target is not None:
                self.send(entry_id, target[0].data, (target[1],))


class Slots:
    """Appends waiting for room in the pipeline, served first come first served; each waits
    for the room it needs (one entry, or a whole ``append_many`` batch).

    ``woken`` counts the room promised to waiters woken that have not run yet: :meth:`release`
    wakes only for room beyond it (two releases before the woken run would otherwise wake
    more than fit, and those sent back to wait would queue behind later appends: entry ids
    out of call order), and a new append waits behind them (:attr:`busy`) rather than take
    their room. A waiter is woken only when the room covers its need, and those behind it
    wait for it (no overtaking: entry ids stay in call order).
    """

    def __init__(self) -> None:
        self.waiters: deque[tuple[asyncio.Future[None], int]] = deque()
        self.woken = 0

    @property
    def busy(self) -> bool:
        """Appends are waiting, or woken and about to take their room."""
        return bool(self.waiters) or self.woken > 0

    async def wait(self, need: int = 1, *, first: bool = False) -> None:
        """Wait until :meth:`release` or :meth:`release_all` wakes this caller (``need``
        entries of room; ``first``: ahead of the others, for a caller woken before whose
        room was taken by a failure or a smaller window); the caller checks again whether
        there is room (or why not)."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if first:
            self.waiters.appendleft((waiter, need))
        else:
            self.waiters.append((waiter, need))
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():  # woken, then cancelled
                self.woken -= need
                self.release(need)  # its room goes to the next in line
            else:
                waiter.cancel()
            raise
        self.woken -= need

    def release(self, free: int) -> None:
        """Room for ``free`` more entries: wake the waiters in line whose need it covers
        beyond what the woken ones will take."""
        free -= self.woken
        waiters = self.waiters
        while waiters and free > 0:
            waiter, need = waiters[0]
            if waiter.done():  # cancelled while waiting
                waiters.popleft()
                continue
            if need > free:
                break
            waiters.popleft()
            waiter.set_result(None)
            self.woken += need
            free -= need

    def release_all(self) -> None:
        while self.waiters:
            waiter, need = self.waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                self.woken += need
