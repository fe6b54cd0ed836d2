"""The index file: ledger states and entry locations, persisted at each checkpoint.

``index-<generation as 16 hex digits>.idx`` is a 16-byte header (magic b"BKIX" | version u32
(=1) | generation u64) followed by records framed as in :mod:`bkeeper.storage.framing`::

    kind  name       payload
    1     LEDGER     ledgerId i64 | flags u8 (1 fenced, 2 has explicit LAC, 4 limbo) | lac i64 |
                     key length u16 | master key | explicit LAC body (the rest)
    2     LOCATIONS  ledgerId i64 | count u32 | entry ids (count x i64) |
                     locations (count x u64); both arrays little-endian
    3     DELETE     ledgerId i64

Applying the records in order rebuilds the engine's state as of the last checkpoint: LEDGER
creates the ledger or replaces its persisted fields, LOCATIONS sets entry locations, DELETE
forgets the ledger with its locations. Only the first ``index_bytes`` recorded in the
checkpoint file count: bytes after that are debris of a checkpoint that never completed and
are cut when the engine opens. A checkpoint appends a delta (deletions first, then changed
ledgers, then new locations); when the file has grown well past its live content the engine
writes a full snapshot as the next generation instead.
"""

from __future__ import annotations

import struct
import sys
from array import array
from dataclasses import dataclass

from bkeeper.common.errors import CorruptRecordError
from bkeeper.storage.filesystem import FileSystem, numbered_file_name, numbered_file_number
from bkeeper.storage.framing import FrameStatus, decode_frame, encode_frame
from bkeeper.storage.ledger_state import LedgerSnapshot, StoredLedger

__all__ = [
    "INDEX_HEADER_BYTES",
    "IndexDelta",
    "LocationRun",
    "encode_delta",
    "encode_index_header",
    "index_file_generation",
    "index_file_name",
    "load_index",
]

MAGIC = b"BKIX"
VERSION = 1
_HEADER = struct.Struct(">4sIQ")
INDEX_HEADER_BYTES = _HEADER.size
_LEDGER = struct.Struct(">qBqH")
_LOCATIONS = struct.Struct(">qI")
_ID = struct.Struct(">q")
KIND_LEDGER, KIND_LOCATIONS, KIND_DELETE = 1, 2, 3
_KINDS = frozenset({KIND_LEDGER, KIND_LOCATIONS, KIND_DELETE})
_FENCED, _HAS_EXPLICIT_LAC, _LIMBO = 1, 2, 4
#: Locations per LOCATIONS record: 16 MiB of payload at most.
_RUN_ENTRIES_MAX = 1 << 20
_SWAP = sys.byteorder != "little"
PREFIX, SUFFIX = "index-", ".idx"


def index_file_name(generation: int) -> str:
    return numbered_file_name(generation, SUFFIX, PREFIX)


def index_file_generation(name: str) -> int | None:
    """The number in a file name of this kind, or None for any other file."""
    return numbered_file_number(name, SUFFIX, PREFIX)


def encode_index_header(generation: int) -> bytes:
    return _HEADER.pack(MAGIC, VERSION, generation)


@dataclass(frozen=True, slots=True)
class LocationRun:
    """Locations of some entries of one ledger."""

    ledger_id: int
    entry_ids: array[int]
    locations: array[int]


@dataclass(frozen=True, slots=True)
class IndexDelta:
    """What one checkpoint persists."""

    deleted: tuple[int, ...]
    ledgers: tuple[LedgerSnapshot, ...]
    runs: tuple[LocationRun, ...]


def encode_delta(delta: IndexDelta) -> bytes:
    parts = [encode_frame(KIND_DELETE, _ID.pack(ledger_id)) for ledger_id in delta.deleted]
    parts.extend(encode_frame(KIND_LEDGER, _encode_ledger(s)) for s in delta.ledgers)
    for run in delta.runs:
        for start in range(0, len(run.entry_ids), _RUN_ENTRIES_MAX):
            end = start + _RUN_ENTRIES_MAX
            payload = _encode_run(run.ledger_id, run.entry_ids[start:end], run.locations[start:end])
            parts.append(encode_frame(KIND_LOCATIONS, payload))
    return b"".join(parts)


def _encode_ledger(snapshot: LedgerSnapshot) -> bytes:
    flags = (
        (_FENCED if snapshot.fenced else 0)
        | (_HAS_EXPLICIT_LAC if snapshot.explicit_lac is not None else 0)
        | (_LIMBO if snapshot.limbo else 0)
    )
    head = _LEDGER.pack(snapshot.ledger_id, flags, snapshot.lac, len(snapshot.master_key))
    return head + snapshot.master_key + (snapshot.explicit_lac or b"")


def _encode_run(ledger_id: int, entry_ids: array[int], locations: array[int]) -> bytes:
    if _SWAP:
        entry_ids, locations = array("q", entry_ids), array("Q", locations)
        entry_ids.byteswap()
        locations.byteswap()
    return _LOCATIONS.pack(ledger_id, len(entry_ids)) + entry_ids.tobytes() + locations.tobytes()


def load_index(fs: FileSystem, path: str, length: int) -> dict[int, StoredLedger]:
    """The ledger states persisted in the first ``length`` bytes of the index file."""
    data = fs.read_file(path)
    if len(data) < length:
        raise CorruptRecordError(path, len(data), f"index file shorter than {length} bytes")
    magic, version, _ = _HEADER.unpack_from(data)
    if magic != MAGIC or version != VERSION:
        raise CorruptRecordError(path, 0, "bad index file header")
    data = data[:length]
    states: dict[int, StoredLedger] = {}
    offset = INDEX_HEADER_BYTES
    while offset < length:
        frame = decode_frame(data, offset, _KINDS)
        if frame.status is not FrameStatus.OK:
            raise CorruptRecordError(path, offset, f"index record: {frame.reason}")
        _apply(states, frame.kind, frame.payload)
        offset = frame.end
    return states


def _apply(states: dict[int, StoredLedger], kind: int, payload: bytes) -> None:
    (ledger_id,) = _ID.unpack_from(payload)
    if kind == KIND_DELETE:
        states.pop(ledger_id, None)
    elif kind == KIND_LEDGER:
        snapshot = _decode_ledger(payload)
        state = states.get(ledger_id)
        if state is None:
            states[ledger_id] = StoredLedger.restore(snapshot)
        else:
            state.fenced, state.lac = snapshot.fenced, snapshot.lac
            state.explicit_lac, state.limbo = snapshot.explicit_lac, snapshot.limbo
    else:
        state = states.get(ledger_id)
        if state is None:  # locations are always written after their ledger's record
            return
        entry_ids, locations = _decode_run(payload)
        state.locations.set_many(entry_ids, locations)  # a run in order: one C-level step
        state.last_entry_id = state.locations.max_entry_id


def _decode_ledger(payload: bytes) -> LedgerSnapshot:
    ledger_id, flags, lac, key_length = _LEDGER.unpack_from(payload)
    key_end = _LEDGER.size + key_length
    key = payload[_LEDGER.size : key_end]
    explicit = payload[key_end:] if flags & _HAS_EXPLICIT_LAC else None
    return LedgerSnapshot(
        ledger_id, key, bool(flags & _FENCED), lac, explicit, bool(flags & _LIMBO)
    )


def _decode_run(payload: bytes) -> tuple[array[int], array[int]]:
    _, count = _LOCATIONS.unpack_from(payload)
    entry_ids, locations = array("q"), array("Q")
    ids_end = _LOCATIONS.size + 8 * count
    entry_ids.frombytes(payload[_LOCATIONS.size : ids_end])
    locations.frombytes(payload[ids_end : ids_end + 8 * count])
    if _SWAP:
        entry_ids.byteswap()
        locations.byteswap()
    return entry_ids, locations
