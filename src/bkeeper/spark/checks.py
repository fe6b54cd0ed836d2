"""What a read checks at ``load()`` beyond its options: the logs it names exist, or its
``logPattern`` matches some (pure code; ``BKeeperDataSource.schema()`` lists the cluster's
log names once and calls :func:`check_logs`).

Before, a missing log was found at the action (10.8 s later on a data engineer's cluster)
as ``no log named 'ordrs'``; now ``load()`` fails with ``log 'ordrs' does not exist; did you
mean 'orders'? ...``. A stream fails at ``load()`` too, as Kafka's source fails on a missing
topic: a stream waiting for a log that a typo named would wait for ever. Logs created after a
``logPattern`` stream starts still join it; the pattern must match one log at ``load()``.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from bkeeper.common.errors import LogNotFoundError
from bkeeper.spark.options import SourceOptions

__all__ = ["SHOWN_MAX", "check_logs"]

#: Log names shown in an error, at most (the closest to the name or pattern given).
SHOWN_MAX = 5
_CLOSE_CUTOFF = 0.75


def check_logs(options: SourceOptions, names: Sequence[str]) -> None:
    """Refuse a read whose named logs are not all among ``names`` (the cluster's logs), or
    whose ``logPattern`` matches none of them."""
    if options.log_pattern is not None:
        if not any(options.matches(name) for name in names):
            raise LogNotFoundError(_no_match(options.log_pattern, names))
        return
    existing = set(names)
    missing = [name for name in dict.fromkeys(options.logs) if name not in existing]
    if missing:
        raise LogNotFoundError(_missing(missing, names))


def _missing(missing: list[str], names: Sequence[str]) -> str:
    name = missing[0]
    also = f" (nor does {_quoted(missing[1:])})" if len(missing) > 1 else ""
    create = f"bkeeper log create {name}"
    close = difflib.get_close_matches(name, names, n=3, cutoff=_CLOSE_CUTOFF)
    if close:
        return (
            f"log {name!r} does not exist{also}; did you mean {_quoted(close, 'or')}? "
            f"Or create it with {create}"
        )
    return f"log {name!r} does not exist{also}: create it with {create} ({_logs(name, names)})"


def _no_match(pattern: str, names: Sequence[str]) -> str:
    return (
        f"logPattern {pattern!r} matches no log (it must match a whole name; "
        f"{_logs(pattern, names)})"
    )


def _logs(near: str, names: Sequence[str]) -> str:
    """A few of the cluster's log names, those closest to ``near`` first."""
    if not names:
        return "this cluster has no logs yet"
    shown = difflib.get_close_matches(near, names, n=SHOWN_MAX, cutoff=0.0)
    more = len(names) - len(shown)
    if more:
        return f"the logs are {', '.join(map(repr, shown))} and {more} more"
    return f"the logs are {_quoted(shown)}"


def _quoted(names: Sequence[str], last: str = "and") -> str:
    quoted = [repr(name) for name in names]
    if len(quoted) == 1:
        return quoted[0]
    return f"{', '.join(quoted[:-1])} {last} {quoted[-1]}"
