"""The scrub: read back every entry a bookie stores in entry logs and check its checksum.

A disk can damage data long after it was written (bit rot, a bad sector, a stray write):
nothing notices until someone reads the entry, and an entry nobody reads again may be the
only good copy left when the other replicas go. :func:`scrub` reads every stored entry of
every ledger (:meth:`~bkeeper.storage.Storage.check_entries`, a run of records per read),
paced to ``bytes_per_s`` after every run of records (so a stop, or the pace, never
waits for a whole ledger); each damaged entry is marked (its ledger goes into limbo and the
entry answers "unknown") for the data integrity check to copy back from the other replicas
(:mod:`bkeeper.autorecovery.scrubbing` runs both in a bookie). Blocking: run it in a thread.
Entries still in the write cache or the journal only are not read (their record is written
by the next flush).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from bkeeper.common.clock import Clock, default_clock
from bkeeper.common.errors import NoSuchLedgerError
from bkeeper.storage.storage import Storage

__all__ = ["ScrubReport", "scrub"]


@dataclass
class ScrubReport:
    """One pass: ledgers checked, bytes read, the damaged entries found (ledger -> ids),
    whether it was stopped before the end, and how long it took."""

    ledgers: int = 0
    bytes_read: int = 0
    damaged: dict[int, list[int]] = field(default_factory=dict)
    stopped: bool = False
    seconds: float = 0.0


def scrub(
    storage: Storage,
    bytes_per_s: int,
    stop: threading.Event | None = None,
    clock: Clock | None = None,
) -> ScrubReport:
    """One pass over every ledger of ``storage`` (module doc), until the end or ``stop``;
    ``clock`` paces it."""
    if bytes_per_s <= 0:
        raise ValueError(f"bytes_per_s: must be positive, got {bytes_per_s}")
    stopping = stop or threading.Event()
    report = ScrubReport()
    now = (clock if clock is not None else default_clock()).monotonic
    start = now()
    before = 0  # bytes read by the ledgers checked before this one

    def paced(read: int) -> bool:
        """After each run of entries: wait while ahead of the pace; False once stopped."""
        ahead = (before + read) / bytes_per_s - (now() - start)
        if ahead > 0:
            stopping.wait(ahead)
        report.stopped = stopping.is_set()
        return not report.stopped

    for ledger_id in storage.ledger_ids():
        if stopping.is_set():
            report.stopped = True
            break
        try:
            damaged, read = storage.check_entries(ledger_id, paced)
        except NoSuchLedgerError:
            continue  # deleted meanwhile
        report.ledgers += 1
        report.bytes_read += read
        before = report.bytes_read
        if damaged:
            report.damaged[ledger_id] = damaged
        if report.stopped:
            break
    report.seconds = now() - start
    return report
