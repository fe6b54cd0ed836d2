"""Named limits shared across layers. Components take their own limits through their
frozen config dataclasses; these are the defaults they start from."""

from __future__ import annotations

__all__ = [
    "DEFAULT_BOOKIE_PORT",
    "MASTER_KEY_BYTES",
    "MAX_FRAME_BYTES_DEFAULT",
    "OVERSIZED_FRAME_SKIP_BYTES_MAX",
]

#: Largest frame (the 4-byte length's value) accepted by default, as Apache BookKeeper's
#: ``nettyMaxFrameSizeBytes``.
MAX_FRAME_BYTES_DEFAULT = 5 * 1024 * 1024

#: A frame longer than a bookie's limit but at most this long is refused without closing the
#: connection: the bookie answers it from its first bytes (EBADREQ) and reads the rest into
#: nothing. A longer one closes the connection (reading it would take the bookie too long).
OVERSIZED_FRAME_SKIP_BYTES_MAX = 64 * 1024 * 1024

#: A master key is SHA-1("ledger" + password): 20 bytes.
MASTER_KEY_BYTES = 20

#: Apache BookKeeper's default bookie port.
DEFAULT_BOOKIE_PORT = 3181
