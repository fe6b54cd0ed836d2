"""Retention of a named log: which sealed ledgers go, decided purely (the pass that gathers
what the decision needs and truncates is :meth:`LogHandle.retain
<bkeeper.namedlog.handle.LogHandle.retain>`).

A log's writer runs a pass when it opens, at each roll and on its timer
(:mod:`bkeeper.namedlog.writer`); Spark's sink after each batch it appends. The decision
(:func:`retained_from`), for ``LogConfig``'s ``retention_*`` settings (the log's stored
settings over the process's, :class:`~bkeeper.namedlog.core.config.LogSettings`):

* ``retention_age_ms``: a ledger goes when every record of it is older than the age, known
  from the next ledger's creation time (ledger i's records were all appended before ledger
  i + 1 was listed);
* ``retention_bytes``: the sealed ledgers beyond the newest ``retention_bytes`` of them go;
* ``retention_consumed``: the ledgers every subscription has consumed past go (a log with no
  subscription keeps them): those before the ledger the slowest subscription reads next. That
  ledger stays even when the subscription has read all of it: its position names it, and a
  position before the log's first ledger reads as records lost (``LogTruncatedError``);

and never a ledger at or after ``limit``, the first that may still take entries (the writer's
current ledger, or one it is still sealing): only sealed ledgers go. Ages come from the caller's
:class:`~bkeeper.common.clock.Clock`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from bkeeper.namedlog.core.config import LogConfig
from bkeeper.namedlog.core.log_metadata import LogLedger
from bkeeper.namedlog.core.subscription_state import SubscriptionState

__all__ = ["consumed_before", "retained_from", "retention_on"]


def retention_on(config: LogConfig) -> bool:
    return bool(config.retention_age_ms or config.retention_bytes or config.retention_consumed)


def retained_from(
    ledgers: Sequence[LogLedger],
    config: LogConfig,
    *,
    now_ms: int,
    limit: int,
    lengths: Mapping[int, int] | None = None,
    consumed: int | None = None,
) -> int:
    """The index of the first ledger to keep (0: none goes). ``lengths``: the bytes of the
    sealed ledgers (needed for ``retention_bytes``); ``consumed``: how many ledgers at the
    head of the list every subscription has consumed past (None: no subscription)."""
    keep_from = 0
    if config.retention_age_ms:
        horizon = now_ms - config.retention_age_ms
        for index in range(len(ledgers) - 1):
            if ledgers[index + 1].ctime_ms < horizon:
                keep_from = index + 1
    if config.retention_bytes and lengths is not None:
        total = 0
        for index in range(min(limit, len(ledgers)) - 1, -1, -1):  # sealed, newest first
            total += lengths.get(ledgers[index].ledger_id, 0)
            if total > config.retention_bytes:
                keep_from = max(keep_from, index + 1)
                break
    if config.retention_consumed and consumed is not None:
        keep_from = max(keep_from, consumed)
    return max(0, min(keep_from, limit, len(ledgers) - 1))


def consumed_before(
    ledgers: Sequence[LogLedger], states: Sequence[SubscriptionState]
) -> int | None:
    """How many ledgers at the head of ``ledgers`` every subscription has consumed past
    (None: no subscription)."""
    if not states:
        return None
    needed = min(state.resume_from.ledger_id for state in states)
    return sum(1 for ledger in ledgers if ledger.ledger_id < needed)
