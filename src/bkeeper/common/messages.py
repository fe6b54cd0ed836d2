"""Small pure helpers for the one-line messages people read.

- :func:`in_context` puts what was being done before an error's message, naming its subject
  once: ``reading ledger 999`` and ``ledger 999: no metadata`` make
  ``reading ledger 999: no metadata``, not ``reading ledger 999: ledger 999: no metadata``.
- :func:`did_you_mean` finds the known names closest to a misspelled one (difflib, as the
  Spark options do), for "unknown option 'x': did you mean 'y'?".
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["CLOSE_CUTOFF", "did_you_mean", "in_context"]

#: How alike (difflib's ratio, 0..1) a known name must be to a misspelled one to be offered.
CLOSE_CUTOFF = 0.75


def in_context(what: str, message: str) -> str:
    """``what: message``, without the subject twice when ``message`` starts with the subject
    ``what`` ends with (``ledger 7``: ``ledger 7: no metadata``)."""
    subject, colon, rest = message.partition(": ")
    if colon and subject and (what == subject or what.endswith(" " + subject)):
        return f"{what}: {rest}"
    return f"{what}: {message}"


def did_you_mean(name: str, known: Iterable[str], n: int = 1) -> list[str]:
    """Up to ``n`` of ``known`` closest to ``name``, closest first, compared without case;
    empty when none is close enough (:data:`CLOSE_CUTOFF`)."""
    spelled = {k.lower(): k for k in known}
    close = difflib.get_close_matches(name.lower(), list(spelled), n=n, cutoff=CLOSE_CUTOFF)
    return [spelled[c] for c in close]
