"""Runs of v2 ADD answers, recognised as a whole: the client's fast lane for a writer's acks.

A bookie answers a writer's adds in order, and one chunk read from its socket is mostly a run
of ADD responses of one ledger, all EOK, for consecutive entry ids. :func:`add_run` checks a
region of whole 28-byte answers (length 24, header of a v2 ADD response, rc, ledger id, entry
id) as arrays of 32-bit words, one C-level slice and comparison per field, not a tuple per
answer (about 40 ns an answer against 250 for decoding them one by one), and gives
``(ledger id, first entry id, count)`` when every answer fits that shape; None otherwise, and
the caller decodes answer by answer (``v2_stream.ResponseStream.feed``).
"""

from __future__ import annotations

import sys
from array import array

from bkeeper.wire.codes import V2OpCode

__all__ = ["ADD_ANSWER_BYTES", "RUN_ANSWERS_MIN", "AddRun", "add_run"]

#: An ADD response frame: length (4) | header (4) | rc (4) | ledger id (8) | entry id (8).
ADD_ANSWER_BYTES = 28
_WORDS = ADD_ANSWER_BYTES // 4
#: Fewer answers than this are decoded one by one (the arrays cost more than they save).
RUN_ANSWERS_MIN = 8
#: ``(ledger id, first entry id, count)``: ``count`` EOK answers to adds of that ledger, for
#: the entry ids ``first .. first + count - 1`` in that order.
AddRun = tuple[int, int, int]

_ADD_HEADER = (2 << 24) | (int(V2OpCode.ADD_ENTRY) << 16)  # version 2, no flags
_SWAP = sys.byteorder == "little"
if array("I").itemsize != 4:  # pragma: no cover - every platform CPython runs on today
    raise ImportError("bkeeper.wire.runs needs 4-byte array('I') items")


def add_run(region: bytes | bytearray | memoryview) -> AddRun | None:
    """The run ``region`` holds (a whole number of :data:`ADD_ANSWER_BYTES` answers, at
    least one), or None if any answer is not an EOK ADD answer of the first one's ledger for
    the entry after the previous one's."""
    count = len(region) // ADD_ANSWER_BYTES
    if count == 0 or count * ADD_ANSWER_BYTES != len(region):
        return None
    words = array("I")
    words.frombytes(region)
    if _SWAP:
        words.byteswap()
    ledger_high, ledger_low, entry_high, entry_low = words[3:7]
    if entry_low + count > 1 << 32:  # the low word would wrap inside the run
        return None
    for field, value in ((0, 24), (1, _ADD_HEADER), (2, 0), (3, ledger_high), (4, ledger_low)):
        if words[field::_WORDS] != array("I", (value,)) * count:
            return None
    if words[5::_WORDS] != array("I", (entry_high,)) * count:
        return None
    if words[6::_WORDS] != array("I", range(entry_low, entry_low + count)):
        return None
    ledger_id = (ledger_high << 32) | ledger_low
    entry_id = (entry_high << 32) | entry_low
    if ledger_id >= 1 << 63 or entry_id >= 1 << 63:  # negative as the signed longs they are
        return None
    return ledger_id, entry_id, count
