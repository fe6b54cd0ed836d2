"""Digest types a ledger's entries may carry, numbered as ``LedgerMetadataFormat.DigestType``."""

from __future__ import annotations

import enum

__all__ = ["DigestType"]


class DigestType(enum.IntEnum):
    CRC32 = 1
    HMAC = 2
    CRC32C = 3
    DUMMY = 4
