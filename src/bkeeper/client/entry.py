"""The entry a reader gets: :class:`Entry`, the client's public type for a ledger entry."""

from __future__ import annotations

from bkeeper.wire.digest import VerifiedEntry

__all__ = ["Entry"]


class Entry(VerifiedEntry):
    """One entry of a ledger, as read and verified against its digest.

    ``ledger_id`` and ``entry_id`` say where it is; ``lac`` is the last add confirmed the
    writer knew when it wrote this entry; ``length`` is the ledger's length in bytes up to
    and including it; ``payload`` is the data, a memoryview of the bytes received (no copy),
    and :attr:`data` the same as ``bytes``. A named tuple: cheap to make, one per entry read.
    """

    __slots__ = ()
