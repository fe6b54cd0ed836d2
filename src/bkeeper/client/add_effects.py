"""What the add pipeline holds and says: an entry in it (:class:`PendingAdd`), what the shell
is to do (:class:`Effects`), one round of an ensemble change (:class:`Replacement`), and the
error a bookie's refusal of an add fails the pipeline with (:func:`refused_add_error`).
Pure data: :class:`~bkeeper.client.adding.AddPipeline` makes them, its shell acts on them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from bkeeper.client.refusal import eua_answered
from bkeeper.common.errors import (
    BKeeperError,
    EntryTooLargeError,
    LedgerFencedError,
    UnauthorizedAccessError,
)
from bkeeper.wire.codes import StatusCode

__all__ = [
    "CHANGE_ENSEMBLE",
    "FIND_REPLACEMENT",
    "NOTHING",
    "Effects",
    "PendingAdd",
    "Replacement",
    "refused_add_error",
]


class PendingAdd:
    """One entry in the pipeline. ``data`` is what the shell sends (the same bytes to every
    bookie); ``future`` is the shell's, never touched here (None for an entry whose caller
    waits on a later entry's future: completion is in entry order). ``acked``: the ensemble
    positions that acknowledged it, one bit each (an int, not a set: one per entry)."""

    __slots__ = ("acked", "data", "entry_id", "future", "length", "sent_at")

    def __init__(self, entry_id: int, length: int, data: bytes, future: Any, now: float) -> None:
        self.entry_id = entry_id
        self.length = length
        self.data = data
        self.future = future
        self.sent_at = now
        self.acked = 0


@dataclass(frozen=True, slots=True)
class Effects:
    """What the shell is to do, in this order: fail, send, complete, change the ensemble."""

    #: completed entries, in entry order (the LAC is the last one's id)
    complete: tuple[PendingAdd, ...] = ()
    #: (entry, ensemble positions) to send to
    send: tuple[tuple[PendingAdd, tuple[int, ...]], ...] = ()
    #: entries failed with ``error``
    fail: tuple[PendingAdd, ...] = ()
    error: BaseException | None = None
    #: start an ensemble change (ask :meth:`AddPipeline.begin_replacement`)
    change_ensemble: bool = False
    #: (bookie, entry id) of the acknowledgements that timed out, for the log
    timed_out: tuple[tuple[str, int], ...] = ()
    #: degraded: look for replacements of :attr:`AddPipeline.down` (report the outcome to
    #: :meth:`AddPipeline.replacement_search_done`)
    find_replacement: bool = False
    #: bookies that went down now (degraded writes began or lost one more bookie), for the log
    went_down: tuple[str, ...] = ()
    #: the bookies down that were replaced or taken back: degraded writes ended, for the log
    healed: tuple[str, ...] = ()
    #: bookies down taken back (they answer again), for the log
    back: tuple[str, ...] = ()


NOTHING: Final = Effects()
CHANGE_ENSEMBLE: Final = Effects(change_ensemble=True)
FIND_REPLACEMENT: Final = Effects(find_replacement=True)


@dataclass(frozen=True, slots=True)
class Replacement:
    """One round of an ensemble change: replace ``failed``, starting at ``first_entry``,
    choosing among bookies not in ``exclude`` (every bookie that failed this writer since
    the change began: a replacement that fails at once is not chosen again in a loop)."""

    failed: frozenset[str]
    first_entry: int
    exclude: frozenset[str]


def refused_add_error(
    ledger_id: int, bookie: str, status: StatusCode, entry_id: int, sent_bytes: int
) -> BKeeperError | None:
    """The error that fails the whole pipeline for ``bookie``'s error ``status`` to the add
    of ``entry_id`` (``sent_bytes`` sent; rule 6 of :mod:`~bkeeper.client.adding`), or None
    when the bookie has failed and is to be replaced."""
    if status is StatusCode.EFENCED:
        return LedgerFencedError(f"ledger {ledger_id} is fenced")
    if status is StatusCode.EUA:
        return UnauthorizedAccessError(eua_answered(f"ledger {ledger_id} on bookie {bookie}"))
    if status is StatusCode.EBADREQ:
        return EntryTooLargeError(
            f"ledger {ledger_id}: bookie {bookie} refused entry {entry_id} ({sent_bytes}"
            " bytes sent) as a bad request (EBADREQ), its answer to a frame over its"
            " max_frame_bytes: lower the client's max_frame_bytes to the bookies'; the"
            " writer stops (an entry id cannot be skipped)"
        )
    return None
