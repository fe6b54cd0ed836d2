"""The read path of :class:`~bkeeper.storage.Storage` (its base :class:`StorageReads`):
entries from the write cache, the read cache or an entry log, damaged entry-log records, and
what the engine tells of its ledgers (present, fenced, LAC, in limbo).

A read whose entry log was cut down or removed by compaction after its lookup (the index then
points at the copy) looks up again. An entry whose entry-log record fails its checksum (a
read found it, or :meth:`StorageReads.check_entries`, the scrub's step:
:mod:`bkeeper.storage.scrub`) is *damaged*: its ledger goes into limbo (and is fenced), and
the entry answers "unknown" (``DataUnknownError``, never a bad body, never "absent") and is
left out of ``list_entries`` until it is added again (the data integrity check copies it back
from the other replicas). Which entries are damaged is kept in memory only; the limbo is
persisted, and the integrity check reads a ledger in limbo back before it repairs it, so a
restart in between finds the damage again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from bkeeper.common.errors import (
    BKeeperError,
    CorruptRecordError,
    DataUnknownError,
    NoSuchEntryError,
    NoSuchLedgerError,
)
from bkeeper.storage.engine import EngineState
from bkeeper.storage.entry_log import EntryLogReader
from bkeeper.storage.journal_format import RecordKind, ledger_record
from bkeeper.storage.journal_set import JournalSet
from bkeeper.storage.ledger_state import StoredLedger

__all__ = ["StorageReads"]

log = logging.getLogger(__name__)

#: A read whose entry log was cut down or removed by compaction after its lookup (the index
#: then points at the copy) looks up again, at most this many times in all.
_READ_ATTEMPTS = 3
#: Entries :meth:`StorageReads.check_entries` reads at once.
_CHECK_CHUNK_ENTRIES = 256
#: ``read_entries`` reads bodies from entry logs this many entries at a time.
_READ_CHUNK_ENTRIES = 256


class StorageReads:
    """The read path (module doc); :class:`~bkeeper.storage.Storage` sets the state."""

    _engine: EngineState
    _reader: EntryLogReader
    _journal: JournalSet

    def read_entry(self, ledger_id: int, entry_id: int) -> bytes:
        """The entry body; ``entry_id`` -1 means the last entry. May read an entry log.

        Raises NoSuchLedgerError / NoSuchEntryError, or DataUnknownError in limbo.
        """
        for attempt in range(_READ_ATTEMPTS):
            found, resolved = self._find(ledger_id, entry_id)
            if isinstance(found, bytes):
                return found
            try:
                return self._reader.read(found)
            except (FileNotFoundError, CorruptRecordError) as exc:
                again, _ = self._find(ledger_id, resolved)
                if again != found and attempt + 1 < _READ_ATTEMPTS:
                    continue  # moved meanwhile (compaction): read it where it is now
                if isinstance(exc, CorruptRecordError):
                    raise self._damaged(ledger_id, resolved, found, exc) from exc
                raise
        raise AssertionError("unreachable")

    def _damaged(
        self, ledger_id: int, entry_id: int, location: int, error: CorruptRecordError
    ) -> DataUnknownError:
        """Mark ``entry_id`` damaged (module doc) if ``location`` still holds it; the
        answer for its reader."""
        with self._engine.lock:
            state = self._engine.ledgers.get(ledger_id)
            if state is not None and state.locations.get(entry_id) == location:
                if entry_id not in state.damaged:
                    log.error(
                        "ledger %d entry %d: damaged on this bookie (%s); in limbo until it is "
                        "copied back from another replica",
                        ledger_id, entry_id, error,
                    )  # fmt: skip
                state.damaged.add(entry_id)
                self._journal.for_ledger(ledger_id).append_locked(
                    ledger_record(RecordKind.FENCE, ledger_id), b"", None
                )
                self._engine.set_limbo_locked(state, True)
        return DataUnknownError(f"ledger {ledger_id} entry {entry_id}: damaged on this bookie")

    def check_entries(
        self, ledger_id: int, after_chunk: Callable[[int], bool] | None = None
    ) -> tuple[list[int], int]:
        """Read every entry of the ledger stored in entry logs and check it against its
        checksum, marking the damaged (module doc): their ids, and the bytes read.

        ``after_chunk(bytes_read)`` is called after each run of ``_CHECK_CHUNK_ENTRIES``
        entries with the bytes read so far (the scrub paces itself there); when it returns
        False the check ends there, so a stop never waits for a whole ledger (a ledger of
        gigabytes took seconds to read, and a bookie's SIGTERM waited for it)."""
        with self._engine.lock:  # a C-level copy under the lock; the list outside it
            state = self._engine.ledgers.get(ledger_id)
            locations = None if state is None else state.locations.copy()
        stored = [] if locations is None else list(locations.items())
        damaged: list[int] = []
        read = 0
        for at in range(0, len(stored), _CHECK_CHUNK_ENTRIES):
            chunk = stored[at : at + _CHECK_CHUNK_ENTRIES]
            try:
                read += sum(map(len, self._reader.read_many([loc for _, loc in chunk])))
            except (FileNotFoundError, CorruptRecordError):
                read += self._check_one_by_one(ledger_id, state, chunk, damaged)
            if after_chunk is not None and not after_chunk(read):
                break
        return damaged, read

    def _check_one_by_one(
        self,
        ledger_id: int,
        state: StoredLedger | None,
        chunk: list[tuple[int, int]],
        damaged: list[int],
    ) -> int:
        """Which entry of a chunk is damaged, and is it still there (compaction moves
        records)? The bytes read."""
        read = 0
        for entry_id, _location in chunk:
            try:
                read += len(self.read_entry(ledger_id, entry_id))
            except DataUnknownError:
                with self._engine.lock:
                    if state is not None and entry_id in state.damaged:
                        damaged.append(entry_id)
            except (NoSuchEntryError, NoSuchLedgerError, FileNotFoundError):
                pass  # deleted meanwhile
        return read

    def read_entry_nowait(self, ledger_id: int, entry_id: int) -> bytes | None:
        """As :meth:`read_entry` from memory only: None when the body is on disk."""
        found, _ = self._find(ledger_id, entry_id)
        return found if isinstance(found, bytes) else None

    def read_entries(
        self, ledger_id: int, start_entry_id: int, max_count: int, max_bytes: int
    ) -> list[bytes]:
        """Consecutive entries from ``start_entry_id``: see :meth:`_read_entries`; a read that
        raced compaction removing the log it looked in looks again."""
        for attempt in range(_READ_ATTEMPTS):
            try:
                return self._read_entries(ledger_id, start_entry_id, max_count, max_bytes)
            except (FileNotFoundError, CorruptRecordError):
                if attempt + 1 == _READ_ATTEMPTS:
                    break
        # One at a time: the entries before a damaged one (which is marked), or its error.
        bodies = [self.read_entry(ledger_id, start_entry_id)]
        total = len(bodies[0])
        for entry_id in range(start_entry_id + 1, start_entry_id + max(1, max_count)):
            if start_entry_id == -1:
                break
            try:
                body = self.read_entry(ledger_id, entry_id)
            except (BKeeperError, FileNotFoundError):
                break
            total += len(body)
            if total > max_bytes:
                break
            bodies.append(body)
        return bodies

    def _read_entries(
        self, ledger_id: int, start_entry_id: int, max_count: int, max_bytes: int
    ) -> list[bytes]:
        """Consecutive entries from ``start_entry_id``: at least one, then up to
        ``max_count`` entries and ``max_bytes`` bytes, stopping at the first missing one.

        Raises as :meth:`read_entry` for the first entry (``-1`` means the last entry, and
        then it is the only one). Takes the lock once for the whole range; bodies in entry
        logs are read afterwards, outside it, nearby records with one read per run.
        """
        engine = self._engine
        with engine.lock:
            state = self._state_locked(ledger_id)
            if start_entry_id == -1:
                start_entry_id, max_count = self._last_entry_id_locked(state), 1
            found = self._find_run_locked(state, start_entry_id, max_count)
            if not found:
                error = NoSuchEntryError(f"ledger {ledger_id}: no entry {start_entry_id}")
                raise self._absent(error, state)
        bodies: list[bytes] = []
        total = 0
        for at in range(0, len(found), _READ_CHUNK_ENTRIES):  # bounds what is read past max_bytes
            chunk = found[at : at + _READ_CHUNK_ENTRIES]
            on_disk = [item for item in chunk if not isinstance(item, bytes)]
            read = iter(self._reader.read_many(on_disk) if on_disk else ())
            for item in chunk:
                body = item if isinstance(item, bytes) else next(read)
                total += len(body)
                if total > max_bytes and bodies:
                    return bodies
                bodies.append(body)
        return bodies

    def _find_run_locked(
        self, state: StoredLedger, start_entry_id: int, max_count: int
    ) -> list[bytes | int]:
        """Bodies (cached) or entry-log locations of consecutive entries from
        ``start_entry_id``, up to the first missing one or ``max_count`` entries (the
        caller applies the byte limit)."""
        if start_entry_id < 0:
            return []
        # As EngineState.find_locked for each entry, with the ledger's maps looked up once.
        engine = self._engine
        ledger_id = state.ledger_id
        cache = engine.write_cache
        active = cache.active.get(ledger_id) or {}
        flushing_run = cache.flushing.get(ledger_id)
        flushing = flushing_run[1] if flushing_run is not None else {}
        cached = engine.read_cache.entries_of(ledger_id)
        found: list[bytes | int] = []
        damaged = state.damaged
        if not (active or flushing or cached or damaged):  # all in entry logs: one slice
            run = state.locations.run(start_entry_id, max(1, max_count))
            if run is not None:
                found.extend(run)
                return found
        location_of = state.locations.get
        add = found.append
        for entry_id in range(start_entry_id, start_entry_id + max(1, max_count)):
            body = active.get(entry_id) or flushing.get(entry_id) or cached.get(entry_id)
            if body is not None:
                add(body)
                continue
            location = location_of(entry_id)
            if not location or entry_id in damaged:
                break
            add(location)
        return found

    # -- ledgers --------------------------------------------------------------------------
    def require_ledger(self, ledger_id: int) -> None:
        """Raise NoSuchLedgerError (DataUnknownError in limbo) unless the ledger exists."""
        with self._engine.lock:
            self._state_locked(ledger_id)

    def list_entries(self, ledger_id: int) -> list[int]:
        """Ids of the entries present, ascending."""
        with self._engine.lock:
            return self._engine.entry_ids_locked(self._state_locked(ledger_id))

    def last_entry_id(self, ledger_id: int) -> int:
        """The highest entry id present (-1 if none); NoSuchLedgerError if unknown."""
        with self._engine.lock:
            return self._state_locked(ledger_id).last_entry_id

    def last_add_confirmed(self, ledger_id: int) -> int:
        """The higher of the LACs carried by entries and the explicit LAC; -1 if unknown."""
        state = self._engine.ledgers.get(ledger_id)
        if state is None:
            return -1
        return max(state.lac, state.explicit_lac_value())

    def explicit_lac(self, ledger_id: int) -> bytes | None:
        """The last WRITE_LAC body kept for the ledger, or None."""
        state = self._engine.ledgers.get(ledger_id)
        return state.explicit_lac if state is not None else None

    def is_fenced(self, ledger_id: int) -> bool:
        state = self._engine.ledgers.get(ledger_id)
        return state is not None and state.fenced

    def ledger_exists(self, ledger_id: int) -> bool:
        return ledger_id in self._engine.ledgers

    def ledger_ids(self) -> list[int]:
        with self._engine.lock:
            return sorted(self._engine.ledgers)

    # -- limbo -------------------------------------------------------------------------
    @property
    def limbo(self) -> bool:
        """True while the whole engine is in limbo (see the module docstring)."""
        return self._engine.limbo

    def limbo_ledgers(self) -> list[int]:
        """The ledgers in limbo, ascending (not counting a limbo of the whole engine)."""
        with self._engine.lock:
            return sorted(i for i, state in self._engine.ledgers.items() if state.limbo)

    def in_limbo(self, ledger_id: int) -> bool:
        """Whether missing entries of the ledger are unknown rather than absent."""
        state = self._engine.ledgers.get(ledger_id)
        return self._engine.limbo or (state is not None and state.limbo)

    # -- lookups (lock held) --------------------------------------------------------------
    def _find(self, ledger_id: int, entry_id: int) -> tuple[bytes | int, int]:
        engine = self._engine
        with engine.lock:
            state = self._state_locked(ledger_id)
            if entry_id == -1:
                entry_id = self._last_entry_id_locked(state)
            found = engine.find_locked(state, entry_id) if entry_id >= 0 else None
            if type(found) is int and entry_id in state.damaged:
                raise DataUnknownError(
                    f"ledger {ledger_id} entry {entry_id}: damaged on this bookie, not yet repaired"
                )
            if found is None:
                error = NoSuchEntryError(f"ledger {ledger_id}: no entry {entry_id}")
                raise self._absent(error, state)
        return found, entry_id

    def _state_locked(self, ledger_id: int) -> StoredLedger:
        state = self._engine.ledgers.get(ledger_id)
        if state is None:
            raise self._absent(NoSuchLedgerError(f"no ledger {ledger_id}"), None)
        return state

    def _last_entry_id_locked(self, state: StoredLedger) -> int:
        if state.limbo or self._engine.limbo:
            raise DataUnknownError(
                f"ledger {state.ledger_id} is in limbo: its last entry is unknown until repaired"
            )
        return state.last_entry_id

    def _absent(self, error: Exception, state: StoredLedger | None) -> Exception:
        if state is not None and state.limbo:
            return DataUnknownError(f"{error} (ledger in limbo: entries may have been lost)")
        if self._engine.limbo:
            return DataUnknownError(f"{error} (storage in limbo: data may have been lost)")
        return error
