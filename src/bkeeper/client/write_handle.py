"""The writer of one ledger: the asyncio shell of :class:`~bkeeper.client.adding.AddPipeline`.

The pipeline decides (acks per write set, in-order completion, timeouts, ensemble changes and
re-sends: its module doc has the rules); this shell encodes entries, sends them, feeds answers
and the time back, and performs the effects. One add lane for both protocols: an entry is
encoded once (``bookie_client.encode_add``), queued with ``Connection.send_add`` on its write
set, and every answer comes back to :meth:`WriteHandle._on_add`, a batch per chunk read.
``close`` waits for pending adds, then seals at the LAC (``segments.seal``).

Deletion: the handle watches its ledger's metadata node (the first
``ClientConfig.metadata_watches_max`` open handles of a client; a later one learns of it at
its next metadata write: an ensemble change or the close). Once the node is deleted the
writer fails with ``LedgerDeletedError``: every add not acknowledged yet, every later append,
and the close. Bookies keep accepting adds to a deleted ledger (they hold its entries until
their garbage collection, and after it take them as a new ledger), so without this a writer
would go on being acknowledged for data that is gone.

Degraded writes (``ClientConfig.degraded_writes``; ``adding`` rule 5): what the writer does
then is told in :mod:`~bkeeper.client.degraded_writes`.

Limits: ``pending_adds_max`` adds in flight; ``append`` waits while a socket's buffer is full;
``ensemble_changes_max`` changes per handle; ``metadata_retries_max`` lost CAS per update;
entries of at most :attr:`WriteHandle.max_entry_bytes` (what fits ``max_frame_bytes``): a
larger one is refused with ``EntryTooLargeError`` before it gets an entry id or is sent, and
the writer goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence

from bkeeper.client.add_lane import AddLane, Slots
from bkeeper.client.adding import NOTHING, AddPipeline, Effects, PendingAdd
from bkeeper.client.bookie_client import add_encoders, entry_bytes_max
from bkeeper.client.context import ClientContext
from bkeeper.client.degraded_writes import answering_again, log_degraded, mark_gap
from bkeeper.client.segments import change_ensemble, replacement_ensemble, seal
from bkeeper.client.writer_requests import force_ledger, write_lac_periodically
from bkeeper.common.errors import (
    BKeeperError,
    ClientClosedError,
    EntryTooLargeError,
    LedgerClosedError,
    LedgerDeletedError,
    LedgerFencedError,
    NotEnoughBookiesError,
)
from bkeeper.common.tasks import TaskOwner
from bkeeper.meta.ledger_metadata import LedgerMetadata
from bkeeper.meta.store import Versioned
from bkeeper.wire.codes import StatusCode, status_text
from bkeeper.wire.digest import DigestManager, master_key

__all__ = ["AddCallback", "WriteHandle"]

log = logging.getLogger(__name__)

#: ``callback(entry_id, error)`` of :meth:`WriteHandle.append_callback`: ``error`` is None
#: once an ack quorum made the entry durable, else why it failed.
AddCallback = Callable[[int, BaseException | None], None]


class WriteHandle:
    """Appends to one ledger. Made by ``BookKeeper.create_ledger``."""

    def __init__(
        self,
        ctx: ClientContext,
        ledger_id: int,
        metadata: Versioned[LedgerMetadata],
        password: bytes,
        *,
        explicit_lac_interval_ms: int | None = None,
    ) -> None:
        """``explicit_lac_interval_ms``: this ledger's (None: ``ctx.config``'s)."""
        self._ctx = ctx
        config = self._config = ctx.config
        self.ledger_id = ledger_id
        self._versioned = metadata
        meta = metadata.value
        self._digest = DigestManager(ledger_id, meta.digest_type, password)
        self._master_key = master_key(password)
        #: entry (id, lac, length, payload) -> what ``send_adds`` takes: the v2 ADD frame, or
        #: the v3 entry body; and the same for many entries in one pass
        self._encode, self._encode_many = add_encoders(
            config.protocol, self._master_key, self._digest
        )
        #: The largest entry (payload bytes) an append takes: its add fits ``max_frame_bytes``.
        self.max_entry_bytes = entry_bytes_max(
            config.protocol, config.max_frame_bytes, self._digest.digest_length
        )
        self._staged: list[bytes] = []  # appended, to be sent at the end of this iteration
        self._adds = AddPipeline.for_ledger(ledger_id, meta, config, ctx.clock.monotonic())
        self._slots = Slots()
        #: the new ensemble a degraded writer's search found, for the change it starts
        self._chosen: tuple[str, ...] | None = None
        self._closed = False
        #: The close sealed the ledger (or there is nothing to seal any more: aborted).
        self._sealed = False
        self._loop = asyncio.get_running_loop()
        self._protocol = config.protocol
        self._monotonic = ctx.clock.monotonic
        self._tasks = TaskOwner(f"ledger {ledger_id} writer", error=LedgerClosedError)
        self._lane = AddLane(
            ctx,
            ledger_id,
            self._master_key,
            self._adds,
            self._tasks,
            on_add=self._on_add,
            on_failed=self._bookie_failed,
            on_run=self._on_run,
            on_refused=self._refused,
        )
        ctx.handles.add(self)
        #: the timeout checks run (False: paused while the writer is idle, see _push)
        self._ticking = True
        self._tick_wanted = asyncio.Event()
        self._tasks.spawn(self._check_timeouts(), "add timeouts")
        if len(ctx.handles) <= config.metadata_watches_max:  # beyond: found at a write
            self._tasks.spawn(self._watch_deleted(), "watch for the ledger's deletion")
        #: set when the last add in flight completes, if explicit LAC is on (else None)
        self._went_idle: asyncio.Event | None = None
        if explicit_lac_interval_ms is None:
            explicit_lac_interval_ms = config.explicit_lac_interval_ms
        if explicit_lac_interval_ms:
            self._went_idle = asyncio.Event()
            lac_writer = write_lac_periodically(
                ctx,
                self._digest,
                self._master_key,
                idle_lac=self._idle_lac,
                ensemble=lambda: self.live_ensemble,
                went_idle=self._went_idle,
                interval_s=explicit_lac_interval_ms / 1000.0,
            )
            self._tasks.spawn(lac_writer, "explicit LAC")

    # -- public --------------------------------------------------------------------------
    @property
    def metadata(self) -> LedgerMetadata:
        return self._versioned.value

    @property
    def ensemble(self) -> tuple[str, ...]:
        return self._adds.ensemble

    @property
    def live_ensemble(self) -> tuple[str, ...]:
        """The bookies of :attr:`ensemble` that are not down (all but while degraded)."""
        return self._adds.live_ensemble

    @property
    def writable(self) -> bool:
        """Whether appends are taken: not closed, not failed (degraded or not)."""
        return not self._closed and self._adds.error is None and not self._ctx.closed

    @property
    def degraded(self) -> frozenset[str]:
        """The bookies of the ensemble that are down (degraded writes), or none."""
        return self._adds.down

    @property
    def pending_adds(self) -> int:
        return len(self._adds)

    @property
    def pending_adds_max(self) -> int:
        """The most entries in flight (``ClientConfig.pending_adds_max``): also the most one
        ``append_many`` takes."""
        return self._adds.pending_max

    @property
    def last_add_pushed(self) -> int:
        return self._adds.last_add_pushed

    @property
    def last_add_confirmed(self) -> int:
        return self._adds.last_add_confirmed

    @property
    def length(self) -> int:
        return self._adds.length

    async def append(self, data: bytes) -> int:
        """Append ``data``; returns its entry id once an ack quorum made it durable."""
        future = await self.append_async(data)
        return await future

    async def append_async(self, data: bytes) -> asyncio.Future[int]:
        """Wait for a pipeline slot and writable sockets, send ``data``; the future completes
        with its entry id. Entries appended in one event-loop iteration go out together (one
        ``send_adds`` per connection, at the end of the iteration). ``EntryTooLargeError``
        for an entry over :attr:`max_entry_bytes`, before anything is sent."""
        if len(data) > self.max_entry_bytes:
            raise self._too_large(len(data))
        self._check_open()
        if self._must_wait():
            await self._admit(len(data))
        future: asyncio.Future[int] = self._loop.create_future()
        self._push(data, future)
        return future

    async def append_callback(self, data: bytes, callback: AddCallback) -> int:
        """:meth:`append_async` without a future (BookKeeper's ``asyncAddEntry`` with an
        ``AddCallback``): returns the entry's id once it is sent, and calls
        ``callback(entry_id, None)`` once an ack quorum made it durable, or
        ``callback(entry_id, error)`` if it failed. No asyncio object is made per entry,
        so this is the cheapest way to append one entry at a time (no future to create,
        complete and collect).

        Callbacks run on the event loop as the answers are handled, in entry order: they
        must return quickly and not block. One that raises is logged and the others go on."""
        if len(data) > self.max_entry_bytes:
            raise self._too_large(len(data))
        self._check_open()
        if self._must_wait():
            await self._admit(len(data))
        return self._push(data, callback)

    def _must_wait(self) -> bool:
        """Whether an append must wait: for a pipeline slot, a writable socket or a bookie
        still connecting (:meth:`_admit` waits for each in turn)."""
        adds, slots = self._adds, self._slots
        if len(adds) >= adds.pending_max or slots.waiters or slots.woken:
            return True
        for conn in self._lane.conns:
            if conn is not None and not conn.writable:
                return True
        return bool(self._lane.connecting)

    async def _admit(self, size: int) -> None:
        adds, slots = self._adds, self._slots
        if len(adds) >= adds.pending_max or slots.waiters or slots.woken:
            await slots.wait()
            while True:  # in line behind earlier appends (entry ids in call order)
                self._check_open()
                if len(adds) < adds.pending_max:
                    break
                await slots.wait(first=True)
        for conn in self._lane.conns:
            if conn is not None and not conn.writable:
                await self._lane.wait_writable()
                self._check_open()
                break
        if self._lane.connecting:
            await self._lane.wait_connecting(size, self.metadata.ack_quorum)
            self._check_open()

    def _push(self, data: bytes, waiter: asyncio.Future[int] | AddCallback) -> int:
        """Entry ``data`` into the pipeline, staged to go out at the end of this loop
        iteration; its id."""
        adds = self._adds
        entry_id = adds.last_add_pushed + 1
        length = adds.length + len(data)
        wire = self._encode(entry_id, adds.last_add_confirmed, length, data)
        adds.append(entry_id, length, wire, waiter, self._monotonic())
        if not self._ticking:
            self._start_ticking()
        staged = self._staged
        if not staged:
            self._loop.call_soon(self._send_staged)
        staged.append(wire)
        return entry_id

    async def append_many(self, datas: Sequence[bytes]) -> range:
        """Append the entries ``datas`` (consecutive entry ids, in order); returns their ids
        once an ack quorum made the last one durable (and so every one: completion is in
        entry order)."""
        future = await self.append_many_async(datas)
        last = await future
        return range(last - len(datas) + 1, last + 1)

    async def append_many_async(self, datas: Sequence[bytes]) -> asyncio.Future[int]:
        """:meth:`append_async` for many entries at once: built in one pass, one future (for
        the last entry's id), one ``send_adds`` per connection. Waits until the pipeline has
        room for all of them; at most ``pending_adds_max`` entries a call."""
        count = len(datas)
        adds, slots = self._adds, self._slots
        if not 0 < count <= adds.pending_max:
            raise ValueError(
                f"append_many takes 1 to pending_adds_max ({adds.pending_max}) entries, not {count}"
            )
        self.check_entry_sizes(datas)
        self._check_open()
        if len(adds) + count > adds.pending_max or slots.waiters or slots.woken:
            await slots.wait(count)
            while True:
                self._check_open()
                if len(adds) + count <= adds.pending_max:
                    break
                await slots.wait(count, first=True)
        await self._lane.wait_writable()
        self._send_staged()  # earlier single appends go first (and count as connecting)
        if self._lane.connecting:
            await self._lane.wait_connecting(sum(map(len, datas)), self.metadata.ack_quorum)
        self._check_open()
        self._send_staged()  # (and those made while this one waited)
        first = adds.last_add_pushed + 1
        frames, lengths = self._encode_many(first, adds.last_add_confirmed, adds.length, datas)
        future: asyncio.Future[int] = self._loop.create_future()
        adds.append_many(first, lengths, frames, future, self._monotonic())
        if not self._ticking:
            self._start_ticking()
        self._lane.send_many(first, frames)
        return future

    def check_entry_sizes(self, datas: Sequence[bytes]) -> None:
        """``EntryTooLargeError`` if an entry of ``datas`` is over :attr:`max_entry_bytes`."""
        largest = max(map(len, datas), default=0)
        if largest > self.max_entry_bytes:
            raise self._too_large(largest)

    def _too_large(self, size: int) -> EntryTooLargeError:
        frame = self._config.max_frame_bytes
        return EntryTooLargeError(
            f"ledger {self.ledger_id}: an entry of {size} bytes is over the {self.max_entry_bytes}"
            f" that fit a {frame}-byte frame with their headers (client option max_frame_bytes);"
            " nothing was sent"
        )

    def _send_staged(self) -> None:
        """Send the entries :meth:`append_async` staged (consecutive, the last pushed)."""
        staged = self._staged
        if not staged:
            return
        self._staged = []
        if self._adds.error is not None:
            return  # failed with the pipeline; nothing to send
        self._lane.send_many(self._adds.last_add_pushed - len(staged) + 1, staged)

    async def force(self) -> int:
        """Ask every bookie of the ensemble (those up) to make this ledger durable; returns
        the LAC."""
        lac = self.last_add_confirmed
        await force_ledger(self._ctx, self.ledger_id, self.live_ensemble)
        return lac

    async def close(self) -> None:
        """Wait for pending adds, then seal the ledger at its LAC. A close whose seal failed
        (the metadata store away) may be called again: it tries the seal again."""
        if not self._closed:
            self._closed = True
            pending = [
                add.future for add in self._adds.pending if isinstance(add.future, asyncio.Future)
            ]
            if self._adds.pending and callable(last_callback := self._adds.pending[-1].future):
                # Entries complete (or fail) in order: the last one's outcome ends them all.
                pending.append(self._watch_callback(self._adds.pending[-1], last_callback))
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
            await self._lane.settle()  # entries waiting for a bookie still connecting go out
            self._lane.detach()
            await self._tasks.aclose()
        if self._sealed:
            return
        if isinstance(self._adds.error, LedgerFencedError):
            self._sealed = True  # by the recovering reader: nothing for this writer to seal
            raise LedgerFencedError(f"ledger {self.ledger_id} was fenced by a recovering reader")
        if isinstance(self._adds.error, LedgerDeletedError):
            self._sealed = True  # nothing left to seal
            raise self._adds.error
        lac, length = self._adds.last_add_confirmed, self._adds.confirmed_length
        self._versioned = await seal(self._ctx, self.ledger_id, self._versioned, lac, length)
        self._sealed = True

    async def abort(self, error: BaseException) -> None:
        """Fail what is pending with ``error`` and stop background work (client closing)."""
        self._closed = self._sealed = True  # nothing to seal: the client is going
        self._apply(self._adds.fail(error))
        self._lane.detach()
        await self._tasks.aclose()

    def _idle_lac(self) -> int | None:
        return None if len(self._adds) else self.last_add_confirmed

    def _check_open(self) -> None:
        if self._ctx.closed:
            raise ClientClosedError("the client is closed")
        if self._adds.error is not None:
            raise self._adds.error
        if self._closed:
            raise LedgerClosedError(f"ledger {self.ledger_id} is closed")

    # -- the add lane: answers in, effects out ------------------------------------------
    def _on_add(self, bookie: str, answers: list[tuple[StatusCode, int, int]]) -> None:
        """The listener: ``bookie`` answered these adds (``(status, ledger id, entry id)``, v2
        or v3, the ones that arrived together)."""
        done, stop = self._adds.ack_all(bookie, answers)
        if done:
            self._completed(done)
        if stop == len(answers):
            return
        ack, eok = self._adds.ack, StatusCode.EOK
        for status, _, entry_id in answers[stop:]:
            if status is eok:
                more = ack(bookie, entry_id)
                if more:
                    self._completed(more)
                continue
            log.info(
                "ledger %d: %s failed add %d: %s",
                *(self.ledger_id, bookie, entry_id, status_text(status)),
            )
            self._apply(self._adds.error_answer(bookie, status, entry_id))

    def _on_run(self, bookie: str, first_entry_id: int, count: int) -> None:
        """The listener of runs: ``bookie`` acknowledged ``count`` entries from
        ``first_entry_id`` (all EOK)."""
        done = self._adds.ack_run(bookie, first_entry_id, count)
        if done:
            self._completed(done)

    def _bookie_failed(self, bookie: str) -> None:
        self._apply(self._adds.bookie_failed(bookie))

    def _refused(self, error: BKeeperError) -> None:
        """A bookie refused this client's credentials: the writer fails with why."""
        self._apply(self._adds.fail(error))

    def _watch_callback(self, add: PendingAdd, callback: AddCallback) -> asyncio.Future[None]:
        """A future that completes once ``add``'s callback was called (for close)."""
        called: asyncio.Future[None] = self._loop.create_future()

        def then(entry_id: int, error: BaseException | None) -> None:
            try:
                callback(entry_id, error)
            finally:
                if not called.done():
                    called.set_result(None)

        add.future = then
        return called

    def _call_back(self, callback: AddCallback, entry_id: int, error: BaseException | None) -> None:
        try:
            callback(entry_id, error)
        except Exception:  # the application's: the pipeline goes on (docstring)
            log.exception("ledger %d: the callback of entry %d raised", self.ledger_id, entry_id)

    def _completed(self, done: list[PendingAdd] | tuple[PendingAdd, ...]) -> None:
        future_type = asyncio.Future
        for add in done:
            waiter = add.future
            if waiter is None:
                continue
            if isinstance(waiter, future_type):
                if not waiter.done():
                    waiter.set_result(add.entry_id)
            else:
                self._call_back(waiter, add.entry_id, None)
        metrics = self._ctx.metrics
        if metrics is not None and done:
            metrics.adds_completed(len(done), done[0].sent_at)
        if self._slots.waiters:
            self._slots.release(self._adds.pending_max - len(self._adds))
        if self._went_idle is not None and not len(self._adds):
            self._went_idle.set()

    def _apply(self, effects: Effects) -> None:
        if not self._ticking and self._adds.needs_ticks:  # a change began on an idle writer
            self._start_ticking()
        if effects is NOTHING:
            return
        if effects.error is not None:
            if self._ctx.metrics is not None:
                failed = len(effects.fail)
                self._ctx.metrics.add.requests.value += failed
                self._ctx.metrics.add.errors.value += failed
            for add in effects.fail:
                waiter = add.future
                if isinstance(waiter, asyncio.Future):
                    if not waiter.done():
                        waiter.set_exception(effects.error)
                elif waiter is not None:
                    self._call_back(waiter, add.entry_id, effects.error)
            self._slots.release_all()  # each waiter raises the error itself
        if effects.send:
            self._send_staged()  # before a re-send, so that nothing goes out twice
        for add, positions in effects.send:
            self._lane.send(add.entry_id, add.data, positions)
        if effects.complete:
            self._completed(effects.complete)
        for bookie, entry_id in effects.timed_out:
            log.warning(
                "ledger %d: bookie %s did not acknowledge entry %d in time",
                *(self.ledger_id, bookie, entry_id),
            )
        if effects.went_down or effects.healed or effects.back:
            log_degraded(self._ctx, self.ledger_id, effects, self.metadata.ack_quorum)
        if effects.healed and not self._tasks.closed:
            self._tasks.spawn(
                mark_gap(self._ctx, self.ledger_id, effects.healed), "mark degraded gap"
            )
        if self._tasks.closed:
            return
        if effects.change_ensemble:
            self._tasks.spawn(self._change_ensemble(), "ensemble change")
        if effects.find_replacement:
            self._tasks.spawn(self._search_replacements(), "search for replacements")

    # -- ensemble changes ----------------------------------------------------------------
    async def _change_ensemble(self) -> None:
        chosen, self._chosen = self._chosen, None
        try:
            await change_ensemble(self._ctx, self._adds, self._versioned, self._new_segment, chosen)
        except NotEnoughBookiesError as exc:  # degraded (rule 5), or the writer fails
            self._apply(self._adds.no_replacement(exc, self._ctx.clock.monotonic()))
            if self._adds.error is not None:
                log.warning(
                    "ledger %d: ensemble change failed: %s", self.ledger_id, self._adds.error
                )
            return
        except Exception as exc:  # the writer fails with it; a bug shows its traceback
            unexpected = not isinstance(exc, BKeeperError)
            log.warning(
                "ledger %d: ensemble change failed: %s", self.ledger_id, exc, exc_info=unexpected
            )
            self._apply(self._adds.fail(exc))
            return
        self._apply(self._adds.change_done())

    async def _search_replacements(self) -> None:
        """Degraded: look for bookies to replace those down, while entries go on
        completing; change the ensemble if found."""
        wanted = self._adds.replacement_wanted()
        back = await answering_again(self._ctx, wanted.failed)
        if back:
            self._apply(self._adds.taken_back(back, self._monotonic()))
            return
        write_quorum = self.metadata.write_quorum
        try:
            found: tuple[str, ...] | None = await replacement_ensemble(
                self._ctx, self._adds.ensemble, wanted, write_quorum
            )
        except BKeeperError as exc:  # none yet, or the metadata store away: next time
            failed = ", ".join(sorted(wanted.failed))
            log.debug("ledger %d: no replacement for %s yet: %s", self.ledger_id, failed, exc)
            found = None
        effects = self._adds.replacement_search_done(found is not None, self._monotonic())
        if effects.change_ensemble:
            self._chosen = found
        self._apply(effects)

    def _new_segment(self, versioned: Versioned[LedgerMetadata], changed: list[int]) -> None:
        self._send_staged()  # to the old ensemble, as if sent before: re-sent below
        self._versioned = versioned
        self._lane.detach(changed)
        ensemble = tuple(versioned.value.last_ensemble)
        self._apply(self._adds.replaced(ensemble, self._ctx.clock.monotonic()))

    # -- background ----------------------------------------------------------------------
    async def _watch_deleted(self) -> None:
        """Fail the writer once its ledger's metadata node is deleted (module doc)."""
        try:
            updates = self._ctx.ledgers.watch(self.ledger_id)
            async with contextlib.aclosing(updates):
                async for current in updates:
                    if current is None:
                        break
                else:
                    return  # the metadata store closed
        except BKeeperError as exc:
            log.warning(
                "ledger %d: cannot watch its metadata (%s): a deletion is found at its next "
                "metadata write instead",
                *(self.ledger_id, exc),
            )
            return
        error = LedgerDeletedError(
            f"ledger {self.ledger_id} was deleted while this writer had it open: "
            f"adds not acknowledged by then fail (last acknowledged: {self.last_add_confirmed})"
        )
        log.debug("%s", error)  # the appenders get it
        self._apply(self._adds.fail(error))

    async def _check_timeouts(self) -> None:
        """Tick the pipeline every ``timeout_check_interval_ms`` while it needs ticks; an idle
        writer waits for its next append instead (no wake-ups for an open ledger nobody
        writes to)."""
        interval = self._config.timeout_check_interval_ms / 1000.0
        adds, monotonic = self._adds, self._ctx.clock.monotonic
        while True:
            if not adds.needs_ticks:
                self._ticking = False
                self._tick_wanted.clear()
                await self._tick_wanted.wait()
                adds.resume_ticks(monotonic())
            await asyncio.sleep(interval)
            self._apply(adds.tick(monotonic()))

    def _start_ticking(self) -> None:
        """An append to an idle writer: its timeout checks start again."""
        self._ticking = True
        self._tick_wanted.set()
