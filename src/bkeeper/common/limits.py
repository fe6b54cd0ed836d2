"""Named limits shared across layers. Components take their own limits through their
frozen config dataclasses; these are the defaults they start from."""

from __future__ import annotations

__all__ = [
    "DEFAULT_BOOKIE_PORT",
    "MASTER_KEY_BYTES",
    "MAX_FRAME_BYTES_DEFAULT",
]

#: Largest frame (the 4-byte length's value) accepted by default, as Apache BookKeeper's
#: ``nettyMaxFrameSizeBytes``.
MAX_FRAME_BYTES_DEFAULT = 5 * 1024 * 1024

#: A master key is SHA-1("ledger" + password): 20 bytes.
MASTER_KEY_BYTES = 20

#: Apache BookKeeper's default bookie port.
DEFAULT_BOOKIE_PORT = 3181
