"""What opening the engine did (:class:`OpenReport`), and the journal replay's progress lines.

An open after a clean stop (:meth:`bkeeper.storage.Storage.close`: the checkpoint says so)
reads no journal file and scans no entry log: it loads the index and reads each entry log's
ledgers map. After a crash it replays the journals from the last checkpoint's marks (bounded
by how often checkpoints run: ``BookieConfig.checkpoint_interval_ms``, and
``StorageConfig.checkpoint_journal_bytes`` of journal) and scans the entry log that was being
written (it has no ledgers map). :class:`ReplayProgress` logs where a replay is, at most
every ``REPLAY_PROGRESS_INTERVAL_S``, so an operator waiting for a bookie sees it move.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from bkeeper.storage.journal_replay import ReplayOutcome

__all__ = ["REPLAY_PROGRESS_INTERVAL_S", "OpenReport", "ReplayProgress", "megabytes"]

log = logging.getLogger("bkeeper.storage.recovery")

#: The least time between two progress lines of one replay.
REPLAY_PROGRESS_INTERVAL_S = 2.0


def megabytes(count: int) -> str:
    """``count`` bytes in MB (10^6), one decimal below 10 MB."""
    mb = count / 1e6
    return f"{mb:.1f} MB" if mb < 10 else f"{mb:,.0f} MB"


@dataclass(frozen=True)
class OpenReport:
    """The work one :meth:`~bkeeper.storage.Storage.open` did.

    ``clean_stop``: the last stop was clean (nothing to replay, no log to scan);
    ``index_entries``: entry locations loaded from the index; ``entry_logs``: logs found;
    ``entry_logs_scanned`` and ``entry_log_bytes_scanned``: those read whole because they
    had no ledgers map (the process died while writing them); ``journal_files``,
    ``journal_bytes``, ``journal_records``: what replay read and applied; ``seconds``: the
    whole open, its checkpoint included.
    """

    clean_stop: bool
    index_entries: int
    entry_logs: int
    entry_logs_scanned: int
    entry_log_bytes_scanned: int
    journal_files: int
    journal_bytes: int
    journal_records: int
    seconds: float


class ReplayProgress:
    """The replay's ``progress`` callback: a line when it starts (with what it has to read),
    then one at most every ``interval_s`` (``now``: monotonic seconds)."""

    def __init__(
        self,
        now: Callable[[], float],
        interval_s: float = REPLAY_PROGRESS_INTERVAL_S,
        emit: Callable[[str], None] = log.info,
    ) -> None:
        self._now = now
        self._interval_s = interval_s
        self._emit = emit
        self._last_s: float | None = None
        self.lines = 0

    def __call__(self, outcome: ReplayOutcome) -> None:
        total = outcome.bytes_total
        if not total:
            return
        now = self._now()
        if self._last_s is None:
            self._last_s = now
            self._say(f"replaying journal: {megabytes(total)} from the checkpoint marks")
            return
        if now - self._last_s < self._interval_s:
            return
        self._last_s = now
        done = min(outcome.bytes, total)
        percent = 100 * done // total
        self._say(
            f"replaying journal: {percent}% ({megabytes(done)} of {megabytes(total)}, "
            f"{outcome.records:,} records)"
        )

    def _say(self, line: str) -> None:
        self.lines += 1
        self._emit(line)
