"""The add pipeline's phases, the events that move them and its transition table
(:class:`~bkeeper.client.adding.AddPipeline`'s rules are in :mod:`~bkeeper.client.adding`).

Phases and the events that move them (:data:`TRANSITIONS`; a pair not in it is a bug, raised
as ``AssertionError``). APPEND and ACK never change the phase, so the hot path skips the
lookup (APPEND checks for FAILED itself).

=========  ======  ====  ====  =============  ========  ========  ===========  =====  ====  ======
phase      APPEND  ACK   TICK  BOOKIE_FAILED  REPLACED  NO_SPARE  CHANGE_DONE  RETRY  BACK  FATAL
=========  ======  ====  ====  =============  ========  ========  ===========  =====  ====  ======
OPEN       OPEN    OPEN  OPEN  CHANGING       -         -         -            -      -     FAILED
CHANGING   CHG     CHG   CHG   CHANGING       CHANGING  DEGRADED  OPEN         -      -     FAILED
DEGRADED   DEG     DEG   DEG   CHANGING       -         -         -            CHG    OPEN  FAILED
FAILED     -       FAIL  FAIL  FAILED         FAILED    FAILED    FAILED       -      -     FAILED
=========  ======  ====  ====  =============  ========  ========  ===========  =====  ====  ======

(NO_SPARE: a change found no replacement and degraded writes can go on; RETRY: replacements
for the bookies down were found; BACK: every bookie down answers again. BOOKIE_FAILED for a
bookie already down is no event, nor is taking back some of the bookies down.)
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Final

__all__ = ["TRANSITIONS", "Event", "Phase"]


class Phase(enum.Enum):
    OPEN = "open"
    CHANGING = "changing"
    DEGRADED = "degraded"
    FAILED = "failed"


class Event(enum.Enum):
    APPEND = "append"
    ACK = "ack"
    TICK = "tick"
    BOOKIE_FAILED = "bookie failed"
    REPLACED = "replaced"
    NO_SPARE = "no spare"
    CHANGE_DONE = "change done"
    RETRY = "retry"
    BACK = "back"
    FATAL = "fatal"


_O, _C, _D, _F = Phase.OPEN, Phase.CHANGING, Phase.DEGRADED, Phase.FAILED
TRANSITIONS: Final[Mapping[Phase, Mapping[Event, Phase]]] = {
    _O: {
        Event.APPEND: _O,
        Event.ACK: _O,
        Event.TICK: _O,
        Event.BOOKIE_FAILED: _C,
        Event.FATAL: _F,
    },
    _C: {
        Event.APPEND: _C,
        Event.ACK: _C,
        Event.TICK: _C,
        Event.BOOKIE_FAILED: _C,
        Event.REPLACED: _C,
        Event.NO_SPARE: _D,
        Event.CHANGE_DONE: _O,
        Event.FATAL: _F,
    },
    _D: {
        Event.APPEND: _D,
        Event.ACK: _D,
        Event.TICK: _D,
        Event.BOOKIE_FAILED: _C,
        Event.RETRY: _C,
        Event.BACK: _O,
        Event.FATAL: _F,
    },
    _F: {
        Event.ACK: _F,
        Event.TICK: _F,
        Event.BOOKIE_FAILED: _F,
        Event.REPLACED: _F,
        Event.NO_SPARE: _F,
        Event.CHANGE_DONE: _F,
        Event.FATAL: _F,
    },
}
