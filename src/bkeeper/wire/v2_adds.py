"""The bookie's batch lane for v2 adds: many ADD requests read from one chunk,
and their answers, without an object per request.

:func:`scan_add_requests` walks the length-prefixed frames of a chunk and collects the fields
of every *plain* ADD request (v2 header, no flags, an entry body of at least its 32-byte head
``ledgerId | entryId | LAC | length``) into parallel lists, stopping at the first frame that
is anything else, incomplete, or past the limits given; the caller handles that frame the
general way (:func:`bkeeper.wire.v2.decode_request`, or
:func:`~bkeeper.wire.v2.peek_add_request` for adds with flags), which also reports bad
lengths. :func:`add_response_frames` packs the answers to many adds into one ``bytes``.
"""

from __future__ import annotations

import struct

from bkeeper.common.limits import MASTER_KEY_BYTES
from bkeeper.wire.codes import STATUS_TO_V2, StatusCode, V2OpCode
from bkeeper.wire.v2 import CURRENT_VERSION

__all__ = ["PLAIN_ADD_FRAME_BYTES_MIN", "add_response_frames", "scan_add_requests"]

#: length | header | master key | ledgerId | entryId | LAC, from the frame's first byte.
_ADD_HEAD = struct.Struct(f">iI{MASTER_KEY_BYTES}sqqq")
#: Where the entry body starts, counted from the frame's length prefix.
_BODY_AT = 8 + MASTER_KEY_BYTES
#: The smallest plain ADD frame, length prefix included: the entry body holds at least
#: ledgerId | entryId | LAC | length (32 bytes).
PLAIN_ADD_FRAME_BYTES_MIN = _BODY_AT + 32
_PLAIN_ADD_HEADS = frozenset(
    (version << 24) | (int(V2OpCode.ADD_ENTRY) << 16) for version in range(1, CURRENT_VERSION + 1)
)
_ADD_RESPONSE = struct.Struct(">iiiqq")
_ADD_RESPONSE_HEAD = (CURRENT_VERSION << 24) | (int(V2OpCode.ADD_ENTRY) << 16)


def scan_add_requests(
    buffer: bytes,
    offset: int,
    max_frame_bytes: int,
    max_count: int,
    max_bytes: int,
    ledger_ids: list[int],
    entry_ids: list[int],
    lacs: list[int],
    master_keys: list[bytes],
    bodies: list[bytes],
) -> tuple[int, int, int]:
    """Collect the plain ADD requests at ``offset`` of ``buffer``: each one's ledger id,
    entry id and LAC (as its body names them), master key and body (a copy) go to the lists.
    Stops at the first frame that is not a complete plain ADD of at most
    ``max_frame_bytes``, or once ``max_count`` adds or ``max_bytes`` frame bytes (lengths
    without prefixes, as the connection counts requests) are collected. Returns ``(offset
    of the frame it stopped at, adds collected, their frame bytes)``."""
    end = len(buffer)
    heads = _PLAIN_ADD_HEADS
    unpack = _ADD_HEAD.unpack_from
    smallest = PLAIN_ADD_FRAME_BYTES_MIN
    body_at = _BODY_AT
    count = total = 0
    add_ledger = ledger_ids.append
    add_entry = entry_ids.append
    add_lac = lacs.append
    add_key = master_keys.append
    add_body = bodies.append
    while end - offset >= smallest and count < max_count and total < max_bytes:
        size, head, key, ledger_id, entry_id, lac = unpack(buffer, offset)
        stop = offset + 4 + size
        if head not in heads or size > max_frame_bytes or stop > end or size + 4 < smallest:
            break
        add_ledger(ledger_id)
        add_entry(entry_id)
        add_lac(lac)
        add_key(key)
        add_body(buffer[offset + body_at : stop])
        count += 1
        total += size
        offset = stop
    return offset, count, total


def add_response_frames(status: StatusCode, ledger_ids: list[int], entry_ids: list[int]) -> bytes:
    """ADD response frames (length prefixes included) for every ``(ledger_ids[i],
    entry_ids[i])``, all with ``status``, as one ``bytes``."""
    pack = _ADD_RESPONSE.pack
    code = STATUS_TO_V2[status]
    head = _ADD_RESPONSE_HEAD
    pairs = zip(ledger_ids, entry_ids, strict=True)
    return b"".join([pack(24, head, code, ledger, entry) for ledger, entry in pairs])
