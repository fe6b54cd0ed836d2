"""Reading entries by their heads, without decoding record by record: how many records an
entry holds, the time of one, and every record of many entries as columns at once (Spark's
Arrow conversion). The layout read here is the one :mod:`bkeeper.namedlog.core.records`
writes and documents (its fast path): this module is its second reader only in speed.

:func:`plain_columns` needs numpy (the ``spark`` extra), imported on first use.
"""

from __future__ import annotations

import importlib
import struct
from collections.abc import Sequence
from typing import Any, NamedTuple

from bkeeper.common.errors import ProtocolError
from bkeeper.namedlog.core.chunks import decode_chunk
from bkeeper.namedlog.core.records import (
    BATCH_FORMAT_VERSION,
    BATCH_HEAD,
    BATCH_RECORDS_MAX,
    CHUNK_FORMAT_VERSION,
    FORMAT_VERSION,
    HEAD,
    HEAD_FLAGS_AT,
    HEAD_TIMESTAMP_AT,
    HEAD_VERSION_AT,
    entry_envelopes,
)

__all__ = [
    "OFFSETS_BYTES_MAX",
    "PlainColumns",
    "batch_record_count",
    "entry_first_timestamp",
    "entry_record_count",
    "plain_columns",
]

#: Bytes of payload :func:`plain_columns` returns at most (its offsets are int32, as an Arrow
#: binary column's).
OFFSETS_BYTES_MAX = 2**31 - 1
_HEAD_BYTES = HEAD.size


def batch_record_count(data: Any) -> int:
    """How many records an entry holds by its batch head alone (a batch's count, else 1:
    a single record or a chunk); nothing is checked."""
    if len(data) >= BATCH_HEAD.size and data[0] == BATCH_FORMAT_VERSION:
        return int(BATCH_HEAD.unpack_from(data)[2])
    return 1


def entry_record_count(data: bytes | bytearray | memoryview, ledger_id: int, entry_id: int) -> int:
    """The records an entry holds, from its head alone (nothing is inflated): a batch's
    count, 1 for a single record, 1 for the last chunk of a chunked record (the record's
    position) and 0 for its other chunks; ``ProtocolError`` naming a malformed head."""
    view = memoryview(data)
    if not view or view[0] not in (BATCH_FORMAT_VERSION, CHUNK_FORMAT_VERSION):
        return 1
    if view[0] == CHUNK_FORMAT_VERSION:
        chunk = decode_chunk(view, ledger_id, entry_id)
        assert chunk is not None
        return 1 if chunk.chunk_index == chunk.chunk_count - 1 else 0
    if len(view) < BATCH_HEAD.size:
        raise ProtocolError(f"record batch at {ledger_id}:{entry_id}: head is cut short")
    _, _, count = BATCH_HEAD.unpack_from(view)
    if not 1 <= count <= BATCH_RECORDS_MAX:
        raise ProtocolError(
            f"record batch at {ledger_id}:{entry_id}: record count {count} is not 1 to "
            f"{BATCH_RECORDS_MAX}"
        )
    return int(count)


def entry_first_timestamp(
    data: bytes | bytearray | memoryview, ledger_id: int, entry_id: int, index: int = 0
) -> int | None:
    """The append timestamp of record ``index`` of an entry (a batch's record ``index``, the
    entry's record otherwise); None when the entry is a chunk other than a record's first
    (the timestamp is in its first chunk) or has no record ``index``."""
    view = memoryview(data)
    if view and view[0] == CHUNK_FORMAT_VERSION:
        chunk = decode_chunk(view, ledger_id, entry_id)
        assert chunk is not None
        if chunk.chunk_index or len(chunk.piece) < HEAD.size:
            return None
        return int(HEAD.unpack_from(chunk.piece)[2])
    count, lengths, body = entry_envelopes(view, ledger_id, entry_id)
    if index >= count:
        return None
    offset = sum(struct.unpack_from(f">{index}I", lengths)) if index else 0
    if len(body) - offset < HEAD.size:
        raise ProtocolError(f"record at {ledger_id}:{entry_id}:{index} is cut short")
    return int(HEAD.unpack_from(body, offset)[2])


class PlainColumns(NamedTuple):
    """Records of consecutive entries as numpy columns (:func:`plain_columns`)."""

    #: Records per entry (int64), None when every entry holds one record.
    counts: Any
    #: Append timestamps in ms (int64), one per record.
    times_ms: Any
    #: The payloads back to back (uint8).
    body: Any
    #: Where each payload starts in ``body`` (int32, one more than the records: the end).
    offsets: Any


def plain_columns(
    payloads: Sequence[Any], ledger_id: int, entry_ids: Sequence[int]
) -> PlainColumns | None:
    """The records of the entries ``payloads`` (consecutive entries of ledger ``ledger_id``,
    ids ``entry_ids``) as columns, when every record is plain (format 1, no key, no
    properties: their envelope is the head then the payload); None otherwise (and when the
    payloads pass ``OFFSETS_BYTES_MAX``): decode those record by record."""
    np = importlib.import_module("numpy")
    data = np.frombuffer(b"".join(payloads), np.uint8)
    lengths = np.fromiter(map(len, payloads), np.int64, count=len(payloads))
    found = _plain(np, data, lengths)
    if found is not None:
        return PlainColumns(None, *found)
    if not any(len(v) and v[0] == BATCH_FORMAT_VERSION for v in payloads):
        return None
    envelopes = [
        entry_envelopes(payload, ledger_id, entry_id)
        for payload, entry_id in zip(payloads, entry_ids, strict=True)
    ]
    counts = np.fromiter((e.record_count for e in envelopes), np.int64, count=len(envelopes))
    data = np.frombuffer(b"".join(e.data for e in envelopes), np.uint8)
    lengths = np.frombuffer(b"".join(e.lengths for e in envelopes), ">u4").astype(np.int64)
    found = _plain(np, data, lengths)
    return None if found is None else PlainColumns(counts, *found)


def _plain(np: Any, data: Any, lengths: Any) -> tuple[Any, Any, Any] | None:
    """(timestamps, body, offsets) of the envelopes ``lengths`` back to back in ``data`` when
    every one is plain, else None."""
    count = len(lengths)
    if count == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.uint8), np.zeros(1, np.int32)
    if int(lengths.min()) < _HEAD_BYTES:
        return None
    starts = np.zeros(count, np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    if (data[starts + HEAD_VERSION_AT] != FORMAT_VERSION).any() or data[
        starts + HEAD_FLAGS_AT
    ].any():
        return None
    head = starts[:, None] + np.arange(_HEAD_BYTES, dtype=np.int64)
    # The head ends with the timestamp: a big-endian signed 64-bit integer.
    stamps = data[head[:, HEAD_TIMESTAMP_AT:]]
    times_ms = np.ascontiguousarray(stamps).view(">i8").ravel().astype(np.int64)
    keep = np.ones(len(data), bool)
    keep[head.ravel()] = False
    body = data[keep]
    if len(body) > OFFSETS_BYTES_MAX:
        return None
    offsets = np.empty(count + 1, np.int32)
    offsets[:-1] = starts - _HEAD_BYTES * np.arange(count, dtype=np.int64)
    offsets[-1] = len(body)
    return times_ms, body, offsets
