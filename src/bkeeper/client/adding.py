"""The add pipeline of one ledger writer, as a pure state machine.

:class:`AddPipeline` is fed with what happens (an entry appended, a bookie's answer, a bookie
lost, the time) and returns what to do (:class:`Effects`: complete these entries, send these
to these ensemble positions, fail these with this error, start an ensemble change). It does no
I/O and reads no clock: :class:`~bkeeper.client.write_handle.WriteHandle` performs its effects.

Rules (BookKeeper's):

1. Entry ids are consecutive from 0. Entry ``e`` goes to the write set ``(e + i) mod E``,
   ``i < Qw``, of the current ensemble.
2. An acknowledgement counts only from a bookie of the entry's write set, and once per bookie.
   An entry completes once ``Qa`` distinct bookies of its write set acknowledged it AND every
   lower entry completed: completion is in entry order; the LAC is the last completed entry.
3. A bookie that answers an add still pending with an error, whose connection is lost, that
   cannot be reached, or that has not acknowledged an entry ``add_timeout_s`` after it was sent,
   has failed: the phase becomes CHANGING and the shell is told to change the ensemble.
   Its replacement is never a bookie that failed during this change (the change ends at
   CHANGE_DONE); bookies that failed before are the placement's business (the client-wide
   quarantine: avoided, but taken back when no other is left).
4. While CHANGING no entry completes. The shell asks :meth:`AddPipeline.begin_replacement`
   which bookies to replace (from LAC + 1; at most ``ensemble_changes_max`` changes), writes the
   new segment, and reports :meth:`AddPipeline.replaced`: acknowledgements from the replaced
   bookies are forgotten, every pending entry's clock restarts and it is re-sent to the new
   bookies of its write set. It repeats while bookies failed meanwhile, then reports
   :meth:`AddPipeline.change_done`: OPEN again, and what has ``Qa`` acknowledgements completes.
5. Degraded writes (``degraded_writes``, Apache BookKeeper's ``delayEnsembleChange`` for the
   case with no spare): when a change finds no replacement (:meth:`AddPipeline.no_replacement`)
   and every write set still has ``Qa`` bookies that are not failed, the failed ones are
   *down*: adds are no longer sent to them, their missing acks are not timed out, and entries
   complete with ``Qa`` acks from the others (the durability contract). Every
   ``degraded_retry_interval_s`` the shell is told to look for replacements
   (``Effects.find_replacement``), without stopping completions; when it found some
   (:meth:`AddPipeline.replacement_search_done`) the change runs as in rule 4 and ends OPEN.
   A bookie down that answers again (registered writable and reachable: restarted) is taken
   back instead (:meth:`AddPipeline.taken_back`), in its place, with no new segment, as
   BookKeeper's delayed change keeps it in the ensemble: adds go to it again, the pending
   ones too; it lacks the entries written while it was down (they have ``Qa`` copies; their
   Qw-th is auto-recovery's, as for any bookie that lost entries).
   A write set left with fewer than ``Qa`` bookies up (or degraded writes off) fails the
   pipeline with the change's ``NotEnoughBookiesError``. A bookie down is not failed again.
6. EFENCED from a bookie (for a pending entry) fails the pipeline with ``LedgerFencedError``,
   EUA with ``UnauthorizedAccessError``, EBADREQ with ``EntryTooLargeError`` (a bookie
   answers it to a well-formed add whose frame is over its ``max_frame_bytes``: another
   bookie would not take it either, and the entry's id cannot be skipped), a failed ensemble
   change with its error. FAILED is final: every pending entry fails, once; nothing
   completes after; appends are refused.
7. Time during which :meth:`AddPipeline.tick` was not called for longer than its interval
   (the shell's event loop did not run) does not count toward the add timeout: a stopped
   client must not blame its bookies.

Phases and the events that move them: :data:`~bkeeper.client.add_states.TRANSITIONS`, the
table drawn in :mod:`~bkeeper.client.add_states` (a pair not in it is a bug, raised as
``AssertionError``). APPEND and ACK never change the phase, so the hot path skips the lookup
(APPEND checks for FAILED itself).

Limits: at most ``pending_max`` entries in the pipeline (the shell waits while :attr:`full`);
``ensemble_changes_max`` ensemble changes (segments written: a search that found no
replacement is not one); one search for replacements at a time, at most one per
``degraded_retry_interval_s``.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection
from typing import Any

from bkeeper.client.add_effects import (
    CHANGE_ENSEMBLE,
    FIND_REPLACEMENT,
    NOTHING,
    Effects,
    PendingAdd,
    Replacement,
    refused_add_error,
)
from bkeeper.client.add_states import TRANSITIONS, Event, Phase
from bkeeper.client.add_window import AddWindow
from bkeeper.client.config import ClientConfig
from bkeeper.common import bugs
from bkeeper.common.errors import LedgerClosedError, NotEnoughBookiesError
from bkeeper.meta.ledger_metadata import LedgerMetadata
from bkeeper.wire.codes import StatusCode

__all__ = [
    "NOTHING",
    "TRANSITIONS",
    "AddPipeline",
    "Effects",
    "Event",
    "PendingAdd",
    "Phase",
    "Replacement",
]


class AddPipeline(AddWindow):
    """The pending window of one writer and the events that move it (module doc: its
    rules; :class:`~bkeeper.client.add_window.AddWindow`: its state)."""

    @classmethod
    def for_ledger(
        cls, ledger_id: int, meta: LedgerMetadata, config: ClientConfig, now: float
    ) -> AddPipeline:
        """The pipeline of a writer of ``meta`` (its last ensemble), limits from ``config``."""
        return cls(
            ledger_id,
            tuple(meta.last_ensemble),
            meta.write_quorum,
            1 if bugs.ACTIVE and bugs.active("ack-quorum-one") else meta.ack_quorum,
            pending_max=config.pending_adds_max,
            add_timeout_s=config.add_timeout_ms / 1000.0,
            tick_interval_s=config.timeout_check_interval_ms / 1000.0,
            ensemble_changes_max=config.ensemble_changes_max,
            now=now,
            degraded_writes=config.degraded_writes,
            degraded_retry_interval_s=config.degraded_retry_interval_ms / 1000.0,
        )

    # -- events --------------------------------------------------------------------------
    def append(
        self, entry_id: int, length: int, data: bytes, future: Any, now: float
    ) -> tuple[int, ...]:
        """Entry ``entry_id`` (``last_add_pushed + 1``; ``length`` bytes in the ledger up to
        it) enters the pipeline; the ensemble positions to send it to."""
        # APPEND never changes the phase (the table): no lookup on this hot path.
        if self._phase is Phase.FAILED:
            raise self.error or AssertionError("add pipeline failed without an error")
        if entry_id != self.last_add_pushed + 1:
            raise AssertionError(f"entry {entry_id} appended after {self.last_add_pushed}")
        self.last_add_pushed = entry_id
        self.length = length
        self._pending.append(PendingAdd(entry_id, length, data, future, now))
        return self._send_sets[entry_id % self._ws_count]

    def append_many(
        self, first_entry_id: int, lengths: list[int], datas: list[bytes], future: Any, now: float
    ) -> None:
        """:meth:`append` for consecutive entries from ``first_entry_id`` (``lengths[i]``
        bytes in the ledger up to each), in one call; ``future`` goes with the last one (the
        others complete before it). Their write sets: :attr:`write_sets`."""
        if self._phase is Phase.FAILED:
            raise self.error or AssertionError("add pipeline failed without an error")
        if first_entry_id != self.last_add_pushed + 1:
            raise AssertionError(f"entry {first_entry_id} appended after {self.last_add_pushed}")
        if not datas:
            return
        last = first_entry_id + len(datas) - 1
        adds = [
            PendingAdd(entry_id, length, data, None, now)
            for entry_id, length, data in zip(
                range(first_entry_id, last + 1), lengths, datas, strict=True
            )
        ]
        adds[-1].future = future
        self._pending.extend(adds)
        self.last_add_pushed = last
        self.length = lengths[-1]

    def ack(self, bookie: str, entry_id: int) -> list[PendingAdd] | None:
        """``bookie`` acknowledged ``entry_id``; the entries that completed, if any."""
        done, _ = self.ack_all(bookie, [(StatusCode.EOK, self.ledger_id, entry_id)])
        return done or None

    def ack_all(
        self, bookie: str, answers: list[tuple[StatusCode, int, int]]
    ) -> tuple[list[PendingAdd], int]:
        """:meth:`ack` for ``bookie``'s answers ``(status, ledger id, entry id)`` in order (the
        ledger id is not looked at: the connection routed them here), up to the first that is
        not EOK: the entries that completed, and that answer's index (``len(answers)`` if
        none). The shell gives the rest, from that index, to :meth:`error_answer` and
        :meth:`ack` one by one. One call per batch of answers: the hot path of a writer."""
        completed: list[PendingAdd] = []
        pending = self._pending
        bit = self._bits.get(bookie, 0)
        eok = StatusCode.EOK
        if not bit or not pending:  # not in the ensemble (any more), or nothing pending
            for index_in_batch, answer in enumerate(answers):
                if answer[0] is not eok:
                    return completed, index_in_batch
            return completed, len(answers)
        masks, ws_count, qa = self._ws_masks, self._ws_count, self._qa
        first = pending[0].entry_id
        count = len(pending)
        for index_in_batch, (status, _, entry_id) in enumerate(answers):
            if status is not eok:
                return completed, index_in_batch
            index = entry_id - first
            if index < 0 or index >= count or not masks[entry_id % ws_count] & bit:
                continue  # completed already, failed, or not its write set
            add = pending[index]
            acked = add.acked = add.acked | bit
            if index == 0 and acked.bit_count() >= qa and self._phase is not Phase.CHANGING:
                completed += self._take_completed()
                if not pending:
                    first = count = 0
                else:
                    first = pending[0].entry_id
                    count = len(pending)
        return completed, len(answers)

    def ack_run(self, bookie: str, first_entry_id: int, count: int) -> list[PendingAdd]:
        """:meth:`ack` for ``bookie``'s EOK answers to the ``count`` entries from
        ``first_entry_id``: one bit set per pending entry of the run, no tuple per answer.
        The entries that completed."""
        pending = self._pending
        bit = self._bits.get(bookie, 0)
        if not bit or not pending:
            return []
        head = pending[0].entry_id
        start = max(first_entry_id, head) - head
        stop = min(first_entry_id + count - head, len(pending))
        if start >= stop:
            return []
        masks = self._ws_masks
        if len(masks) == 1:  # E == Qw
            if masks[0] & bit:
                for add in itertools.islice(pending, start, stop):
                    add.acked |= bit
        else:
            ws_count = self._ws_count
            for add in itertools.islice(pending, start, stop):
                if masks[add.entry_id % ws_count] & bit:
                    add.acked |= bit
        if (
            start == 0
            and self._phase is not Phase.CHANGING
            and pending[0].acked.bit_count() >= self._qa
        ):
            return self._take_completed()
        return []

    def error_answer(self, bookie: str, status: StatusCode, entry_id: int) -> Effects:
        """``bookie`` answered the add of ``entry_id`` with an error ``status``."""
        pending = self._pending
        if not pending or not pending[0].entry_id <= entry_id <= pending[-1].entry_id:
            return NOTHING  # completed already, or failed
        sent = len(pending[entry_id - pending[0].entry_id].data)
        error = refused_add_error(self.ledger_id, bookie, status, entry_id, sent)
        if error is not None:
            return self.fail(error)
        return self.bookie_failed(bookie)

    def bookie_failed(self, bookie: str) -> Effects:
        """``bookie`` failed (lost, unreachable, erred): replace it."""
        if self._phase is Phase.FAILED or bookie not in self._ensemble or bookie in self._down:
            return NOTHING
        self._failed.add(bookie)
        self._failed_in_change.add(bookie)
        was = self._phase
        self._move(Event.BOOKIE_FAILED)
        return NOTHING if was is Phase.CHANGING else CHANGE_ENSEMBLE

    @property
    def needs_ticks(self) -> bool:
        """Whether :meth:`tick` has anything to do: entries pending (their acks time out), or
        an ensemble change or degraded writes under way (searches for replacements are due
        by it). An idle writer's shell stops ticking (an open ledger nobody appends to costs
        no wake-ups) and calls :meth:`resume_ticks` before it starts again."""
        return bool(self._pending) or self._phase is Phase.CHANGING or self._phase is Phase.DEGRADED

    def resume_ticks(self, now: float) -> None:
        """Ticks start again after a pause while none was needed: the first is due one
        interval after the oldest pending entry was sent, so that a stall of the shell's loop
        between that append and now is still seen as one (rule 7), and the pause is not."""
        first = self._pending[0].sent_at if self._pending else now
        self._tick_due = min(first, now) + self._interval_s

    def tick(self, now: float) -> Effects:
        """The time is ``now`` (called about every ``tick_interval_s``): time out late acks."""
        stalled, self._tick_due = now - self._tick_due, now + self._interval_s
        self._move(Event.TICK)
        if stalled > self._interval_s:
            for add in self._pending:  # rule 6: the stall does not count
                add.sent_at += stalled
            return NOTHING
        if self._phase is Phase.CHANGING or self._phase is Phase.FAILED:
            return NOTHING
        deadline = now - self._timeout_s
        late: dict[str, int] = {}
        bits, down = self._bits, self._down
        for add in self._pending:
            if add.sent_at > deadline:
                break
            for bookie in self._ws_bookies[add.entry_id % self._ws_count]:
                if not add.acked & bits[bookie] and bookie not in down:
                    late.setdefault(bookie, add.entry_id)
        if late:
            for bookie in late:
                self.bookie_failed(bookie)
            return Effects(change_ensemble=True, timed_out=tuple(late.items()))
        if self._phase is Phase.DEGRADED and now >= self._retry_due:
            self._retry_due = float("inf")  # one search at a time: until its outcome
            return FIND_REPLACEMENT
        return NOTHING

    def fail(self, error: BaseException) -> Effects:
        """Fail the pipeline (rule 5): every pending entry fails with ``error``."""
        if self.error is None:
            self.error = error
        self._move(Event.FATAL)
        failed = tuple(self._pending)
        self._pending.clear()
        return Effects(fail=failed, error=error)

    # -- ensemble changes ----------------------------------------------------------------
    def begin_replacement(self) -> Replacement | None:
        """The next round of the change in progress, or None when no bookie is left to replace
        (or the pipeline failed). Raises ``LedgerClosedError`` past ``ensemble_changes_max``."""
        failed = self._failed.intersection(self._ensemble)
        if not failed or self._phase is Phase.FAILED:
            return None
        if self._changes >= self._changes_max:
            raise LedgerClosedError(
                f"ledger {self.ledger_id}: more than {self._changes_max} ensemble changes"
            )
        return Replacement(
            frozenset(failed), self.last_add_confirmed + 1, frozenset(self._failed_in_change)
        )

    def replaced(self, ensemble: tuple[str, ...], now: float) -> Effects:
        """The new segment with ``ensemble`` is written; what to re-send where (rule 4)."""
        old = self._ensemble
        if len(ensemble) != len(old):
            raise AssertionError(f"ensemble of {len(ensemble)} replaces one of {len(old)}")
        self._move(Event.REPLACED)
        self._changes += 1
        gone = set(old).difference(ensemble)
        fresh = {position for position, bookie in enumerate(ensemble) if old[position] != bookie}
        keep = ~sum(1 << position for position in fresh)  # the replaced bookies' acks go
        self._set_ensemble(ensemble)
        self._failed -= gone
        sends = []
        for add in self._pending:
            add.acked &= keep
            add.sent_at = now
            again = tuple(p for p in self.write_set(add.entry_id) if p in fresh)
            if again:
                sends.append((add, again))
        return Effects(send=tuple(sends))

    def change_done(self) -> Effects:
        """The ensemble change ended; what completes now."""
        self._move(Event.CHANGE_DONE)
        if self._phase is not Phase.OPEN:
            return NOTHING
        self._failed_in_change.clear()
        self._retry_due = float("inf")
        healed, self._healed = tuple(sorted(self._healed)), set()
        completed = self._take_completed()
        if not completed and not healed:
            return NOTHING
        return Effects(complete=tuple(completed), healed=healed)

    # -- degraded writes (rule 5) --------------------------------------------------------
    def no_replacement(self, error: NotEnoughBookiesError, now: float) -> Effects:
        """The change found no bookie to replace a failed one (``error``): go on degraded
        if every write set keeps ``Qa`` bookies up and degraded writes are on; else fail."""
        if self._phase is Phase.FAILED:
            return NOTHING
        down = frozenset(self._failed.intersection(self._ensemble))
        if not self._degraded_writes:
            return self.fail(error)
        short = self._short_write_set(down)
        if short is not None:
            return self.fail(
                NotEnoughBookiesError(
                    f"{error}; cannot write degraded either: write set {', '.join(short)} keeps "
                    f"{self._up_in(short, down)} bookies up, the ack quorum is {self._qa}"
                )
            )
        self._move(Event.NO_SPARE)
        went_down = tuple(sorted(down - self._down))
        self._healed |= down  # reported as healed once a change replaces them
        self._down = down
        self._set_ensemble(self._ensemble)  # the positions to send to, less those down
        self._failed_in_change.clear()
        self._retry_due = now + self._retry_s
        return Effects(complete=tuple(self._take_completed()), went_down=went_down)

    def replacement_search_done(self, found: bool, now: float) -> Effects:
        """The search that ``Effects.find_replacement`` asked for ended: ``found``,
        replacements for every bookie down (the change starts), or none yet (the next
        search after ``degraded_retry_interval_s``)."""
        if self._phase is not Phase.DEGRADED:
            return NOTHING  # a change began meanwhile (another bookie failed), or failed
        if not found:
            self._retry_due = now + self._retry_s
            return NOTHING
        self._move(Event.RETRY)
        return CHANGE_ENSEMBLE

    def taken_back(self, bookies: Collection[str], now: float) -> Effects:
        """Of the bookies down, ``bookies`` answer again: adds go to them again (the
        pending ones are sent to them now); OPEN once none is left down (rule 5)."""
        back = self._down.intersection(bookies)
        if self._phase is not Phase.DEGRADED or not back:
            return self.replacement_search_done(False, now)
        self._down -= back
        self._failed -= back
        self._set_ensemble(self._ensemble)
        bits = sum(self._bits[bookie] for bookie in back)
        sends = []
        for add in self._pending:
            mask = self._ws_masks[add.entry_id % self._ws_count] & bits & ~add.acked
            if mask:
                positions = tuple(p for p in self.write_set(add.entry_id) if mask >> p & 1)
                sends.append((add, positions))
        healed: tuple[str, ...] = ()
        if self._down:
            self._retry_due = now + self._retry_s  # the others: searched for again
        else:
            self._move(Event.BACK)
            self._retry_due = float("inf")
            healed, self._healed = tuple(sorted(self._healed)), set()
        return Effects(send=tuple(sends), healed=healed, back=tuple(sorted(back)))

    def replacement_wanted(self) -> Replacement:
        """What a search for replacements of the bookies down is to find (degraded)."""
        return Replacement(
            self._down, self.last_add_confirmed + 1, frozenset(self._failed_in_change)
        )
