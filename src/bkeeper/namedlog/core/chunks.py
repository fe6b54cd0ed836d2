"""Large records put back together from their chunks (pure: entries in, records out).

A writer cuts a record larger than its ``LogConfig.chunk_bytes`` into chunks, consecutive
entries of one ledger in the format-3 layout of :mod:`bkeeper.namedlog.core.records`. Every reader
of a log (the tailing reader, consumers through it, Spark) feeds the entries of a ledger, in
order, to one :class:`Reassembly`, which hands back each entry to decode: a plain entry (format
1 or 2) as it is, a chunked record as its whole envelope at its last chunk, as a
:class:`Whole`.

Rules:

* At most one record is in progress, of at most ``RECORD_BYTES_MAX`` bytes: the memory a
  reader spends on reassembly is bounded by one record.
* A chunk must follow the previous one: the next index, the next entry id, the same count and
  record size. Anything else (a chunk out of place, a plain entry, a new record's first chunk)
  ends the record in progress as **incomplete**: it is skipped, reported to ``on_skip`` (the
  reader logs a warning and counts it), and never returned in part.
* A chunk other than the first with no record in progress belongs to a record whose first
  chunks were not fed: skipped (reported once, at its last chunk or when it ends).
  :meth:`Reassembly.first_chunk` tells a reader starting at such a chunk where its record
  begins, so it can read those entries first (a start inside a chunked record reads that
  record: its position, the last chunk's, is at or after the start).
* :meth:`Reassembly.end` says the ledger has no more entries (sealed, all read): a record in
  progress there was cut short by its writer (it stopped between chunks) and is skipped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from bkeeper.common.errors import ConfigError, ProtocolError
from bkeeper.namedlog.core.records import (
    CHUNK_FORMAT_VERSION,
    CHUNK_HEAD,
    CHUNKS_MAX,
    RECORD_BYTES_MAX,
    Position,
    Record,
    decode_entry,
    decode_record,
)

__all__ = [
    "Chunk",
    "Incomplete",
    "Reassembly",
    "Whole",
    "decode_chunk",
    "encode_chunks",
    "whole_records",
]


# -- chunks of large records (format 3) ---------------------------------------------------


class Chunk(NamedTuple):
    """The head of a chunk entry (:func:`decode_chunk`) and its piece of the envelope."""

    chunk_index: int
    chunk_count: int
    record_bytes: int
    piece: memoryview


def encode_chunks(envelope: bytes | bytearray | memoryview, chunk_bytes: int) -> list[bytes]:
    """The chunk entries of a record whose envelope (:func:`encode_record`) is larger than
    ``chunk_bytes``, in order; ``ConfigError`` naming the size and the limit when the record
    is larger than ``RECORD_BYTES_MAX`` or needs more than ``CHUNKS_MAX`` chunks."""
    size = len(envelope)
    if size > RECORD_BYTES_MAX:
        raise ConfigError(
            f"a record of {size} bytes (payload, key and properties) exceeds the largest a log "
            f"takes, RECORD_BYTES_MAX = {RECORD_BYTES_MAX} bytes"
        )
    if chunk_bytes < 1:
        raise ConfigError(f"chunk_bytes must be at least 1, not {chunk_bytes}")
    count = -(-size // chunk_bytes)
    if not 2 <= count <= CHUNKS_MAX:
        raise ConfigError(
            f"a record of {size} bytes in chunks of {chunk_bytes} bytes makes {count} chunks, "
            f"not 2 to {CHUNKS_MAX}"
        )
    view = memoryview(envelope)
    return [
        CHUNK_HEAD.pack(CHUNK_FORMAT_VERSION, 0, index, count, size)
        + view[index * chunk_bytes : (index + 1) * chunk_bytes]
        for index in range(count)
    ]


def decode_chunk(
    data: bytes | bytearray | memoryview, ledger_id: int, entry_id: int
) -> Chunk | None:
    """The chunk in entry ``data`` (None: the entry is not a chunk, format 1 or 2);
    ``ProtocolError`` naming the entry when its head is malformed or out of bounds."""
    view = memoryview(data)
    if not view or view[0] != CHUNK_FORMAT_VERSION:
        return None
    if len(view) < CHUNK_HEAD.size:
        raise ProtocolError(f"chunk at {ledger_id}:{entry_id}: head is cut short")
    _, flags, index, count, size = CHUNK_HEAD.unpack_from(view)
    problem = None
    if flags:
        problem = f"unknown flags {flags:#x}"
    elif not 2 <= count <= CHUNKS_MAX:
        problem = f"chunk count {count} is not 2 to {CHUNKS_MAX}"
    elif index >= count:
        problem = f"chunk index {index} is not below its count {count}"
    elif size > RECORD_BYTES_MAX:
        problem = f"record of {size} bytes exceeds RECORD_BYTES_MAX ({RECORD_BYTES_MAX})"
    if problem is not None:
        raise ProtocolError(f"chunk at {ledger_id}:{entry_id}: {problem}")
    return Chunk(index, count, size, view[CHUNK_HEAD.size :])


# -- putting chunked records back together ---------------------------------------------


class Whole(NamedTuple):
    """What a reader decodes for entry ``entry_id``: the entry itself (``chunks`` 1), or the
    envelope of the chunked record whose last chunk it is (``chunks``: its chunk count)."""

    entry_id: int
    data: bytes | bytearray | memoryview
    chunks: int = 1


@dataclass(frozen=True)
class Incomplete:
    """A chunked record a reader skipped: of ledger ``ledger_id``, chunks seen in entries
    ``first..last`` (``seen`` of its ``count``), and why."""

    ledger_id: int
    first: int
    last: int
    seen: int
    count: int
    reason: str

    def __str__(self) -> str:
        return (
            f"incomplete chunked record skipped in ledger {self.ledger_id}, entries "
            f"{self.first}..{self.last} ({self.seen} of {self.count} chunks): {self.reason}"
        )


class _InProgress:
    """The record being put back together: where it started, what is expected next."""

    __slots__ = ("count", "first", "next_entry", "next_index", "pieces", "problem", "size", "total")

    def __init__(self, first: int, index: int, count: int, total: int) -> None:
        self.first = first
        self.next_entry = first
        self.next_index = index
        self.count = count
        self.total = total
        self.size = 0
        self.pieces: list[memoryview] = []
        #: Why the record cannot be whole (None: it may be): its pieces are dropped then.
        self.problem: str | None = None


class Reassembly:
    """Puts chunked records of ledger ``ledger_id`` back together (see the module
    docstring); ``on_skip`` hears of each incomplete record skipped."""

    def __init__(self, ledger_id: int, on_skip: Callable[[Incomplete], None]) -> None:
        self.ledger_id = ledger_id
        self._on_skip = on_skip
        self._record: _InProgress | None = None
        #: No entry fed yet.
        self.fresh = True
        #: No record in progress: a plain entry goes through untouched (an attribute, not a
        #: property: readers check it once per entry).
        self.idle = True

    def first_chunk(self, entry_id: int, data: bytes | bytearray | memoryview) -> int | None:
        """For a reader about to start at entry ``entry_id``: the entry id of the first
        chunk of the record it is a later chunk of (None: it is none)."""
        chunk = decode_chunk(data, self.ledger_id, entry_id)
        if chunk is None or chunk.chunk_index == 0 or chunk.chunk_index > entry_id:
            return None
        return entry_id - chunk.chunk_index

    def feed(self, entry_id: int, data: bytes | bytearray | memoryview) -> Whole | None:
        """The next entry of the ledger; what to decode for it (None: nothing yet)."""
        self.fresh = False
        if data and data[0] == CHUNK_FORMAT_VERSION:
            chunk = decode_chunk(data, self.ledger_id, entry_id)
            assert chunk is not None
        else:
            if self._record is not None:
                self._skip(self._record, f"entry {entry_id} is not its next chunk")
            return Whole(entry_id, data)
        record = self._record
        if record is not None and (
            (chunk.chunk_index, entry_id, chunk.chunk_count, chunk.record_bytes)
            != (record.next_index, record.next_entry, record.count, record.total)
        ):
            self._skip(record, f"entry {entry_id} is not its next chunk")
            record = None
        if record is None:
            record = self._record = _InProgress(
                entry_id, chunk.chunk_index, chunk.chunk_count, chunk.record_bytes
            )
            self.idle = False
            if chunk.chunk_index:
                record.problem = "its first chunks were not read (the read started after them)"
        record.next_index += 1
        record.next_entry = entry_id + 1
        if record.problem is None:
            record.size += len(chunk.piece)
            if record.size > record.total:
                record.problem = f"its pieces exceed its {record.total} bytes"
                record.pieces = []
            else:
                record.pieces.append(chunk.piece)
        if chunk.chunk_index < chunk.chunk_count - 1:
            return None
        self._record, self.idle = None, True
        if record.problem is None and record.size != record.total:
            record.problem = f"its pieces add up to {record.size} bytes, not {record.total}"
        if record.problem is not None:
            self._skip(record, record.problem)
            return None
        return Whole(entry_id, b"".join(record.pieces), chunk.chunk_count)

    def end(self, why: str) -> None:
        """The ledger has no more entries for this reader (``why``, for the report): a
        record in progress is incomplete."""
        if self._record is not None:
            self._skip(self._record, why)

    def _skip(self, record: _InProgress, reason: str) -> None:
        self._record, self.idle = None, True
        seen = record.next_entry - record.first
        self._on_skip(
            Incomplete(
                self.ledger_id, record.first, record.next_entry - 1, seen, record.count, reason
            )
        )


def whole_records(whole: Whole, ledger_id: int) -> list[Record]:
    """The records of ``whole`` (see :class:`Whole`): a plain entry's, or the chunked
    record at its last chunk's position, with its chunk count."""
    if whole.chunks == 1:
        return decode_entry(whole.data, ledger_id, whole.entry_id)
    record = decode_record(whole.data, Position(ledger_id, whole.entry_id))
    return [record._replace(chunks=whole.chunks)]
