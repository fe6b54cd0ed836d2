"""The state of one writer's add pipeline and the questions it answers: the entries pending
(in entry order), the ensemble and its write sets as bit masks, the bookies failed and down,
the phase; :class:`~bkeeper.client.adding.AddPipeline` adds the events that move it (that
module's doc has the rules). No I/O, no clock.
"""

from __future__ import annotations

from collections import deque

from bkeeper.client.add_effects import PendingAdd
from bkeeper.client.add_states import TRANSITIONS, Event, Phase
from bkeeper.client.distribution import write_sets

__all__ = ["AddWindow"]


class AddWindow:
    """The pending window of one writer: its state (module doc)."""

    def __init__(
        self,
        ledger_id: int,
        ensemble: tuple[str, ...],
        write_quorum: int,
        ack_quorum: int,
        *,
        pending_max: int,
        add_timeout_s: float,
        tick_interval_s: float,
        ensemble_changes_max: int,
        now: float,
        degraded_writes: bool = True,
        degraded_retry_interval_s: float = 3.0,
    ) -> None:
        self.ledger_id = ledger_id
        self._qa = ack_quorum
        self._write_sets = write_sets(len(ensemble), write_quorum)
        self._ws_count = len(self._write_sets)
        #: bookies down (degraded writes): not sent to, not waited for (rule 5)
        self._down: frozenset[str] = frozenset()
        self._set_ensemble(ensemble)
        self.pending_max = pending_max
        self._timeout_s = add_timeout_s
        self._interval_s = tick_interval_s
        self._tick_due = now + tick_interval_s
        self._changes_max = ensemble_changes_max
        self._changes = 0
        self._pending: deque[PendingAdd] = deque()
        self._phase = Phase.OPEN
        self.error: BaseException | None = None
        self._failed: set[str] = set()
        self._failed_in_change: set[str] = set()
        #: bookies that were down since the last OPEN: reported when a change replaced them
        self._healed: set[str] = set()
        self._degraded_writes = degraded_writes
        self._retry_s = degraded_retry_interval_s
        self._retry_due = float("inf")  # the next search for replacements (degraded)
        self.last_add_pushed = -1
        self.last_add_confirmed = -1
        self.length = 0
        self.confirmed_length = 0

    # -- state ---------------------------------------------------------------------------
    @property
    def phase(self) -> Phase:
        return self._phase

    @property
    def ensemble(self) -> tuple[str, ...]:
        return self._ensemble

    @property
    def down(self) -> frozenset[str]:
        """The bookies of the ensemble that are down (degraded writes; rule 5)."""
        return self._down

    @property
    def live_ensemble(self) -> tuple[str, ...]:
        """The bookies of the ensemble that are not down."""
        return tuple(b for b in self._ensemble if b not in self._down)

    @property
    def pending(self) -> tuple[PendingAdd, ...]:
        return tuple(self._pending)

    def __len__(self) -> int:
        return len(self._pending)

    @property
    def full(self) -> bool:
        return len(self._pending) >= self.pending_max

    def write_set(self, entry_id: int) -> tuple[int, ...]:
        return self._write_sets[entry_id % self._ws_count]

    @property
    def write_sets(self) -> list[tuple[int, ...]]:
        """The positions to send to: entry ``e`` goes to ``write_sets[e % len(write_sets)]``
        (its write set, less the positions down)."""
        return self._send_sets

    def acked_by(self, add: PendingAdd) -> set[str]:
        """The bookies of the current ensemble that acknowledged ``add``."""
        return {b for p, b in enumerate(self._ensemble) if add.acked >> p & 1}

    def _set_ensemble(self, ensemble: tuple[str, ...]) -> None:
        self._ensemble = ensemble
        self._ws_bookies = tuple(tuple(ensemble[p] for p in ws) for ws in self._write_sets)
        self._ws_masks = tuple(sum(1 << p for p in ws) for ws in self._write_sets)
        self._bits = {bookie: 1 << position for position, bookie in enumerate(ensemble)}
        self._down = self._down.intersection(ensemble)
        down = {p for p, bookie in enumerate(ensemble) if bookie in self._down}
        self._send_sets = [tuple(p for p in ws if p not in down) for ws in self._write_sets]

    def _move(self, event: Event) -> None:
        following = TRANSITIONS[self._phase].get(event)
        if following is None:
            raise AssertionError(f"add pipeline: {event.value} while {self._phase.value}")
        self._phase = following

    def _short_write_set(self, down: frozenset[str]) -> tuple[str, ...] | None:
        """A write set with fewer than ``Qa`` bookies not in ``down``, or None."""
        for bookies in self._ws_bookies:
            if self._up_in(bookies, down) < self._qa:
                return bookies
        return None

    @staticmethod
    def _up_in(bookies: tuple[str, ...], down: frozenset[str]) -> int:
        return sum(1 for bookie in bookies if bookie not in down)

    def resend_target(self, entry_id: int, bookie: str) -> tuple[PendingAdd, int] | None:
        """Entry ``entry_id`` and ``bookie``'s position if the entry is still pending and
        ``bookie`` is in its write set (a connection to it came up late)."""
        pending = self._pending
        if not pending or bookie not in self._ensemble:
            return None
        index = entry_id - pending[0].entry_id
        if index < 0 or index >= len(pending) or bookie in self._down:
            return None
        position = self._ensemble.index(bookie)
        if position not in self.write_set(entry_id):
            return None
        return pending[index], position

    def _take_completed(self) -> list[PendingAdd]:
        pending, qa = self._pending, self._qa
        done = []
        while pending and pending[0].acked.bit_count() >= qa:
            done.append(pending.popleft())
        if done:
            last = done[-1]
            self.last_add_confirmed = last.entry_id
            self.confirmed_length = last.length
        return done
