"""Which ledgers a damaged run of journal records may have held (pure, no I/O).

Journal replay (:mod:`bkeeper.storage.journal_replay`) calls :func:`scan_records` on the
records of a group whose bytes are all on disk but some of whose records fail their
checksum: data that may have been acknowledged. The good records are applied; the ledgers
the damaged ones belong to go into limbo (they answer "unknown", never "absent", until they
are repaired); when those ledgers cannot be told, the whole storage goes into limbo.

Rules:

* A damaged record is delimited by its own length field. That is trusted only if every byte
  up to ``end`` is then accounted for: the records after it delimit too, and the last one
  ends exactly at ``end`` (with, for a group, as many records as its header says). Otherwise
  the scan cannot tell which ledgers the damaged bytes held (``ledgers`` is None).
* A damaged record belongs to the ledger id in its payload, unless its checksum shows that
  the damage lies in the ledger id itself. CRC-32C is linear: the checksum of the damaged
  bytes XOR the stored one (the *syndrome*) equals the checksum of the error pattern, so
  each error pattern confined to the 8 ledger-id bytes has a known syndrome. Every pattern
  of one or two flipped bits, or of any damage to a single byte, is tried (about 4,000);
  those matching give the ledger ids the record may really have named. Of the candidates
  (the id read and the corrected ones), those naming a ledger the engine knows (or that a
  good record of the same scan names) are the record's ledgers; none known: cannot tell.
  This is exact for damage outside the ledger id and for those patterns inside it; heavier
  damage inside the ledger id that happens to spell another known ledger's id escapes.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from crc32c import crc32c

from bkeeper.storage.framing import RECORD_HEADER, RECORD_HEADER_BYTES
from bkeeper.storage.journal_format import JournalRecord, decode_record

__all__ = ["ID_MASK_TABLES_MAX", "RecordScan", "ledger_id_candidates", "scan_records"]

#: CRC-32C's polynomial, bit-reversed (the register shifts right).
_POLY = 0x82F63B78
#: Syndrome tables kept (one per damaged record length, about 0.3 MB each).
ID_MASK_TABLES_MAX = 8
_ID_BYTES = 8
#: The ledger id is the first field of every record's payload; the checksummed message is
#: the first five header bytes (length, kind) then the payload.
_ID_OFFSET = 5


@dataclass
class RecordScan:
    """What :func:`scan_records` found between ``start`` and ``end``.

    ``records``: the good records, in order. ``damage``: (offset, reason) of the first damaged
    record, or None. ``damaged``: how many records were damaged. ``ledgers``: the ledgers the
    damaged records may belong to, None when they cannot be told. ``good_ledgers``: the
    ledgers of the good records. ``count``: records delimited (good and damaged).
    """

    records: list[JournalRecord] = field(default_factory=list)
    damage: tuple[int, str] | None = None
    damaged: int = 0
    ledgers: set[int] | None = field(default_factory=set)
    good_ledgers: set[int] = field(default_factory=set)
    count: int = 0


def scan_records(
    data: bytes, start: int, end: int, known: Callable[[int], bool], count: int | None = None
) -> RecordScan:
    """Delimit and check the records in ``data[start:end]``; see the module rules.

    ``count``, when given, is how many records there must be (a group header's count).
    """
    scan = RecordScan()
    suspects: list[tuple[int, int, int]] = []  # (offset, payload length, stored crc)
    offset = start
    while offset < end:
        record, record_end, reason = decode_record(data, offset)
        if record is None:
            if scan.damage is None:
                scan.damage = (offset, reason)
            record_end = _delimit(data, offset, end)
            if record_end < 0:
                scan.ledgers = None
                return scan
            length = record_end - offset - RECORD_HEADER_BYTES
            suspects.append((offset, length, _stored(data, offset)))
            scan.damaged += 1
        else:
            if record_end > end:
                scan.ledgers = None
                return scan
            scan.records.append(record)
            scan.good_ledgers.add(record.ledger_id)
        scan.count += 1
        offset = record_end
    if count is not None and scan.count != count:
        if scan.damage is None:
            scan.damage = (start, f"group holds {scan.count} records, header says {count}")
        scan.ledgers = None
        return scan
    scan.ledgers = _attribute(data, suspects, lambda i: i in scan.good_ledgers or known(i))
    return scan


def _delimit(data: bytes, offset: int, end: int) -> int:
    """Where the damaged record at ``offset`` ends by its length field; -1 if it cannot."""
    if end - offset < RECORD_HEADER_BYTES:
        return -1
    length = int(RECORD_HEADER.unpack_from(data, offset)[0])
    record_end = offset + RECORD_HEADER_BYTES + length
    if length < _ID_BYTES or record_end > end:
        return -1
    return record_end


def _stored(data: bytes, offset: int) -> int:
    return int(RECORD_HEADER.unpack_from(data, offset)[2])


def _attribute(
    data: bytes, suspects: list[tuple[int, int, int]], known: Callable[[int], bool]
) -> set[int] | None:
    ledgers: set[int] = set()
    for offset, length, stored in suspects:
        payload = offset + RECORD_HEADER_BYTES
        message = data[offset : offset + 5] + data[payload : payload + length]
        found = [c for c in ledger_id_candidates(message, stored) if known(c)]
        if not found:
            return None
        ledgers.update(found)
    return ledgers


def ledger_id_candidates(message: bytes, stored_crc: int) -> set[int]:
    """The ledger ids a damaged record may have named: the one it reads, and those that
    error patterns of up to two bits or within one byte of the id explain (module rules).

    ``message`` is what the record's checksum covers (length, kind, payload)."""
    read_id = int.from_bytes(message[_ID_OFFSET : _ID_OFFSET + _ID_BYTES], "big")
    syndrome = crc32c(message) ^ stored_crc
    candidates = {_signed(read_id)}
    if syndrome:
        for mask in _id_masks(len(message)).get(syndrome, ()):
            candidates.add(_signed(read_id ^ mask))
    return candidates


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


@functools.lru_cache(maxsize=ID_MASK_TABLES_MAX)
def _id_masks(message_bytes: int) -> dict[int, list[int]]:
    """Syndrome -> masks (over the id as an unsigned 64-bit integer) of the error patterns
    tried, for a message of ``message_bytes``. Kept for the last
    :data:`ID_MASK_TABLES_MAX` lengths (each table costs milliseconds to build, and the
    damaged records of one group are mostly of one size: a group of a thousand took
    seconds to scan when every record built its own). The caller must not change it."""
    bits = _bit_syndromes(message_bytes)  # (mask, syndrome) per id bit
    table: dict[int, list[int]] = {}
    patterns: dict[int, int] = {}
    for (mask_a, syn_a), (mask_b, syn_b) in itertools.combinations(bits, 2):
        patterns[mask_a | mask_b] = syn_a ^ syn_b
    for byte in range(_ID_BYTES):
        in_byte = bits[8 * byte : 8 * byte + 8]
        for value in range(1, 256):
            mask = syndrome = 0
            for bit in range(8):
                if value >> bit & 1:
                    mask |= in_byte[bit][0]
                    syndrome ^= in_byte[bit][1]
            patterns[mask] = syndrome
    for mask, syndrome in patterns.items():
        table.setdefault(syndrome, []).append(mask)
    return table


def _bit_syndromes(message_bytes: int) -> list[tuple[int, int]]:
    """(mask over the id, syndrome) of each single flipped bit of the id, byte by byte.

    The syndrome of a flipped bit is the CRC (zero initial value, no final XOR) of that bit
    followed by the rest of the message as zeros; computed with the library's CRC for the
    id's last byte, and for earlier bytes by running the register over one zero byte more.
    """
    tail = message_bytes - _ID_OFFSET - _ID_BYTES
    zeros_after = bytes(tail)
    zero_crc = crc32c(bytes(tail + 1))
    last = [crc32c(zeros_after, crc32c(bytes([1 << bit]))) ^ zero_crc for bit in range(8)]
    by_byte = [last]
    for _ in range(_ID_BYTES - 1):
        by_byte.append([_zero_byte(s) for s in by_byte[-1]])
    by_byte.reverse()  # by_byte[k]: the id's k-th byte (big-endian: most significant first)
    result: list[tuple[int, int]] = []
    for byte, syndromes in enumerate(by_byte):
        shift = 8 * (_ID_BYTES - 1 - byte)
        result.extend((1 << (shift + bit), syndromes[bit]) for bit in range(8))
    return result


def _zero_byte(register: int) -> int:
    for _ in range(8):
        register = (register >> 1) ^ (_POLY if register & 1 else 0)
    return register
