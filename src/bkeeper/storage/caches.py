"""The write cache (entries not yet in an entry log) and the read cache (recently flushed).

Neither class locks: both are used under the storage lock.

Write cache: adds go to the *active* map; a flush swaps it out as the *flushing* map, writes
that to an entry log and then drops it. Together they hold at most ``bytes_max``; a flush is
wanted once the active map holds ``flush_bytes`` (by default half of ``bytes_max``; the
engine passes ``StorageConfig.flush_bytes``, 1 MiB).

Read cache: entries just flushed, so that tailing readers are served from memory. FIFO
eviction, at most ``bytes_max`` bytes of bodies. Entries come in runs (a ledger's entries of
one flush, :meth:`ReadCache.put_run`) and leave a run at a time, oldest first: no object per
entry.
"""

from __future__ import annotations

from collections import deque

from bkeeper.storage.ledger_state import StoredLedger

__all__ = ["FlushBatch", "ReadCache", "WriteCache"]

_NONE: dict[int, bytes] = {}
#: What a flush writes: ledger id -> (its state when the flush started, entry id -> body).
FlushBatch = dict[int, tuple[StoredLedger, dict[int, bytes]]]


class WriteCache:
    """Entries added but not yet written to an entry log."""

    __slots__ = (
        "active",
        "active_bytes",
        "bytes_max",
        "flush_bytes",
        "flushing",
        "flushing_bytes",
        "taken_bytes",
    )

    def __init__(self, bytes_max: int, flush_bytes: int | None = None) -> None:
        self.bytes_max = bytes_max
        self.flush_bytes = bytes_max // 2 if flush_bytes is None else flush_bytes
        self.active: dict[int, dict[int, bytes]] = {}
        self.active_bytes = 0
        self.flushing: FlushBatch = {}
        self.flushing_bytes = 0
        #: Bytes that left the active map (swapped out to flush, or dropped): with
        #: ``active_bytes``, every byte ever added (a metric), kept per flush, not per add.
        self.taken_bytes = 0

    def wants_flush(self) -> bool:
        return self.active_bytes >= self.flush_bytes

    def get(self, ledger_id: int, entry_id: int) -> bytes | None:
        entries = self.active.get(ledger_id)
        if entries is not None:
            body = entries.get(entry_id)
            if body is not None:
                return body
        flushing = self.flushing.get(ledger_id)
        return flushing[1].get(entry_id) if flushing is not None else None

    def entry_ids(self, ledger_id: int) -> set[int]:
        ids = set(self.active.get(ledger_id, ()))
        flushing = self.flushing.get(ledger_id)
        if flushing is not None:
            ids.update(flushing[1])
        return ids

    def swap(self, ledgers: dict[int, StoredLedger]) -> FlushBatch:
        """Start a flush: the active map becomes the flushing one (which must be empty)."""
        assert not self.flushing, "a flush is already in progress"
        self.flushing = {lid: (ledgers[lid], entries) for lid, entries in self.active.items()}
        self.flushing_bytes = self.active_bytes
        self.taken_bytes += self.active_bytes
        self.active = {}
        self.active_bytes = 0
        return self.flushing

    def finish_flush(self) -> None:
        self.flushing = {}
        self.flushing_bytes = 0

    def drop_ledger(self, ledger_id: int) -> None:
        entries = self.active.pop(ledger_id, None)
        if entries is not None:
            dropped = sum(len(body) for body in entries.values())
            self.active_bytes -= dropped
            self.taken_bytes += dropped
        # The flusher works from its own copy of the batch; the deleted state tells it not to
        # index these entries. Their bytes are released when the flush finishes.
        self.flushing.pop(ledger_id, None)


class ReadCache:
    """Recently flushed entries, FIFO, bounded by bytes."""

    __slots__ = ("_bytes", "_bytes_max", "_count", "_ledgers", "_order")

    def __init__(self, bytes_max: int) -> None:
        self._bytes_max = bytes_max
        self._bytes = 0
        self._count = 0
        self._ledgers: dict[int, dict[int, bytes]] = {}
        #: Runs in the order they came: (ledger id, entry ids).
        self._order: deque[tuple[int, list[int]]] = deque()

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def put(self, ledger_id: int, entry_id: int, body: bytes) -> None:
        if len(body) > self._bytes_max:
            return
        entries = self._ledgers.setdefault(ledger_id, {})
        old = entries.get(entry_id)
        if old is not None:
            self._bytes -= len(old)
            self._count -= 1
        entries[entry_id] = body
        self._count += 1
        self._bytes += len(body)
        self._order.append((ledger_id, [entry_id]))
        while self._bytes > self._bytes_max:
            self._evict_one()

    def put_run(self, ledger_id: int, entry_ids: list[int], bodies: list[bytes]) -> None:
        """:meth:`put` for each entry of one ledger, as one run."""
        size = sum(map(len, bodies))
        if size > self._bytes_max:
            return
        entries = self._ledgers.get(ledger_id)
        if entries is None:
            entries = self._ledgers[ledger_id] = {}
        elif not entries.keys().isdisjoint(entry_ids):  # some cached already: replace them
            for entry_id in entry_ids:
                old = entries.pop(entry_id, None)
                if old is not None:
                    self._bytes -= len(old)
                    self._count -= 1
        entries.update(zip(entry_ids, bodies, strict=True))
        self._count += len(entry_ids)
        self._bytes += size
        self._order.append((ledger_id, entry_ids))
        while self._bytes > self._bytes_max:
            self._evict_one()

    def get(self, ledger_id: int, entry_id: int) -> bytes | None:
        entries = self._ledgers.get(ledger_id)
        return entries.get(entry_id) if entries is not None else None

    def entries_of(self, ledger_id: int) -> dict[int, bytes]:
        """The cached entries of the ledger (read only; empty if none)."""
        return self._ledgers.get(ledger_id) or _NONE

    def drop_ledger(self, ledger_id: int) -> None:
        entries = self._ledgers.pop(ledger_id, None)
        if entries is None:
            return
        self._bytes -= sum(len(body) for body in entries.values())
        self._count -= len(entries)
        live = self._ledgers  # keep the FIFO free of the dropped ledger's runs
        self._order = deque(run for run in self._order if run[0] in live)

    def _evict_one(self) -> None:
        """Evict the oldest run."""
        ledger_id, entry_ids = self._order.popleft()
        entries = self._ledgers.get(ledger_id)
        if entries is None:
            return
        pop = entries.pop
        for entry_id in entry_ids:
            body = pop(entry_id, None)
            if body is not None:
                self._bytes -= len(body)
                self._count -= 1
        if not entries:
            del self._ledgers[ledger_id]
