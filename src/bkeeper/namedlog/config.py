"""How named logs store their ledgers, roll and tail (:class:`LogConfig`), and the names of
the two ends a reader can start from (``EARLIEST``, ``LATEST``)."""

from __future__ import annotations

from dataclasses import dataclass

from bkeeper.common.validate import check_non_negative_ints, check_positive_ints, check_quorum

__all__ = ["EARLIEST", "LATEST", "LogConfig"]

#: A reader start: the first record still in the log.
EARLIEST = "earliest"
#: A reader start: the records appended from now on (see :mod:`bkeeper.namedlog.walk`).
LATEST = "latest"


@dataclass(frozen=True)
class LogConfig:
    """How logs store their ledgers, roll and tail.

    ``roll_bytes`` / ``roll_age_ms``: a writer starts a new ledger once the current one holds
    this many payload bytes or is this old (0: never by age). ``tail_poll_ms``: the longest a
    tailing reader waits before it re-reads the ledger list. ``retention_age_ms`` /
    ``retention_bytes`` (0: keep everything): at each roll the writer truncates whole sealed
    ledgers whose records are all older than the age, or that lie beyond the newest
    ``retention_bytes`` of sealed ledgers. ``retention_consumed``: also truncate, at each
    roll, the sealed ledgers that every subscription of the log has consumed past (a log
    with no subscription keeps them); the age and size limits still apply as caps, and a
    subscription left behind by one is told its records are gone
    (:mod:`bkeeper.namedlog.consumer`).
    """

    ensemble_size: int = 3
    write_quorum: int = 3
    ack_quorum: int = 2
    digest: str = "crc32c"
    password: bytes = b""
    roll_bytes: int = 256 * 1024 * 1024
    roll_age_ms: int = 0
    tail_poll_ms: int = 1_000
    metadata_retries_max: int = 20
    retention_age_ms: int = 0
    retention_bytes: int = 0
    retention_consumed: bool = False

    def __post_init__(self) -> None:
        check_quorum(self.ensemble_size, self.write_quorum, self.ack_quorum)
        check_positive_ints(self, "roll_bytes", "tail_poll_ms", "metadata_retries_max")
        check_non_negative_ints(self, "roll_age_ms", "retention_age_ms", "retention_bytes")
