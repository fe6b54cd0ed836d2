"""Identifier types shared by every layer, with their documented ranges.

A ledger id is a non-negative signed 64-bit integer; entry ids are non-negative except for
the wire's special values (``LAST_ADD_CONFIRMED`` = -1 asks a bookie for its last entry;
``INVALID_ENTRY_ID`` = -1 also marks "no entry yet"). A bookie id is a string, by default
``host:port``.
"""

from __future__ import annotations

from typing import NewType

__all__ = [
    "INVALID_ENTRY_ID",
    "LAST_ADD_CONFIRMED",
    "MAX_LEDGER_ID",
    "BookieId",
    "EntryId",
    "LedgerId",
]

LedgerId = NewType("LedgerId", int)
EntryId = NewType("EntryId", int)
BookieId = NewType("BookieId", str)

MAX_LEDGER_ID = (1 << 63) - 1
LAST_ADD_CONFIRMED = -1
INVALID_ENTRY_ID = -1
