"""What the engine knows about one ledger, in memory: keys, flags and entry locations.

Invariants (asserted where they are set):

* ``master_key`` is the first key seen for the ledger and never changes;
* ``fenced`` only goes from False to True;
* ``last_entry_id`` is the highest entry id present (write cache, read cache or entry logs),
  -1 when there is none; ``lac`` is the highest LAC carried by any entry body;
* a location of 0 means "absent" (offset 0 of a log is its header, never a record).
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["DENSE_GAP_MAX", "LedgerLocations", "LedgerSnapshot", "LedgerState"]

#: Entry ids are normally dense from 0 (or striped: every E-th), so locations live in an
#: ``array('Q')`` indexed by entry id, 8 bytes per slot. An id more than this far past the end
#: switches the ledger to a dict, so that one huge id cannot allocate a huge array.
DENSE_GAP_MAX = 1 << 20

_LAC = struct.Struct(">q")


class LedgerLocations:
    """Entry id -> location of the flushed entries of one ledger."""

    __slots__ = ("_dense", "_sparse", "max_entry_id")

    def __init__(self) -> None:
        self._dense: array[int] = array("Q")
        self._sparse: dict[int, int] | None = None
        self.max_entry_id = -1

    def set(self, entry_id: int, location: int) -> None:
        assert location > 0 and entry_id >= 0
        self.max_entry_id = max(self.max_entry_id, entry_id)
        if self._sparse is not None:
            self._sparse[entry_id] = location
            return
        dense = self._dense
        if entry_id < len(dense):
            dense[entry_id] = location
        elif entry_id - len(dense) <= DENSE_GAP_MAX:
            gap = entry_id - len(dense)
            if gap:
                dense.frombytes(bytes(8 * gap))
            dense.append(location)
        else:
            self._sparse = dict(self.items())
            self._sparse[entry_id] = location
            self._dense = array("Q")

    def get(self, entry_id: int) -> int:
        if self._sparse is not None:
            return self._sparse.get(entry_id, 0)
        dense = self._dense
        return dense[entry_id] if 0 <= entry_id < len(dense) else 0

    def items(self) -> Iterator[tuple[int, int]]:
        """(entry id, location) of every present entry, by entry id."""
        if self._sparse is not None:
            yield from sorted(self._sparse.items())
            return
        for entry_id, location in enumerate(self._dense):
            if location:
                yield entry_id, location

    def entry_ids(self) -> list[int]:
        return [entry_id for entry_id, _ in self.items()]


@dataclass(frozen=True, slots=True)
class LedgerSnapshot:
    """The persisted part of a ledger's state (written to the index file at checkpoints)."""

    ledger_id: int
    master_key: bytes
    fenced: bool
    lac: int
    explicit_lac: bytes | None


class LedgerState:
    """A ledger's state. Mutated only under the storage lock."""

    __slots__ = (
        "deleted",
        "dirty",
        "explicit_lac",
        "fenced",
        "lac",
        "last_entry_id",
        "ledger_id",
        "locations",
        "master_key",
    )

    def __init__(self, ledger_id: int, master_key: bytes) -> None:
        self.ledger_id = ledger_id
        self.master_key = master_key
        self.fenced = False
        self.lac = -1
        self.explicit_lac: bytes | None = None
        self.last_entry_id = -1
        self.locations = LedgerLocations()
        self.deleted = False
        self.dirty = True

    @classmethod
    def restore(cls, snapshot: LedgerSnapshot) -> LedgerState:
        state = cls(snapshot.ledger_id, snapshot.master_key)
        state.fenced = snapshot.fenced
        state.lac = snapshot.lac
        state.explicit_lac = snapshot.explicit_lac
        state.dirty = False
        return state

    def snapshot(self) -> LedgerSnapshot:
        return LedgerSnapshot(
            self.ledger_id, self.master_key, self.fenced, self.lac, self.explicit_lac
        )

    def explicit_lac_value(self) -> int:
        """The LAC inside the explicit LAC body (ledgerId | LAC | digest), or -1."""
        body = self.explicit_lac
        if body is None or len(body) < 16:
            return -1
        return int(_LAC.unpack_from(body, 8)[0])
