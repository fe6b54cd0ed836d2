"""What the engine knows about one ledger, in memory: keys, flags and entry locations.

Invariants (asserted where they are set):

* ``master_key`` is the first key seen for the ledger and never changes;
* ``fenced`` only goes from False to True;
* ``limbo``: the ledger may have lost acknowledged entries, so missing entries are "unknown",
  never "absent", until it is repaired; a ledger in limbo is also fenced;
* ``last_entry_id`` is the highest entry id present (write cache, read cache or entry logs),
  -1 when there is none; ``lac`` is the highest LAC carried by any entry body;
* a location of 0 means "absent" (offset 0 of a log is its header, never a record);
* ``damaged``: entries whose entry-log record failed its checksum (found by a read or a
  scrub; in memory only): each is "unknown" until added again, and the ledger is in limbo.
"""

from __future__ import annotations

import heapq
import struct
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

__all__ = [
    "DENSE_SLACK_SLOTS",
    "DENSE_SLOTS_PER_ENTRY_MAX",
    "LedgerLocations",
    "LedgerSnapshot",
    "StoredLedger",
]

#: Locations live in a dense ``array('Q')`` (8 bytes a slot) indexed by entry id minus the
#: first id seen, which serves the usual ledger (ids dense from 0, or striped: every few ids)
#: at 8 to 8 x E/Qw bytes an entry. The array may hold empty slots, but never more than this
#: many slots per entry it holds (plus ``DENSE_SLACK_SLOTS``): an id that would stretch it
#: further (far ahead, behind the first id) goes to a dict instead, so that memory stays
#: proportional to the entries stored whatever their ids (a dense array would take 8 MiB
#: for one id of 2^20).
DENSE_SLOTS_PER_ENTRY_MAX = 8
DENSE_SLACK_SLOTS = 64

_LAC = struct.Struct(">q")


_ZERO_SLOT = bytes(8)


def _all_present(locations: Sequence[int]) -> bool:
    """Whether no location is 0; for an ``array('Q')`` (a run of the index file: millions at
    open) a search of its bytes for an aligned zero slot, instead of a Python-level loop."""
    if not isinstance(locations, array):
        return all(locations)
    raw = locations.tobytes()
    at = raw.find(_ZERO_SLOT)
    while at != -1:
        if at % 8 == 0:
            return False
        at = raw.find(_ZERO_SLOT, at + 1)
    return True


class LedgerLocations:
    """Entry id -> location of the flushed entries of one ledger.

    Invariants: ``len(_dense) <= DENSE_SLOTS_PER_ENTRY_MAX * _dense_count + DENSE_SLACK_SLOTS``
    (the count of non-zero slots only grows); an id is either in a non-zero dense slot or in
    ``_sparse``, never both; ``max_entry_id`` is the highest id set (-1 when none).
    """

    __slots__ = ("_base", "_dense", "_dense_count", "_sparse", "max_entry_id")

    def __init__(self) -> None:
        self._base = 0
        self._dense: array[int] = array("Q")
        self._dense_count = 0
        self._sparse: dict[int, int] = {}
        self.max_entry_id = -1

    def __len__(self) -> int:
        """The number of entries with a location."""
        return self._dense_count + len(self._sparse)

    def set(self, entry_id: int, location: int) -> None:
        assert location > 0 and entry_id >= 0
        if entry_id > self.max_entry_id:  # noqa: PLR1730 (per flushed entry: no call)
            self.max_entry_id = entry_id
        dense = self._dense
        size = len(dense)
        if not size:
            self._base = entry_id
        offset = entry_id - self._base
        if offset == size:  # the usual case: the next id
            dense.append(location)
            self._dense_count += 1
        elif 0 <= offset < size:
            if not dense[offset]:
                self._dense_count += 1
            dense[offset] = location
        elif (
            offset > size
            and offset < DENSE_SLOTS_PER_ENTRY_MAX * (self._dense_count + 1) + DENSE_SLACK_SLOTS
        ):
            dense.frombytes(bytes(8 * (offset - size)))
            dense.append(location)
            self._dense_count += 1
        else:
            self._sparse[entry_id] = location
            return
        if self._sparse:
            self._sparse.pop(entry_id, None)

    def set_many(self, entry_ids: Sequence[int], locations: Sequence[int]) -> None:
        """:meth:`set` for each pair; ids ascending. Ids that continue the dense array
        one after another (a flush of a ledger written in order; a run of the index file
        loaded at open) are appended in one step (``locations`` a list or an ``array('Q')``)."""
        count = len(entry_ids)
        if not count:
            return
        dense = self._dense
        first, last = entry_ids[0], entry_ids[-1]
        if (
            last - first == count - 1
            and (not dense or first - self._base == len(dense))
            and first >= 0
            and _all_present(locations)
        ):
            if not dense:
                self._base = first
            dense.extend(locations)
            self._dense_count += count
            if last > self.max_entry_id:  # noqa: PLR1730
                self.max_entry_id = last
            if self._sparse:
                for entry_id in entry_ids:
                    self._sparse.pop(entry_id, None)
            return
        for entry_id, location in zip(entry_ids, locations, strict=True):
            self.set(entry_id, location)

    def get(self, entry_id: int) -> int:
        """The location of ``entry_id``, 0 when it has none."""
        dense = self._dense
        offset = entry_id - self._base
        if 0 <= offset < len(dense):
            location = dense[offset]
            if location:
                return location
        sparse = self._sparse
        return sparse.get(entry_id, 0) if sparse else 0

    def run(self, start: int, count: int) -> list[int] | None:
        """The locations of up to ``count`` consecutive entries from ``start``, up to the
        first without one, read from the dense array in one step; None when that cannot
        answer (``start`` outside it, or ids in the sparse map): ask :meth:`get` then."""
        offset = start - self._base
        dense = self._dense
        if self._sparse or not 0 <= offset < len(dense):
            return None
        locations = dense[offset : offset + count].tolist()
        if 0 in locations:
            del locations[locations.index(0) :]
        return locations

    def items(self) -> Iterator[tuple[int, int]]:
        """(entry id, location) of every entry with a location, by entry id."""
        base = self._base
        dense = ((base + i, location) for i, location in enumerate(self._dense) if location)
        if not self._sparse:
            return dense
        return heapq.merge(dense, sorted(self._sparse.items()))

    def entry_ids(self) -> list[int]:
        return [entry_id for entry_id, _ in self.items()]

    def copy(self) -> LedgerLocations:
        """An independent copy, made with C-level copies of the array and the dict (a
        checkpoint takes one under the engine lock, then reads it outside)."""
        other = LedgerLocations()
        other._base = self._base
        other._dense = array("Q", self._dense)
        other._dense_count = self._dense_count
        other._sparse = dict(self._sparse)
        other.max_entry_id = self.max_entry_id
        return other


@dataclass(frozen=True, slots=True)
class LedgerSnapshot:
    """The persisted part of a ledger's state (written to the index file at checkpoints)."""

    ledger_id: int
    master_key: bytes
    fenced: bool
    lac: int
    explicit_lac: bytes | None
    limbo: bool = False


class StoredLedger:
    """A ledger as this bookie stores it: master key, fenced flag, LAC, limbo and where its
    entries are. Not :class:`bkeeper.meta.LedgerState` (the ledger's OPEN/IN_RECOVERY/CLOSED
    state in the metadata). Mutated only under the storage lock."""

    __slots__ = (
        "damaged",
        "deleted",
        "dirty",
        "explicit_lac",
        "fenced",
        "lac",
        "last_entry_id",
        "ledger_id",
        "limbo",
        "locations",
        "master_key",
    )

    def __init__(self, ledger_id: int, master_key: bytes) -> None:
        self.ledger_id = ledger_id
        self.master_key = master_key
        self.fenced = False
        self.lac = -1
        self.explicit_lac: bytes | None = None
        self.limbo = False
        self.last_entry_id = -1
        self.locations = LedgerLocations()
        self.deleted = False
        self.dirty = True
        self.damaged: set[int] = set()

    @classmethod
    def restore(cls, snapshot: LedgerSnapshot) -> StoredLedger:
        state = cls(snapshot.ledger_id, snapshot.master_key)
        state.fenced = snapshot.fenced
        state.lac = snapshot.lac
        state.explicit_lac = snapshot.explicit_lac
        state.limbo = snapshot.limbo
        state.dirty = False
        return state

    def snapshot(self) -> LedgerSnapshot:
        return LedgerSnapshot(
            self.ledger_id, self.master_key, self.fenced, self.lac, self.explicit_lac, self.limbo
        )

    def explicit_lac_value(self) -> int:
        """The LAC inside the explicit LAC body (ledgerId | LAC | digest), or -1."""
        body = self.explicit_lac
        if body is None or len(body) < 16:
            return -1
        return int(_LAC.unpack_from(body, 8)[0])
