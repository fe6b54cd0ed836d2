"""A subscription's state: what its consumers have acknowledged (pure).

A subscription consumes a named log from ``start`` on. ``mark`` is its cumulative
acknowledgement: every record at or before it is consumed (None: none yet). Records acked out
of order beyond the mark (``ack_individual``, as Pulsar's cursors keep them) are kept
compactly, as runs of consecutive entry ids within a ledger, at most ``ACKED_RUNS_MAX`` runs.
``epoch`` grows by one each time a consumer takes the subscription over; ``owner`` is the id
of the last one that did. A consumer's acks are written with its epoch: once another consumer
took over (a greater epoch), they are refused.

The mark advances over a run that continues it: in its ledger, or, given where sealed ledgers
end and which ledger follows (``ledger_after``), from a ledger's last record to the next
ledger's first.

Record batches (:mod:`bkeeper.namedlog.core.records`). The mark and the runs are of whole entries:
``mark = (L, E)`` says every record of entry E and before is consumed (``(L, -1)``: every
record before ledger L). Records of a batch acknowledged while others of it are not are kept
in ``partial``: per entry, its record count and the runs of indexes acknowledged; once all of
an entry's records are, it becomes an entry run (and may move the mark). A cumulative ack of
record I of a batch of n records, I < n - 1, moves the mark to the entry before and records
indexes 0..I of the entry as partial. Acks say how many records the entries they
touch hold (``counts``; absent: 1, a format-1 entry). Where a consumer resumes
(``resume_from``) is after the mark, past the indexes acknowledged at the head of the entry
there. A ``shared`` subscription is consumed by several consumers at once: each
takes a *claim* (consecutive records of one ledger, ``dispatched`` moves past them) that it
must acknowledge before ``until_ms``; a claim past its time with records not acknowledged is
taken by another consumer, which gets those records again.

Stored as JSON in the metadata store, under the log's node
(``<logs root>/<log>/subscriptions/<name>``)::

    {"format": 1, "ctime_ms": 1700000000000, "start": [12, 0], "mark": [14, 7],
     "acked": [[14, 9, 12], [15, 0, 0]], "partial": [[15, 3, 100, [[0, 9], [20, 20]]]],
     "epoch": 3, "owner": "host:1234",
     "mode": "shared", "dispatched": [15, 40],
     "claims": [{"consumer": "host:77", "ledger": 15, "first": 20, "last": 39,
                 "until_ms": 1700000030000}]}
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Literal

from bkeeper.common.errors import ConfigError, LogError, ProtocolError
from bkeeper.namedlog.core.records import Position

__all__ = [
    "ACKED_RUNS_MAX",
    "CLAIMS_MAX",
    "AckStore",
    "Claim",
    "EntryCounts",
    "Mode",
    "PartialEntry",
    "SubscriptionState",
    "check_subscription_name",
    "next_position",
]

#: Runs of records acked beyond the mark a subscription keeps at most (its node stays far
#: under ZooKeeper's 1 MiB limit: about 30 bytes a run).
ACKED_RUNS_MAX = 10_000
#: Claims a shared subscription holds at most (consumers wait for acks past it).
CLAIMS_MAX = 1_000
_FORMAT = 1
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")

AckedRun = tuple[int, int, int]  # (ledger id, first entry id, last entry id)
#: (ledger id, entry id, records in the entry, runs (first, last) of indexes acknowledged)
PartialEntry = tuple[int, int, int, tuple[tuple[int, int], ...]]
#: (ledger id, entry id) -> records in the entry, for the entries acks touch (absent: 1).
EntryCounts = Mapping[tuple[int, int], int]
Mode = Literal["exclusive", "shared"]
AckStore = Literal["metadata", "ledger"]
#: Sealed ledger id -> (its last entry id, the id of the ledger after it in the log).
LedgerAfter = Mapping[int, tuple[int, int]]


@dataclass(frozen=True)
class Claim:
    """Records ``first..last`` of ``ledger``, delivered to ``consumer``, to be acknowledged
    before ``until_ms`` (wall clock)."""

    consumer: str
    ledger: int
    first: int
    last: int
    until_ms: int


def check_subscription_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError(
            f"subscription name {name!r}: use 1 to 128 ASCII letters (A-Z, a-z), digits, "
            "'.', '_' or '-', starting with a letter or digit"
        )
    return name


def next_position(position: Position) -> Position:
    """The position right after ``position`` in its ledger (a reader starting there moves on
    to the next ledger if the ledger holds no more)."""
    return Position(position.ledger_id, position.entry_id + 1)


@dataclass(frozen=True)
class SubscriptionState:
    """See the module docstring."""

    ctime_ms: int
    start: Position
    mark: Position | None = None
    acked: tuple[AckedRun, ...] = ()
    epoch: int = 0
    owner: str = ""
    mode: Mode = "exclusive"
    dispatched: Position | None = None
    claims: tuple[Claim, ...] = ()
    #: The cursor ledger holding the newer state (:mod:`bkeeper.namedlog.stores.cursor_ledgers`).
    cursor: int | None = None
    #: Batches with some records acknowledged beyond the mark (see the module docstring).
    partial: tuple[PartialEntry, ...] = ()

    def with_progress_of(self, newer: SubscriptionState) -> SubscriptionState:
        """This state (epoch, owner, mode) with ``newer``'s acks (a cursor ledger's)."""
        return replace(
            self,
            mark=newer.mark,
            acked=newer.acked,
            dispatched=newer.dispatched,
            claims=newer.claims,
            partial=newer.partial,
        )

    @property
    def resume_from(self) -> Position:
        """Where a consumer starts reading: after the mark, else at the start (past the
        records acknowledged at the head of a batch there)."""
        base = self.start if self.mark is None else max(self.start, next_position(self.mark))
        for ledger, entry, _count, runs in self.partial:
            if (ledger, entry) == (base.ledger_id, base.entry_id):
                for first, last in runs:
                    if first <= base.index <= last:
                        return Position(ledger, entry, last + 1)
        return base

    @property
    def dispatch_from(self) -> Position:
        """Where a shared subscription's next claim starts."""
        return max(self.resume_from, self.dispatched or self.resume_from)

    def is_acked(self, position: Position) -> bool:
        ledger, entry, index = position
        if self.mark is not None and Position(ledger, entry) <= self.mark:
            return True
        if any(r[0] == ledger and r[1] <= entry <= r[2] for r in self.acked):
            return True
        return any(
            p[0] == ledger and p[1] == entry and any(a <= index <= b for a, b in p[3])
            for p in self.partial
        )

    def claim_done(self, claim: Claim) -> bool:
        """Every record of ``claim`` acknowledged."""
        if self.mark is not None and Position(claim.ledger, claim.last) <= self.mark:
            return True
        return any(
            r[0] == claim.ledger and r[1] <= claim.first and claim.last <= r[2] for r in self.acked
        )

    def expired_claims(self, now_ms: int) -> list[Claim]:
        """The claims past their ``until_ms`` at ``now_ms`` with records not acknowledged
        (another consumer may take them over), oldest first."""
        return [c for c in self.claims if c.until_ms < now_ms and not self.claim_done(c)]

    def with_claim(self, claim: Claim) -> SubscriptionState:
        """A new claim, from where dispatching was; ``LogError`` past :data:`CLAIMS_MAX`."""
        claims = tuple(c for c in self.claims if not self.claim_done(c))
        if len(claims) >= CLAIMS_MAX:
            raise LogError(f"{CLAIMS_MAX} claims not acknowledged yet: acknowledge first")
        after = Position(claim.ledger, claim.last + 1)
        return replace(self, claims=(*claims, claim), dispatched=max(after, self.dispatch_from))

    def with_claim_taken(self, old: Claim, new: Claim) -> SubscriptionState:
        """``old`` (past its time) taken over as ``new``."""
        return replace(self, claims=tuple(new if c == old else c for c in self.claims))

    def taken_over(self, owner: str) -> SubscriptionState:
        """The state once consumer ``owner`` took the subscription over (a new epoch)."""
        return replace(self, epoch=self.epoch + 1, owner=owner)

    def with_acks(
        self,
        cumulative: Position | None,
        individual: Iterable[Position],
        ledger_after: LedgerAfter | None = None,
        counts: EntryCounts | None = None,
    ) -> SubscriptionState:
        """The state with ``cumulative`` (everything at or before it) and the ``individual``
        positions acknowledged; ``counts`` gives the records of the batches they fall in.
        The mark never goes back; runs at or before it are dropped; it moves over a run that
        continues it (see the module docstring; ``ledger_after`` tells where sealed ledgers
        end). Claims fully acknowledged are dropped. ``LogError`` when the runs and partly
        acknowledged batches would exceed :data:`ACKED_RUNS_MAX`."""
        after = ledger_after or {}
        sizes = counts or {}
        mark = self.mark
        partial = {(p[0], p[1]): (p[2], [list(r) for r in p[3]]) for p in self.partial}
        spans = [list(r) for r in self.acked]

        def count_of(ledger: int, entry: int) -> int:
            known = partial.get((ledger, entry))
            return known[0] if known is not None else sizes.get((ledger, entry), 1)

        def add(ledger: int, entry: int, first: int, last: int) -> None:
            """Indexes ``first..last`` of an entry acknowledged."""
            count = count_of(ledger, entry)
            if first <= 0 and last >= count - 1:
                spans.append([ledger, entry, entry])
                partial.pop((ledger, entry), None)
                return
            runs = partial.setdefault((ledger, entry), (count, []))[1]
            runs.append([first, last])
            merged = _merged_indexes(runs)
            if merged == [[0, count - 1]]:
                spans.append([ledger, entry, entry])
                del partial[(ledger, entry)]
            else:
                partial[(ledger, entry)] = (count, merged)

        if cumulative is not None:
            ledger, entry, index = cumulative
            if index >= count_of(ledger, entry) - 1:
                upto = Position(ledger, entry)
            else:
                upto = Position(ledger, entry - 1)
                add(ledger, entry, 0, index)
            if mark is None or upto > mark:
                mark = upto
        for p in individual:
            add(p.ledger_id, p.entry_id, p.index, p.index)
        start = self.start
        if mark is None and start.index and (start.ledger_id, start.entry_id) in partial:
            add(start.ledger_id, start.entry_id, 0, start.index - 1)  # before the start
        runs = _merged(spans)
        first = runs[0] if runs else None
        if mark is None and first is not None:  # acked from the very start: a mark at last
            before = Position(start.ledger_id, start.entry_id - 1)
            if (first[0], first[1]) == (start.ledger_id, start.entry_id) or _continues(
                before, first, after
            ):
                mark = Position(first[0], first[2])
        if mark is not None:
            runs = _beyond(runs, mark)
            while runs and _continues(mark, runs[0], after):
                mark = Position(runs[0][0], runs[0][2])
                runs = runs[1:]
        kept = tuple(
            (ledger, entry, count, tuple((a, b) for a, b in ranges))
            for (ledger, entry), (count, ranges) in sorted(partial.items())
            if (mark is None or Position(ledger, entry) > mark)
            and not any(r[0] == ledger and r[1] <= entry <= r[2] for r in runs)
        )
        if len(runs) + len(kept) > ACKED_RUNS_MAX:
            raise LogError(
                f"more than {ACKED_RUNS_MAX} runs of records acknowledged out of order beyond "
                f"the mark {mark}: acknowledge cumulatively"
            )
        state = replace(self, mark=mark, acked=tuple(runs), partial=kept)
        return replace(state, claims=tuple(c for c in state.claims if not state.claim_done(c)))

    def encode(self) -> bytes:
        doc: dict[str, object] = {
            "format": _FORMAT,
            "ctime_ms": self.ctime_ms,
            "start": _listed(self.start),
            "epoch": self.epoch,
            "owner": self.owner,
        }
        if self.mark is not None:
            doc["mark"] = _listed(self.mark)
        if self.acked:
            doc["acked"] = [list(r) for r in self.acked]
        if self.partial:
            doc["partial"] = [[p[0], p[1], p[2], [list(r) for r in p[3]]] for p in self.partial]
        if self.mode != "exclusive":
            doc["mode"] = self.mode
        if self.dispatched is not None:
            doc["dispatched"] = _listed(self.dispatched)
        if self.cursor is not None:
            doc["cursor"] = self.cursor
        if self.claims:
            doc["claims"] = [
                {
                    "consumer": c.consumer,
                    "ledger": c.ledger,
                    "first": c.first,
                    "last": c.last,
                    "until_ms": c.until_ms,
                }
                for c in self.claims
            ]
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes, what: str = "subscription") -> SubscriptionState:
        try:
            doc = json.loads(data)
            if doc.get("format") != _FORMAT:
                raise ValueError(f"format {doc.get('format')!r} is not {_FORMAT}")
            mark = doc.get("mark")
            acked = tuple((int(r[0]), int(r[1]), int(r[2])) for r in doc.get("acked", ()))
            mode = doc.get("mode", "exclusive")
            if mode not in ("exclusive", "shared"):
                raise ValueError(f"mode {mode!r} is not exclusive or shared")
            dispatched = doc.get("dispatched")
            partial = tuple(
                (int(p[0]), int(p[1]), int(p[2]), tuple((int(a), int(b)) for a, b in p[3]))
                for p in doc.get("partial", ())
            )
            claims = tuple(
                Claim(
                    str(c["consumer"]),
                    int(c["ledger"]),
                    int(c["first"]),
                    int(c["last"]),
                    int(c["until_ms"]),
                )
                for c in doc.get("claims", ())
            )
            state = cls(
                int(doc["ctime_ms"]),
                Position(*(int(part) for part in doc["start"][:3])),
                Position(int(mark[0]), int(mark[1])) if mark is not None else None,
                acked,
                int(doc.get("epoch", 0)),
                str(doc.get("owner", "")),
                mode,
                Position(int(dispatched[0]), int(dispatched[1])) if dispatched else None,
                claims,
                int(doc["cursor"]) if doc.get("cursor") is not None else None,
                partial,
            )
        except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
            raise ProtocolError(f"{what} is unreadable: {exc}") from exc
        if any(r[1] > r[2] or r[1] < 0 for r in acked):
            raise ProtocolError(f"{what}: a run of acknowledged records is malformed")
        if any(p[2] < 2 or any(not 0 <= a <= b < p[2] for a, b in p[3]) for p in partial):
            raise ProtocolError(f"{what}: a partly acknowledged batch is malformed")
        return state


def _continues(mark: Position, run: AckedRun, after: LedgerAfter) -> bool:
    """Whether ``run`` starts right after ``mark``: in its ledger, or at the first record of
    the ledger after the mark's, the mark being its sealed ledger's last record."""
    if run[0] == mark.ledger_id:
        return run[1] == mark.entry_id + 1
    end = after.get(mark.ledger_id)
    return end is not None and end[0] == mark.entry_id and end[1] == run[0] and run[1] == 0


def _merged(spans: list[list[int]]) -> list[AckedRun]:
    """Runs sorted, overlapping or adjacent ones (same ledger) joined."""
    runs: list[list[int]] = []
    for ledger, first, last in sorted(spans):
        if runs and runs[-1][0] == ledger and first <= runs[-1][2] + 1:
            runs[-1][2] = max(runs[-1][2], last)
        else:
            runs.append([ledger, first, last])
    return [(r[0], r[1], r[2]) for r in runs]


def _beyond(runs: list[AckedRun], mark: Position) -> list[AckedRun]:
    """The parts of ``runs`` after ``mark``."""
    kept = []
    for ledger, first, last in runs:
        if ledger < mark.ledger_id or (ledger == mark.ledger_id and last <= mark.entry_id):
            continue
        kept.append(
            (ledger, max(first, mark.entry_id + 1) if ledger == mark.ledger_id else first, last)
        )
    return kept


def _merged_indexes(runs: list[list[int]]) -> list[list[int]]:
    """Index runs sorted, overlapping or adjacent ones joined."""
    merged: list[list[int]] = []
    for first, last in sorted(runs):
        if merged and first <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], last)
        else:
            merged.append([first, last])
    return merged


def _listed(position: Position) -> list[int]:
    """A position in JSON: ``[ledger, entry]``, and its index when not 0."""
    return list(position) if position.index else [position.ledger_id, position.entry_id]
