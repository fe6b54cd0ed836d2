"""The engine's shared in-memory state and the state transitions of ledgers.

One :class:`EngineState` is shared by the caller's thread (adds, reads), the journal replay,
the flusher and checkpoints. Everything in it is read and written under ``lock``; critical
sections are a few dict operations long. The ``*_locked`` methods expect the lock held.

The transitions here are used by both the live path (after the journal record is queued)
and journal replay, so that a replayed journal rebuilds exactly the state the live calls
built:

* ``create``: a ledger appears with the first master key seen (add, fence or explicit LAC);
* ``add``: an entry enters the write cache; ``last_entry_id`` and ``lac`` only grow;
* ``fence``: the fenced flag is set, never cleared;
* ``explicit LAC``: the last WRITE_LAC body replaces the previous one;
* ``limbo``: a ledger that may have lost acknowledged entries enters limbo and is fenced
  (no writer may add to it until it is repaired); only a repair takes it out;
* ``delete``: the ledger, its cached entries and its locations are forgotten.

A Python lock is not fair: a thread that releases ``lock`` and takes it again at once keeps
it from a thread already waiting (measured: a loop of 0.2 ms critical sections made a waiter
wait 10 ms at the median and 78 ms at worst). Background threads that take the lock over
and over (the flusher applying locations, compaction swapping the index) call
:func:`let_waiters_in` between critical sections, so the event loop's adds get their turn.

Between checkpoints the engine collects what the next checkpoint must persist: ledgers
whose persisted fields changed (``dirty``), ledgers deleted, and location runs flushed.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from bkeeper.common.threads import OS_THREADS, Event, Threads
from bkeeper.storage.caches import ReadCache, WriteCache
from bkeeper.storage.index_file import LocationRun
from bkeeper.storage.ledger_state import StoredLedger

__all__ = ["EngineState", "PendingCheckpoint", "let_waiters_in"]


def let_waiters_in() -> None:
    """Between two critical sections of a loop (lock not held): give threads waiting for
    the engine lock the turn (releases the GIL and yields the CPU)."""
    time.sleep(0)


@dataclass
class PendingCheckpoint:
    """Changes not yet in the index file."""

    #: ordered (a dict, not a set): written in the order they changed, the same every run
    dirty: dict[StoredLedger, None] = field(default_factory=dict)
    deleted: list[int] = field(default_factory=list)
    runs: list[tuple[StoredLedger, LocationRun]] = field(default_factory=list)


class EngineState:
    """Ledgers, caches and pending checkpoint changes, behind one lock."""

    def __init__(
        self,
        ledgers: dict[int, StoredLedger],
        write_cache_bytes_max: int,
        read_cache_bytes_max: int,
        limbo: bool,
        flush_bytes: int | None = None,
        threads: Threads | None = None,
    ) -> None:
        self.lock = threading.Lock()
        self.ledgers = ledgers
        self.write_cache = WriteCache(write_cache_bytes_max, flush_bytes)
        self.read_cache = ReadCache(read_cache_bytes_max)
        self.pending = PendingCheckpoint()
        self.limbo = limbo
        #: Set when the flusher's thread should flush (made by ``threads``, the engine's).
        self.flush_wanted: Event = (threads if threads is not None else OS_THREADS).event()

    # -- transitions (lock held) -------------------------------------------------------
    def create_locked(self, ledger_id: int, master_key: bytes) -> StoredLedger:
        assert ledger_id not in self.ledgers
        state = self.ledgers[ledger_id] = StoredLedger(ledger_id, master_key)
        self.pending.dirty[state] = None
        return state

    def add_locked(self, state: StoredLedger, entry_id: int, lac: int, body: bytes) -> None:
        cache = self.write_cache
        entries = cache.active.get(state.ledger_id)
        if entries is None:
            entries = cache.active[state.ledger_id] = {}
        entries[entry_id] = body
        cache.active_bytes += len(body)
        if entry_id > state.last_entry_id:  # noqa: PLR1730 (hot path: no call)
            state.last_entry_id = entry_id
        if lac > state.lac:
            state.lac = lac
            self.mark_dirty_locked(state)
        if cache.active_bytes >= cache.flush_bytes and not self.flush_wanted.is_set():
            self.flush_wanted.set()

    def fence_locked(self, state: StoredLedger) -> None:
        if not state.fenced:
            state.fenced = True
            self.mark_dirty_locked(state)

    def set_limbo_locked(self, state: StoredLedger, limbo: bool) -> None:
        if limbo:
            self.fence_locked(state)
        if state.limbo != limbo:
            state.limbo = limbo
            self.mark_dirty_locked(state)

    def set_explicit_lac_locked(self, state: StoredLedger, lac_body: bytes) -> None:
        state.explicit_lac = lac_body
        self.mark_dirty_locked(state)

    def delete_locked(self, ledger_id: int) -> None:
        state = self.ledgers.pop(ledger_id, None)
        if state is None:
            return
        state.deleted = True
        self.write_cache.drop_ledger(ledger_id)
        self.read_cache.drop_ledger(ledger_id)
        self.pending.dirty.pop(state, None)
        self.pending.deleted.append(ledger_id)

    def mark_dirty_locked(self, state: StoredLedger) -> None:
        if not state.dirty:
            state.dirty = True
            self.pending.dirty[state] = None

    # -- lookups (lock held) -----------------------------------------------------------
    def find_locked(self, state: StoredLedger, entry_id: int) -> bytes | int | None:
        """The body if cached, else its entry-log location, else None."""
        body = self.write_cache.get(state.ledger_id, entry_id)
        if body is None:
            body = self.read_cache.get(state.ledger_id, entry_id)
        if body is not None:
            return body
        location = state.locations.get(entry_id)
        return location if location else None

    def entry_ids_locked(self, state: StoredLedger) -> list[int]:
        """The entries present: cached or stored, a damaged record not counting."""
        ids = self.write_cache.entry_ids(state.ledger_id)
        stored = state.locations.entry_ids()
        if state.damaged:
            stored = [entry_id for entry_id in stored if entry_id not in state.damaged]
        ids.update(stored)
        return sorted(ids)

    # -- checkpoint bookkeeping (lock held) ---------------------------------------------
    def take_pending_locked(self) -> PendingCheckpoint:
        pending, self.pending = self.pending, PendingCheckpoint()
        for state in pending.dirty:
            state.dirty = False
        return pending

    def restore_pending_locked(self, pending: PendingCheckpoint) -> None:
        """Put back what a failed checkpoint took, ahead of what came since."""
        self.pending.deleted[:0] = pending.deleted
        self.pending.runs[:0] = pending.runs
        for state in pending.dirty:
            if not state.deleted:
                self.mark_dirty_locked(state)
