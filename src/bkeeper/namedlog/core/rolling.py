"""When a log's writer rolls to a new ledger and how often its timer looks, decided purely
(the writer, :mod:`bkeeper.namedlog.writer`, reads the clock and its ledger and acts).

A ledger is due to roll once it holds ``roll_bytes``, or holds entries and is ``roll_age_ms``
old (a ledger with no entry never rolls by age: an idle writer adds no ledgers). The timer
ticks every ``roll_age_ms`` / 2, within ``TICK_S_MIN`` .. ``TICK_S_MAX``. A writer opened with
a term is overtaken once the log records a newer one.
"""

from __future__ import annotations

from bkeeper.namedlog.core.config import LogConfig

__all__ = ["TICK_S_MAX", "TICK_S_MIN", "overtaken", "roll_due", "tick_s"]

#: The writer's timer ticks every ``roll_age_ms`` / 2, within these bounds (seconds).
TICK_S_MIN = 1.0
TICK_S_MAX = 60.0


def roll_due(config: LogConfig, *, length_bytes: int, has_entries: bool, age_s: float) -> bool:
    """Whether a ledger of ``length_bytes``, ``age_s`` old (``has_entries``: an entry was
    sent to it) is full or old enough to roll."""
    if length_bytes >= config.roll_bytes:
        return True
    if not config.roll_age_ms or not has_entries:
        return False
    return age_s * 1000.0 >= config.roll_age_ms


def tick_s(config: LogConfig) -> float:
    """Seconds between two ticks of a writer's timer."""
    if not config.roll_age_ms:
        return TICK_S_MAX
    return min(TICK_S_MAX, max(TICK_S_MIN, config.roll_age_ms / 2000))


def overtaken(term: int | None, log_term: int | None) -> bool:
    """Whether a writer of ``term`` is overtaken by the log's recorded ``log_term``."""
    return term is not None and log_term is not None and log_term > term
