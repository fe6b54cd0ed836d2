"""Shared vocabulary of bkeeper: ids, the exception tree, the clock protocol, limits.

Imports nothing from the rest of the project.
"""

from bkeeper.common.clock import Clock, SystemClock
from bkeeper.common.errors import (
    BKeeperError,
    BookieError,
    ClientClosedError,
    ConfigError,
    DigestMismatchError,
    LedgerFencedError,
    ProtocolError,
)
from bkeeper.common.ids import BookieId, EntryId, LedgerId

__all__ = [
    "BKeeperError",
    "BookieError",
    "BookieId",
    "ClientClosedError",
    "Clock",
    "ConfigError",
    "DigestMismatchError",
    "EntryId",
    "LedgerFencedError",
    "LedgerId",
    "ProtocolError",
    "SystemClock",
]
