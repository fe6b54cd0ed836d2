"""The compact set of entry ids sent by GET_LIST_OF_ENTRIES_OF_LEDGER.

Layout (BookKeeper's ``AvailabilityOfEntriesOfLedger``, header version 0), big-endian:

* a 64-byte header: version (int, 0), number of sequence groups (int), zeros;
* per sequence group, 24 bytes: first sequence start (long), last sequence start (long),
  sequence size (int), sequence period (int).

A *sequence* is a run of consecutive entry ids; a *sequence group* is a series of sequences
of the same size whose starts are ``period`` apart, from ``first`` to ``last`` start (period 0
when the group holds one sequence). Groups are ordered by first start and do not overlap.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from bkeeper.common.errors import ProtocolError

__all__ = ["HEADER_BYTES", "RANGES_MAX", "decode_entry_ids", "decode_ranges", "encode_entry_ids"]

HEADER_BYTES = 64
_HEADER = struct.Struct(">ii")
_GROUP = struct.Struct(">qqii")
_VERSION = 0
_INT_MAX = (1 << 31) - 1


def _runs(entry_ids: Iterable[int]) -> list[tuple[int, int]]:
    """Maximal runs (start, size) of the sorted, de-duplicated ids."""
    runs: list[tuple[int, int]] = []
    start = size = -1
    previous = None
    for entry_id in entry_ids:
        if previous is not None and entry_id < previous:
            raise ValueError("entry ids must be sorted")
        if entry_id == previous:
            continue
        if size > 0 and entry_id == start + size and size < _INT_MAX:
            size += 1
        else:
            if size > 0:
                runs.append((start, size))
            start, size = entry_id, 1
        previous = entry_id
    if size > 0:
        runs.append((start, size))
    return runs


def encode_entry_ids(entry_ids: Iterable[int]) -> bytes:
    """Encode sorted entry ids."""
    groups: list[list[int]] = []  # [first, last, size, period]
    for start, size in _runs(entry_ids):
        if groups:
            group = groups[-1]
            first, last, group_size, period = group
            gap = start - last
            if group_size == size and gap <= _INT_MAX and (period == gap or first == last):
                group[1], group[3] = start, gap
                continue
        groups.append([start, start, size, 0])
    parts = [_HEADER.pack(_VERSION, len(groups)).ljust(HEADER_BYTES, b"\0")]
    parts.extend(_GROUP.pack(*g) for g in groups)
    return b"".join(parts)


#: Most runs a decoded set may expand to; a peer claiming more is refused.
RANGES_MAX = 1_000_000


def decode_ranges(
    data: bytes | bytearray | memoryview, ranges_max: int = RANGES_MAX
) -> list[tuple[int, int]]:
    """The encoded set as half-open ranges ``[start, end)``, in order."""
    if len(data) < HEADER_BYTES:
        raise ProtocolError(f"entry set of {len(data)} bytes is shorter than its header")
    version, count = _HEADER.unpack_from(data)
    if version > _VERSION:
        raise ProtocolError(f"entry set header version {version} is not supported")
    if count < 0 or len(data) < HEADER_BYTES + count * _GROUP.size:
        raise ProtocolError(f"entry set claims {count} groups in {len(data)} bytes")
    ranges: list[tuple[int, int]] = []
    for index in range(count):
        first, last, size, period = _GROUP.unpack_from(data, HEADER_BYTES + index * _GROUP.size)
        if size <= 0 or last < first or (last > first and period <= 0):
            raise ProtocolError(f"entry set group {index} is malformed")
        if period and (last - first) // period >= ranges_max - len(ranges):
            raise ProtocolError(f"entry set expands to more than {ranges_max} runs")
        start = first
        while start <= last:
            ranges.append((start, start + size))
            if period == 0:
                break
            start += period
    return ranges


def decode_entry_ids(data: bytes | bytearray | memoryview) -> list[int]:
    """Every entry id in the encoded set, ascending."""
    return [entry_id for start, end in decode_ranges(data) for entry_id in range(start, end)]
